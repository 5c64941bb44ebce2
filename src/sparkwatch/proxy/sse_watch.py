"""Watches an OpenAI-compatible response as it streams past, without changing or holding a byte.

Fed the body chunk by chunk with the time each chunk arrived, it notes the first byte, the first and last
event that carried generated text (``content``, ``reasoning_content``/``reasoning``, a completion's ``text``
or a tool call's name or arguments: a role-only first chunk is not a token), the ``usage`` of the stream
and the finish reason; and the same of llama.cpp's own shape (``content``, ``stop_type``, token counts) and
of the Responses and Messages APIs (api_events). Pure and synchronous, so the proxy's per-chunk cost is
this parser's and it is tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from sparkwatch.core.windows import FINISH_REASON_MAX_CHARS, NS_MAX
from sparkwatch.defaults import CONTROL_CHARS_RE
from sparkwatch.proxy.api_events import Reading, read_event

TEXT_KEYS = ("content", "reasoning_content", "reasoning")
#: A non-streamed JSON answer is parsed at its end; past this size it is forwarded but not parsed.
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024
#: A streamed event (its data lines together) past this size is forwarded but not parsed (counted as
#: unparsed): a 100 MB line was held whole, and searched again at every chunk, slowing every stream.
MAX_EVENT_BYTES = MAX_JSON_BODY_BYTES


@dataclass(slots=True)
class ResponseStamps:
    """What one response told us, times in Unix epoch ns of the proxy's clock."""

    t_first_byte_ns: int | None = None
    t_first_token_ns: int | None = None
    t_last_token_ns: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False  # the stream's [DONE] arrived
    body_too_large: bool = False  # a JSON answer past MAX_JSON_BODY_BYTES: forwarded, not parsed
    error: bool = False  # an event (or the answer's body) was an error object
    no_stop_reason: bool = False  # its end said nothing of how it ended (api_events.Reading's)
    events: int = 0
    unparsed_events: int = 0


def _int(value: Any) -> int | None:
    """A count a window can hold (0 to 2^63 − 1, core.windows.NS_MAX), else unknown: one past it made the
    coordinator refuse the whole window, and the request's time with it."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= NS_MAX else None


def _has_text(choice: dict[str, Any]) -> bool:
    if isinstance(choice.get("text"), str) and choice["text"]:
        return True
    delta = choice.get("delta") or choice.get("message")
    if not isinstance(delta, dict):
        return False
    return any(isinstance(delta.get(k), str) and delta[k] for k in TEXT_KEYS) or _has_tool_call(delta)


def _has_tool_call(delta: dict[str, Any]) -> bool:
    """A streamed tool call's name or argument text: generated tokens too (OpenAI's ``delta.tool_calls``)."""
    calls = delta.get("tool_calls")
    if not isinstance(calls, list):
        return False
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and any(
            isinstance(function.get(k), str) and function[k] for k in ("name", "arguments")
        ):
            return True
    return False


class ResponseWatcher:
    """Feed every body chunk to :meth:`feed`; read :attr:`stamps` at the end."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.stamps = ResponseStamps()
        self._partial: list[bytes] = []  # the pieces of an SSE line not yet ended (searched once each)
        self._held = 0  # their bytes
        self._data_bytes = 0  # the bytes of the event's data lines so far
        self._overlong = False  # the event being read passed MAX_EVENT_BYTES: skipped to its end
        self._cut = False  # a line of it was dropped unended: what ends it is no line of its own
        self._after_cr = False  # the last chunk ended in CR: a LF that starts the next is its CRLF's
        self._data: list[bytes] = []  # data lines of the event being read
        self._name = b""  # the event's name (its ``event`` field): an ``error`` is one, whatever its data
        self._seen: dict[str, Any] = {}  # what this answer's earlier events said (api_events)
        self._body: list[bytes] | None = [] if not streaming else None
        self._body_bytes = 0

    def feed(self, chunk: bytes, t_ns: int) -> None:
        if not chunk:
            return
        if self.stamps.t_first_byte_ns is None:
            self.stamps.t_first_byte_ns = t_ns
        if not self.streaming:
            self._keep_body(chunk)
            return
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        if b"\n" not in chunk and b"\r" not in chunk:  # the line goes on: kept, never searched again
            self._hold(chunk)
            return
        text = b"".join((*self._partial, chunk)) if self._partial else chunk
        self._partial, self._held = [], 0
        if b"\r" in text:  # lines end in CRLF, LF or a lone CR (the WHATWG event-stream format)
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = text.split(b"\n")
        tail = lines.pop()
        if self._cut:  # the end of a dropped line (empty when it ended at this chunk's start): no blank line
            del lines[0]
            self._cut = False
        for line in lines:
            if not line:
                self._dispatch(t_ns)
            else:
                self._field(line)
        self._hold(tail)

    def _hold(self, piece: bytes) -> None:
        """Keep a piece of the line not yet ended, within the event's bound; past it, the event is skipped
        (still forwarded) to the blank line that ends it, and the rest of the line dropped as it comes."""
        if not piece or self._cut:  # the rest of a line being dropped
            return
        if not self._overlong:
            self._held += len(piece)
            if self._held + self._data_bytes <= MAX_EVENT_BYTES:
                self._partial.append(piece)
                return
            if (b"".join(self._partial[:5]) + piece).startswith(b"data:"):
                self._skip_event()
            else:  # a comment or another field: that line alone goes, the event's data stays readable
                self._partial, self._held = [], 0
        self._cut = True

    def _skip_event(self) -> None:
        self._overlong = True
        self._partial, self._held, self._data = [], 0, []

    def _field(self, line: bytes) -> None:
        """One SSE line; ``data`` and ``event`` matter here (``id``, ``retry`` and comments do not)."""
        if self._overlong:  # the rest of an event past its bound
            return
        if line.startswith(b"data:"):
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            self._data_bytes += len(line)
            if self._data_bytes > MAX_EVENT_BYTES:
                self._skip_event()
        elif line == b"data":  # a field with no colon has the empty value
            self._data.append(b"")
        elif line.startswith(b"event:"):
            self._name = line[6:].strip()

    def finish(self, t_ns: int) -> ResponseStamps:
        """Call once after the last chunk: flushes an event the server did not end with a blank line."""
        if self.streaming:
            if self._partial:
                self._field(b"".join(self._partial))
            self._partial, self._held, self._cut = [], 0, False
            self._dispatch(t_ns)
        elif self._body is not None and self._body:
            self._event(b"".join(self._body), t_ns, final_json=True)
            self._body = None
        return self.stamps

    def _keep_body(self, chunk: bytes) -> None:
        if self._body is None:
            return
        self._body_bytes += len(chunk)
        if self._body_bytes > MAX_JSON_BODY_BYTES:
            self._body = None  # too large to parse; still forwarded
            self.stamps.body_too_large = True
            return
        self._body.append(chunk)

    def _dispatch(self, t_ns: int) -> None:
        self._data_bytes = 0
        named, self._name = self._name, b""
        if named == b"error" and self._data and not self.stamps.done:  # llama.cpp's Messages error: not
            self.stamps.error = True  # Anthropic's JSON, but named as Anthropic's SDK reads it
        if self._overlong:  # an event too large to parse ended: counted (before [DONE]), its text unread
            self._overlong = False
            if not self.stamps.done:
                self.stamps.events += 1
                self.stamps.unparsed_events += 1
            return
        if not self._data:
            return
        if self.stamps.done:  # past [DONE] the stream is over for every client: nothing after it counts
            self._data = []
            return
        payload = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data = []
        if payload.strip() == b"[DONE]":
            self.stamps.done = True
            return
        self._event(payload, t_ns, final_json=False)

    def _event(self, payload: bytes, t_ns: int, final_json: bool) -> None:
        stamps = self.stamps
        stamps.events += 1
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            stamps.unparsed_events += 1
            return
        if not isinstance(event, dict):
            stamps.unparsed_events += 1
            return
        if event.get("error") or event.get("object") == "error":  # OpenAI's {"error": …}; vLLM's object
            stamps.error = True
        choices = event.get("choices")
        chat = isinstance(choices, list) or isinstance(event.get("stop"), bool)  # chat's, or llama.cpp's own
        if not chat and (reading := read_event(event, self._seen)) is not None:
            self._apply(reading, t_ns, final_json)
            return
        if isinstance(choices, list):
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                if not final_json and _has_text(choice):
                    self._token(t_ns)
                self._finished(choice.get("finish_reason"))
        elif isinstance(event.get("stop"), bool):
            self._native(event, t_ns, final_json)
        usage = event.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)

    def _native(self, event: dict[str, Any], t_ns: int, final_json: bool) -> None:
        """llama.cpp's own completion shape (``POST /completion`` and ``/completions``, streamed or not): no
        ``choices``; the text in ``content``, ``stop`` true on the last event with its ``stop_type`` (``eos``,
        ``word``, ``limit``; ``none`` when it did not stop), the prompt's tokens in ``tokens_evaluated`` and
        those generated so far in ``tokens_predicted``. Its ``tokens_cached`` is not the prompt's cached
        part (it counts the slot's whole cache), so the cached count stays unknown."""
        content = event.get("content")
        if not final_json and isinstance(content, str) and content:
            self._token(t_ns)
        if event["stop"] and event.get("stop_type") != "none":
            self._finished(event.get("stop_type"))
        prompt, predicted = event.get("tokens_evaluated"), event.get("tokens_predicted")
        self._usage({"prompt_tokens": prompt, "completion_tokens": predicted})

    def _apply(self, reading: Reading, t_ns: int, final_json: bool) -> None:
        """What a Responses or Messages event said (api_events)."""
        if reading.text and not final_json:
            self._token(t_ns)
        self._finished(reading.finish_reason)
        if reading.usage is not None:
            self._usage(reading.usage)
        self.stamps.error = self.stamps.error or reading.error
        self.stamps.no_stop_reason = self.stamps.no_stop_reason or reading.no_stop_reason
        self.stamps.done = self.stamps.done or reading.done

    def _token(self, t_ns: int) -> None:
        """An event that carried generated text arrived at ``t_ns``."""
        if self.stamps.t_first_token_ns is None:
            self.stamps.t_first_token_ns = t_ns
        self.stamps.t_last_token_ns = t_ns

    def _finished(self, reason: Any) -> None:
        """A finish reason, where one is given; a control character would lose the window (check_window)."""
        if isinstance(reason, str) and reason:
            self.stamps.finish_reason = CONTROL_CHARS_RE.sub("?", reason)[:FINISH_REASON_MAX_CHARS]

    def _usage(self, usage: dict[str, Any]) -> None:
        """The counts a usage gives; one it lacks (or gives as null) keeps what an earlier usage said (a last
        chunk's ``"usage": {}`` erased the stream's counts). A later count replaces an earlier one: a
        stream's running usage (vLLM's continuous_usage_stats) ends with its total; one given that is no
        count a window holds (past 2^63 − 1, negative, not an integer) makes it unknown."""
        prompt_details = usage.get("prompt_tokens_details")
        cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
        completion_details = usage.get("completion_tokens_details")
        reasoning = (
            completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
        )
        counts = {
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "cached_tokens": cached if cached is not None else usage.get("cached_tokens"),
            "reasoning_tokens": reasoning if reasoning is not None else usage.get("reasoning_tokens"),
        }
        for name, value in counts.items():
            if value is not None:
                setattr(self.stamps, name, _int(value))
