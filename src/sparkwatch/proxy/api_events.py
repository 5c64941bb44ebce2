"""The answers of the other generation APIs a server may serve, read into what a window needs: OpenAI's
Responses API (``POST /v1/responses``: vLLM, llama.cpp), Anthropic's Messages API (``POST /v1/messages``:
vLLM, llama.cpp) and SGLang's native ``POST /generate`` (what its bench_serving uses by default). Chat and
text completions are sse_watch's own; it hands each parsed event (or a whole JSON answer) here first.

Read from the real sources, not guessed (docs/integrations.md lists them): openai-python's response types
and its OpenAPI spec's examples, anthropic-sdk-python's types and recorded streams, and the servers of vLLM,
llama.cpp and SGLang. What differs between them is taken as each sends it: vLLM's Responses stream ends with
``response.completed`` whatever the status and no ``[DONE]``, its Messages stream with ``message_stop`` and
then ``[DONE]``; llama.cpp's Messages error event is named ``error`` but its JSON is not Anthropic's;
SGLang's chunks repeat the whole text so far (unless its server streams increments) and its counts."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, NamedTuple

#: The Responses API's events that end an answer; each carries the response with its status and usage.
RESPONSE_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})
#: A response's statuses that say how it ended (``queued`` and ``in_progress`` say it has not: a
#: ``background`` request is answered at once, queued, and generated later, unseen by the proxy).
RESPONSE_ENDED = frozenset({"completed", "incomplete", "failed", "cancelled"})
#: The output items a Responses stream adds whose name is generated text (a call's, as chat's tool call).
RESPONSE_CALLS = frozenset({"function_call", "custom_tool_call", "mcp_call"})
#: The Messages API's stream events (Anthropic's six, and ``ping``).
MESSAGE_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)
#: The Messages content blocks whose name is generated text (a tool call's, as chat's).
MESSAGE_CALLS = frozenset({"tool_use", "server_tool_use"})
#: Where a Messages ``content_block_delta`` holds generated text: an answer's, its thinking's, a tool call's
#: arguments (a signature or a citation is no generated text).
MESSAGE_TEXT_KEYS = ("text", "thinking", "partial_json")
#: Anthropic's input counts: ``input_tokens`` excludes the cached parts, so the prompt is their sum (its
#: SDK: "Total input tokens in a request is the summation of input_tokens, cache_creation_input_tokens,
#: and cache_read_input_tokens").
MESSAGE_INPUTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
#: Where ``seen`` keeps SGLang's counts so far, by request ``index`` (its chunks repeat them: a token is
#: where the completion count grew).
SGLANG_COUNTS = "sglang counts"
#: Where ``seen`` notes that a Messages stream gave its stop reason: Anthropic's and llama.cpp's final
#: ``message_delta`` always carries one; vLLM's carries null where its request ended as none of ``stop``,
#: ``length`` or ``tool_calls`` (``abort``, ``error``, ``repetition``: its stop_reason_map has no entry) and
#: still ends with ``message_stop``.
MESSAGES_STOPPED = "messages stop reason"
SGLANG_COUNT_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")


class Reading(NamedTuple):
    """What one event (or a whole answer) said; usage in chat's names (``prompt_tokens``,
    ``completion_tokens``, ``cached_tokens``, ``reasoning_tokens``)."""

    text: bool = False  # it carried generated text: a token's time
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False  # the answer's last event: nothing after it counts
    error: bool = False
    no_stop_reason: bool = False  # the answer ended without saying how (a Messages stream's message_stop)


def read_event(event: dict[str, Any], seen: MutableMapping[str, Any]) -> Reading | None:
    """``event`` read as one of these APIs' (a stream's event, or a whole answer), or None where it is none
    of theirs. ``seen``: what this answer's earlier events said (the Messages counts, which a
    ``message_delta`` may give in part; SGLang's count so far), kept by the caller and updated here."""
    if isinstance(meta := event.get("meta_info"), dict):
        return _sglang(event, meta, seen)
    kind = event.get("type")
    if kind == "error":  # both APIs' error event (and Anthropic's error body)
        return Reading(error=True)
    if isinstance(kind, str) and kind.startswith("response."):
        return _responses_event(kind, event)
    if event.get("object") == "response":  # a Responses answer not streamed
        return _response(event)
    if kind in MESSAGE_EVENTS or kind == "message":
        return _messages_event(kind, event, seen)
    return None


def _responses_event(kind: str, event: dict[str, Any]) -> Reading:
    """A Responses stream event: every ``*.delta`` carries generated output in ``delta`` (text, reasoning,
    a function call's arguments, a refusal); an end event carries the response."""
    if kind.endswith(".delta"):
        delta = event.get("delta")
        return Reading(text=isinstance(delta, str) and bool(delta))
    if kind == "response.output_item.added":  # a call's name comes with its item (chat: in a delta)
        return Reading(text=_named_call(event.get("item"), RESPONSE_CALLS))
    if kind in RESPONSE_ENDS:
        response = event.get("response")
        ended = _response(response) if isinstance(response, dict) else Reading()
        return ended._replace(done=True, error=ended.error or kind == "response.failed")
    return Reading()


def _response(response: dict[str, Any]) -> Reading:
    """A response object: its status as the finish reason where it ended (or why it is incomplete:
    ``max_output_tokens``, ``content_filter``), and its usage. ``failed`` is an error; ``cancelled`` (vLLM's
    for an aborted request) is a request given up (core.windows.GIVEN_UP); ``queued`` (a background
    request) gives none: nothing was generated in this answer."""
    status = response.get("status")
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    finish = reason if status == "incomplete" and isinstance(reason, str) else status
    usage = response.get("usage")
    return Reading(
        finish_reason=finish if status in RESPONSE_ENDED and isinstance(finish, str) else None,
        usage=_responses_usage(usage) if isinstance(usage, dict) else None,
        error=status == "failed" or bool(response.get("error")),
    )


def _responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """The Responses API's counts; its ``input_tokens`` include the cached ones, as chat's prompt does."""
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    return {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "cached_tokens": inputs.get("cached_tokens") if isinstance(inputs, dict) else None,
        "reasoning_tokens": outputs.get("reasoning_tokens") if isinstance(outputs, dict) else None,
    }


def _messages_event(kind: str, event: dict[str, Any], seen: MutableMapping[str, Any]) -> Reading:
    """A Messages stream event, or (``message``) a whole answer."""
    if kind == "content_block_delta":
        delta = event.get("delta")
        text = isinstance(delta, dict) and any(
            isinstance(delta.get(k), str) and delta[k] for k in MESSAGE_TEXT_KEYS
        )
        return Reading(text=text)
    if kind == "message_stop":
        return Reading(done=True, no_stop_reason=MESSAGES_STOPPED not in seen)
    if kind == "content_block_start":  # a tool call's name comes with its block (chat: in a delta)
        return Reading(text=_named_call(event.get("content_block"), MESSAGE_CALLS))
    holder = event.get("message") if kind == "message_start" else event
    stop_from = event.get("delta") if kind == "message_delta" else event
    usage = holder.get("usage") if isinstance(holder, dict) else None
    stop = stop_from.get("stop_reason") if isinstance(stop_from, dict) and kind != "message_start" else None
    if isinstance(stop, str) and stop:
        seen[MESSAGES_STOPPED] = True
    return Reading(
        finish_reason=stop if isinstance(stop, str) else None,
        usage=_messages_usage(usage, seen) if isinstance(usage, dict) else None,
    )


def _messages_usage(usage: dict[str, Any], seen: MutableMapping[str, Any]) -> dict[str, Any]:
    """The Messages counts so far: each count the latest given (``output_tokens`` is cumulative), the
    prompt the sum of its parts, the cached part ``cache_read_input_tokens``."""
    seen.update({k: v for k, v in usage.items() if v is not None})
    known = [seen[k] for k in MESSAGE_INPUTS if k in seen]
    return {
        "prompt_tokens": _summed(known) if known else None,
        "completion_tokens": seen.get("output_tokens"),
        "cached_tokens": seen.get("cache_read_input_tokens"),
    }


def _named_call(item: Any, kinds: frozenset[str]) -> bool:
    """An output item (a content block) that is a call of one of ``kinds`` with its name: generated text,
    as chat's streamed tool call name is."""
    if not isinstance(item, dict) or item.get("type") not in kinds:
        return False
    name = item.get("name")
    return isinstance(name, str) and bool(name)


def _sglang(event: dict[str, Any], meta: dict[str, Any], seen: MutableMapping[str, Any]) -> Reading:
    """A chunk of SGLang's native stream, or its whole answer: ``meta_info`` holds the counts so far
    (``completion_tokens`` grows with each token: a chunk where it grew carried generated tokens, whether
    the server repeats the whole text or streams increments, or sends no text) and, on the last,
    ``finish_reason`` as ``{"type": "length" | "stop" | "abort", …}``. A batch or ``n`` > 1 streams its
    requests' chunks mixed, each with its ``index``: the counts are kept per index and summed (the prompt
    once per index, as SGLang counts it), a token is any index's, the finish reason the last given."""
    index = event.get("index", 0)
    per: dict[Any, dict[str, Any]] = seen.setdefault(SGLANG_COUNTS, {})
    before = per.get(index, {}).get("completion_tokens")
    now = per[index] = {k: meta.get(k) for k in SGLANG_COUNT_KEYS}
    count = now["completion_tokens"]
    grew = isinstance(count, int) and count > (before if isinstance(before, int) else 0)
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    return Reading(
        text=grew,
        finish_reason=kind if isinstance(kind, str) else None,
        usage={k: _summed([c[k] for c in per.values()]) for k in SGLANG_COUNT_KEYS},
    )


def _summed(counts: list[Any]) -> Any:
    """The counts' sum; unknown (None) where one is missing, the first that is no count where one is not
    (the watcher makes that unknown)."""
    if any(c is None for c in counts):
        return None
    bad = [c for c in counts if not isinstance(c, int) or isinstance(c, bool)]
    return bad[0] if bad else sum(counts)
