"""The Responses API (``POST /v1/responses``) and the Messages API (``POST /v1/messages``) through the proxy:
recorded answers of each (tests/fixtures/apis, with their sources) give a window with its token times,
counts and finish reason, however the bytes are split; an answer that says it failed, or that never says it
ended, is kept and not measured. Before, neither path made a window: a harness on either API measured
nothing, and nothing said why."""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import ClientSession, web

from helpers.loopback import served
from helpers.window_sink import ListSink
from sparkwatch.core.windows import Window
from sparkwatch.proxy.paths import NAMED_PATHS, TIMED, UntimedPosts
from sparkwatch.proxy.proxy import Proxy, ProxyConfig, make_proxy_runner
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sse_watch import ResponseStamps, ResponseWatcher

APIS = pathlib.Path(__file__).parent.parent / "fixtures" / "apis"


def _lines(name: str) -> list[bytes]:
    return (APIS / name).read_bytes().splitlines(keepends=True)


def _fed(lines: list[bytes], cuts: int = 1) -> ResponseStamps:
    """The stream fed a line at a time, line ``i`` at time ``i`` (each line cut into ``cuts`` pieces)."""
    watcher = ResponseWatcher(streaming=True)
    for t, line in enumerate(lines):
        step = max(1, -(-len(line) // cuts))
        for k in range(0, len(line), step):
            watcher.feed(line[k : k + step], t)
    return watcher.finish(len(lines))


def _at(lines: list[bytes], needle: bytes) -> int:
    """The first line holding ``needle``."""
    return next(i for i, line in enumerate(lines) if needle in line)


def _ended(lines: list[bytes], i: int) -> int:
    """When the event holding line ``i`` is read, in :func:`_fed`'s time: the blank line that ends it."""
    return next(j for j in range(i, len(lines)) if not lines[j].strip())


@pytest.mark.parametrize("cuts", [1, 3, 50])
def test_a_recorded_responses_stream_gives_its_token_times_usage_and_status(cuts: int) -> None:
    """OpenAI's own example stream (response.created … response.completed, no [DONE], as vLLM ends it)."""
    lines = _lines("openai_responses_stream.sse")
    stamps = _fed(lines, cuts)
    deltas = [
        i for i, line in enumerate(lines) if line.startswith(b'data: {"type":"response.output_text.delta')
    ]
    assert (stamps.t_first_byte_ns, stamps.t_first_token_ns) == (0, _ended(lines, deltas[0]))
    assert stamps.t_last_token_ns == _ended(lines, deltas[-1])
    assert (stamps.prompt_tokens, stamps.completion_tokens, stamps.reasoning_tokens) == (37, 11, 0)
    assert stamps.cached_tokens is None  # the example's usage has no input_tokens_details
    assert (stamps.finish_reason, stamps.done, stamps.error) == ("completed", True, False)
    assert stamps.unparsed_events == 0


@pytest.mark.parametrize(
    ("name", "first", "usage", "finish"),
    [
        ("anthropic_basic_response.sse", b'"text":"Hello"', (11, 6, None), "end_turn"),  # no cache counts
        # the tool call's arguments are generated text too; the first fragment of them is empty
        ("anthropic_tool_use_response.sse", b'"text":"I"', (377, 65, 0), "tool_use"),
        ("anthropic_thinking_refusal.sse", b'"thinking":"Simple educ"', (28, 106, 0), "refusal"),
    ],
)
@pytest.mark.parametrize("cuts", [1, 7])
def test_a_recorded_messages_stream_gives_its_token_times_usage_and_stop_reason(
    name: str, first: bytes, usage: tuple[int, int, int | None], finish: str, cuts: int
) -> None:
    """Anthropic's recorded streams (ping events, trailing spaces inside the JSON, no blank line after the
    last event): the first token is the first delta with text, thinking or a tool call's arguments; the
    counts are the last given (message_start's input, message_delta's cumulative output)."""
    lines = _lines(name)
    stamps = _fed(lines, cuts)
    assert stamps.t_first_token_ns == _ended(lines, _at(lines, first)), stamps
    deltas = [i for i, line in enumerate(lines) if line.startswith(b'data: {"type":"content_block_delta"')]
    untexted = (b'json":""}', b'king":""}', b"signature_delta")  # empty fragments, a signature
    texty = [i for i in deltas if not any(mark in lines[i] for mark in untexted)]
    assert stamps.t_last_token_ns == _ended(lines, max(texty)), stamps
    assert (stamps.prompt_tokens, stamps.completion_tokens, stamps.cached_tokens) == usage
    assert (stamps.finish_reason, stamps.done, stamps.error, stamps.unparsed_events) == (
        finish,
        True,
        False,
        0,
    )


def _sse(events: list[dict[str, Any]]) -> list[bytes]:
    """Each event as a server writes it (``event:`` its type, ``data:`` its JSON, a blank line)."""
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def _delta(kind: str, **field: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": kind, **field}}


def test_only_generated_text_stamps_a_messages_token_first_or_last() -> None:
    """A signature, an empty fragment and a text block's empty start stamp nothing, placed first and last;
    a tool call's name (its block's start) and its arguments do, as chat's tool calls do."""
    tool = {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "name": "get_weather"},
    }
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        _delta("thinking_delta", thinking=""),
        _delta("signature_delta", signature="c2ln"),
        tool,
        _delta("input_json_delta", partial_json=""),
        _delta("input_json_delta", partial_json='{"city":'),
        _delta("text_delta", text=""),
        _delta("signature_delta", signature="c2ln"),
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    ]
    stamps = _fed(_sse(events))
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (4, 6), stamps
    assert (stamps.finish_reason, stamps.completion_tokens, stamps.events) == ("tool_use", 4, len(events))


def test_a_responses_stream_of_reasoning_and_a_call_with_cached_input() -> None:
    """Reasoning text first, then a function call (its name with the item, its arguments as deltas), an
    empty delta last; the cached count is part of the prompt (input_tokens), not added to it."""
    usage = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 20},
    }
    call = {"type": "function_call", "name": "f", "arguments": ""}
    events = [
        {
            "type": "response.created",
            "response": {"object": "response", "status": "in_progress", "usage": None},
        },
        {"type": "response.output_item.added", "item": {"type": "reasoning", "summary": []}},
        {"type": "response.reasoning_text.delta", "delta": "Let me"},
        {"type": "response.output_item.added", "item": call},
        {"type": "response.function_call_arguments.delta", "delta": '{"x":1}'},
        {"type": "response.output_text.delta", "delta": ""},
        {
            "type": "response.completed",
            "response": {"object": "response", "status": "completed", "usage": usage},
        },
    ]
    stamps = _fed(_sse(events))
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (2, 4), stamps
    assert (stamps.prompt_tokens, stamps.cached_tokens) == (120, 100)
    assert (stamps.completion_tokens, stamps.reasoning_tokens, stamps.finish_reason) == (30, 20, "completed")
    assert stamps.done and stamps.events == len(events)


def test_messages_counts_its_cached_input_in_the_prompt_and_keeps_counts_a_later_event_leaves_out() -> None:
    """Anthropic's input_tokens excludes the cached parts (llama.cpp's newer server: input_tokens = prompt
    minus cached, cache_read_input_tokens = cached); message_delta gives output_tokens alone."""
    start = {"input_tokens": 20, "cache_read_input_tokens": 100, "output_tokens": 0}
    events = [
        {"type": "message_start", "message": {"type": "message", "usage": start}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    watcher = ResponseWatcher(streaming=True)
    for t, event in enumerate(events):
        watcher.feed(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode(), t)
    stamps = watcher.finish(9)
    assert (stamps.prompt_tokens, stamps.cached_tokens, stamps.completion_tokens) == (120, 100, 9)
    assert (stamps.t_first_token_ns, stamps.finish_reason, stamps.done) == (1, "max_tokens", True)


@pytest.mark.parametrize("done", [False, True])
def test_nothing_after_message_stop_counts(done: bool) -> None:
    """Anthropic and llama.cpp end a Messages stream with message_stop; vLLM then sends ``data: [DONE]``:
    a delta after either is no token and no event."""
    lines = [*_lines("anthropic_basic_response.sse"), b"\n\n", *([b"data: [DONE]\n\n"] if done else [])]
    lines += [b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"late"}}\n\n']
    stamps = _fed(lines)
    assert stamps.t_last_token_ns == _ended(lines, _at(lines, b'"text":"!"')) and stamps.done
    assert stamps.events == sum(1 for line in lines[:-1] if line.startswith(b"data: {"))


@pytest.mark.parametrize(
    ("stream", "error", "finish"),
    [
        # Anthropic's error event, as its SDK's test writes it
        ((APIS / "anthropic_error_event.sse").read_bytes(), True, None),
        # llama.cpp's Messages error: named error, its JSON not Anthropic's
        (b'event: error\ndata: {"code":500,"message":"boom","type":"server_error"}\n\n', True, None),
        # the Responses API's error event (the OpenAPI spec's example)
        (
            b'data: {"type":"error","code":"ERR_SOMETHING","message":"Something went wrong",'
            b'"param":null}\n\n',
            True,
            None,
        ),
        (
            b'data: {"type":"response.failed","response":{"object":"response","status":"failed",'
            b'"error":{"code":"server_error","message":"The model failed to generate a response."},'
            b'"usage":null}}\n\n',
            True,
            "failed",
        ),
        (
            b'data: {"type":"response.incomplete","response":{"object":"response","status":"incomplete",'
            b'"incomplete_details":{"reason":"max_output_tokens"},"usage":null}}\n\n',
            False,
            "max_output_tokens",
        ),
        # vLLM's aborted request (its harmony path): status cancelled, in its only end event
        (
            b'data: {"type":"response.completed","response":{"object":"response","status":"cancelled"}}\n\n',
            False,
            "cancelled",
        ),
    ],
)
def test_an_answer_that_says_it_failed_or_stopped_early_is_read_as_that(
    stream: bytes, error: bool, finish: str | None
) -> None:
    watcher = ResponseWatcher(streaming=True)
    watcher.feed(stream, 1)
    stamps = watcher.finish(2)
    assert (stamps.error, stamps.finish_reason) == (error, finish)


# ---- through the proxy ------------------------------------------------------------------------------------


#: Answers not streamed in the shapes the APIs' types give (anthropic-sdk-python's ``Message``; a Response
#: of status ``queued``, as a background request is answered), not recorded ones: none was found.
BODIES: dict[str, dict[str, Any]] = {
    "anthropic_message.json": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Hello there!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 2, "output_tokens": 6},
    },
    "queued_response.json": {
        "id": "resp_1",
        "object": "response",
        "status": "queued",
        "output": [],
        "usage": None,
    },
}


def _vllm_messages(stop_reason: str | None) -> bytes:
    """A Messages stream as vLLM's anthropic/serving.py writes one (``event:`` and ``data:`` lines, pydantic's
    ``exclude_unset`` JSON; message_stop from the chat stream's [DONE], then [DONE]), its final
    message_delta's stop_reason from ``stop_reason_map.get(finish_reason)``: null for an aborted request."""
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "chatcmpl-1",
                    "content": [],
                    "model": "m",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 12, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {"index": 0, "type": "content_block_start", "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"index": 0, "type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hel"}},
        ),
        ("content_block_stop", {"index": 0, "type": "content_block_stop"}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason},
                "usage": {"input_tokens": 12, "output_tokens": 3},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    text = "".join(f"event: {name}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n" for name, e in events)
    return text.encode() + b"data: [DONE]\n\n"


#: Streams written here from a server's source (none recorded was found), served as the files are.
STREAMS = {
    "vllm_messages_aborted.sse": _vllm_messages(None),
    "vllm_messages_stopped.sse": _vllm_messages("end_turn"),
}


async def _upstream(request: web.Request) -> web.StreamResponse:
    """Answers ``/v1/responses`` and ``/v1/messages`` with a recorded answer (``?f=`` its file), streamed a
    line at a time, or as JSON for a ``.json`` file; ``?cut=N`` ends the stream cleanly after N lines."""
    await request.read()
    name = request.query["f"]
    if name in BODIES:
        return web.json_response(BODIES[name])
    if name.endswith(".json"):
        return web.Response(body=(APIS / name).read_bytes(), content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    whole = STREAMS[name].splitlines(keepends=True) if name in STREAMS else _lines(name)
    lines = whole[: int(request.query.get("cut", 10**6))]
    for line in lines:
        await resp.write(line)
        await asyncio.sleep(0.002)
    await resp.write_eof()
    return resp


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[str, ListSink]]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", _upstream)
    up = web.AppRunner(app, access_log=None)
    await up.setup()
    await web.TCPSite(up, "127.0.0.1", 0).start()
    sink = ListSink()
    proxy = Proxy(ProxyConfig("http://{}:{}".format(*up.addresses[0][:2])), sink)
    runner = make_proxy_runner(proxy)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield "http://{}:{}".format(*runner.addresses[0][:2]), sink
    finally:
        proxy.closing()
        await runner.cleanup()
        await up.cleanup()


async def _through(url: str, sink: ListSink, path: str, query: str) -> tuple[bytes, Window]:
    async with ClientSession() as session, session.post(f"{url}{path}?{query}", json={}) as resp:
        body = await resp.read()
    async with asyncio.timeout(5):
        while not sink.windows:
            await asyncio.sleep(0.01)
    return body, sink.windows[-1]


@pytest.mark.parametrize(
    ("path", "name", "counts", "finish"),
    [
        ("/v1/responses", "openai_responses_stream.sse", (37, 11), "completed"),
        ("/v1/messages", "anthropic_tool_use_response.sse", (377, 65), "tool_use"),
    ],
)
async def test_a_streamed_answer_on_either_api_makes_a_measured_window(
    proxied: tuple[str, ListSink], path: str, name: str, counts: tuple[int, int], finish: str
) -> None:
    url, sink = proxied
    body, w = await _through(url, sink, path, f"f={name}")
    assert body == (APIS / name).read_bytes()  # passed unchanged
    assert not w.failed, w.source
    assert w.source["path"] == path and w.source["stream"] is True
    assert (w.prompt_tokens, w.completion_tokens, w.finish_reason) == (*counts, finish)
    assert w.t_first_byte_ns is not None and w.t_first_token_ns is not None and w.t_last_token_ns is not None
    assert w.t_start_ns <= w.t_first_byte_ns < w.t_first_token_ns <= w.t_last_token_ns <= w.t_end_ns


async def test_a_background_response_answered_queued_is_not_measured(proxied: tuple[str, ListSink]) -> None:
    """``"background": true``: the server answers at once, ``queued``, and generates later, unseen here."""
    url, sink = proxied
    _, w = await _through(url, sink, "/responses", "f=queued_response.json")  # llama.cpp's path, no /v1
    assert w.failed and w.source.get("upstream_no_completion") is True and w.finish_reason is None, w


@pytest.mark.parametrize(
    ("path", "name", "counts", "finish"),
    [
        ("/v1/responses", "openai_response.json", (36, 87, 0), "completed"),
        ("/v1/messages", "anthropic_message.json", (12, 6, 2), "end_turn"),  # the cached 2 in the prompt
    ],
)
async def test_an_answer_not_streamed_gives_its_counts_and_finish_reason(
    proxied: tuple[str, ListSink], path: str, name: str, counts: tuple[int, int, int], finish: str
) -> None:
    url, sink = proxied
    _, w = await _through(url, sink, path, f"f={name}")
    assert not w.failed, w.source
    assert (w.prompt_tokens, w.completion_tokens, w.cached_tokens, w.finish_reason) == (*counts, finish)
    assert w.t_first_token_ns is None  # a whole answer has no token times


@pytest.mark.parametrize(
    ("name", "failed"), [("vllm_messages_aborted.sse", True), ("vllm_messages_stopped.sse", False)]
)
async def test_a_messages_stream_that_stops_without_a_stop_reason_is_not_measured(
    proxied: tuple[str, ListSink], name: str, failed: bool
) -> None:
    """vLLM's Messages stream of a request it aborted (finish reason ``abort``; ``error`` and ``repetition``
    alike) ends as a complete one does, with message_stop and [DONE], but its stop reason is null: it was
    read as complete and measured. Anthropic's and llama.cpp's streams always give one."""
    url, sink = proxied
    _, w = await _through(url, sink, "/v1/messages", f"f={name}")
    assert w.failed is failed and w.source.get("upstream_no_completion", False) is failed, w.source
    assert (w.prompt_tokens, w.completion_tokens) == (12, 3) and w.t_first_token_ns is not None
    assert w.finish_reason == (None if failed else "end_turn")
    if failed:
        assert "a message's stop reason, streamed or not" in (w.failure() or "")


def test_a_messages_stream_that_never_gave_a_stop_reason_says_so() -> None:
    """No message_delta at all before message_stop: the same; one with a reason before it: none of that."""
    bare = _sse(
        [{"type": "message_start", "message": {"usage": {"input_tokens": 1}}}, {"type": "message_stop"}]
    )
    assert _fed(bare).no_stop_reason and _fed(bare).done
    assert not _fed(_lines("anthropic_basic_response.sse")).no_stop_reason


async def test_a_stream_that_ends_before_it_says_it_ended_is_not_measured(
    proxied: tuple[str, ListSink],
) -> None:
    """vLLM's Responses stream after an error mid-generation ends with no end event (vLLM PR #40418): cut
    here after the last text delta, the window is kept and says the upstream never finished."""
    url, sink = proxied
    lines = _lines("openai_responses_stream.sse")
    _, w = await _through(
        url, sink, "/v1/responses", f"f=openai_responses_stream.sse&cut={_at(lines, b'...')}"
    )
    assert w.failed and w.source.get("upstream_unfinished") is True, w.source


async def test_the_apis_other_paths_make_no_window(proxied: tuple[str, ListSink]) -> None:
    """Counting a prompt's tokens (Anthropic's /v1/messages/count_tokens) and cancelling a background
    response (/v1/responses/ID/cancel) are no generation."""
    url, sink = proxied
    async with ClientSession() as session:
        for path in ("/v1/messages/count_tokens", "/v1/responses/resp_1/cancel"):
            async with session.post(f"{url}{path}?f=openai_response.json", json={}) as resp:
                assert resp.status == 200
        await _through(url, sink, "/v1/messages", "f=anthropic_basic_response.sse")
    assert [w.source["path"] for w in sink.windows] == ["/v1/messages"]


def test_a_chat_chunk_is_read_as_chat_whatever_else_it_carries() -> None:
    """A chunk with ``choices`` (or llama.cpp's ``stop``) is chat's, even with a ``type`` another API uses."""
    watcher = ResponseWatcher(streaming=True)
    watcher.feed(b'data: {"type": "message", "choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n', 1)
    watcher.feed(b'data: {"type": "message_stop", "content": "yo", "stop": false}\n\n', 2)
    stamps = watcher.finish(3)
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns, stamps.done) == (1, 2, False)


async def test_posts_the_proxy_made_no_window_for_are_said_when_it_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A harness on an API the proxy does not read was measured as nothing, in silence (SGLang's native
    /generate was one); a fetch (GET) is no generation and is not counted."""

    async def answer(_request: web.Request) -> web.Response:
        return web.json_response({"text": "hi"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    async for upstream in served(app):
        requests = [
            ("POST", "/v1/embeddings"),
            ("POST", "/v1/embeddings"),
            ("POST", "/tokenize"),
            ("POST", "/api/generate"),  # Ollama's: another shape, not SGLang's /generate
            ("GET", "/v1/models"),
        ]
        with caplog.at_level(logging.WARNING, logger="sparkwatch.proxy.serve"):
            proxy = running_proxy("127.0.0.1", 0, ProxyConfig(upstream), ListSink())
            async with proxy as url, ClientSession() as session:
                for method, path in requests:
                    async with session.request(method, f"{url}{path}", json={}) as resp:
                        assert resp.status == 200
    said = [r.getMessage() for r in caplog.records if "made no window for" in r.getMessage()]
    assert said == [
        "the proxy relayed 4 POST request(s) it made no window for (/v1/embeddings ×2, /tokenize ×1,"
        " /api/generate ×1): it"
        f" times {TIMED}; any of these that generated was not measured (a harness on another API: import"
        " its result file instead)"
    ]


def test_untimed_posts_name_a_few_paths_and_count_the_rest() -> None:
    untimed = UntimedPosts()
    for k in range(NAMED_PATHS + 3):
        untimed.seen("POST", f"/v1/responses/r{k}/cancel")
    untimed.seen("POST", "/v1/responses/r0/cancel")
    untimed.seen("DELETE", "/v1/responses/r0")
    assert len(untimed.by_path) == NAMED_PATHS and untimed.by_path["/v1/responses/r0/cancel"] == 2
    assert untimed.others == 3 and ", 3 to other paths)" in (untimed.said() or "")
    assert UntimedPosts().said() is None


def _sglang_chunk(text: str, count: int, finish: Any = None, index: int | None = None) -> bytes:
    """A chunk of SGLang's native stream as its http_server writes it (``data: `` + one JSON line); a batch's
    or ``n`` > 1's carries its request's ``index``."""
    meta = {"id": "r1", "finish_reason": finish, "prompt_tokens": 5, "completion_tokens": count}
    meta["cached_tokens"] = 2
    chunk: dict[str, Any] = {"text": text, "output_ids": list(range(count)), "meta_info": meta}
    return b"data: " + json.dumps(chunk if index is None else {**chunk, "index": index}).encode()


@pytest.mark.parametrize("incremental", [False, True])
def test_sglangs_native_stream_stamps_a_token_where_its_count_grew(incremental: bool) -> None:
    """By default each chunk repeats the whole text so far (``--incremental-streaming-output`` streams the
    pieces); either way ``meta_info.completion_tokens`` grows with each token, and a chunk where it did not
    grow (the finished one repeating the last) carries none."""
    pieces = [" Paris", ".", " It"]
    texts = pieces if incremental else [" Paris", " Paris.", " Paris. It"]
    chunks = [_sglang_chunk(text, k + 1) for k, text in enumerate(texts)]
    chunks.append(_sglang_chunk(texts[-1] if not incremental else "", 3, {"type": "length", "length": 3}))
    stamps = _fed([*(c + b"\n\n" for c in chunks), b"data: [DONE]\n\n"])
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (0, 2), stamps
    assert (stamps.prompt_tokens, stamps.completion_tokens, stamps.cached_tokens) == (5, 3, 2)
    assert (stamps.finish_reason, stamps.done, stamps.error) == ("length", True, False)


@pytest.mark.parametrize(
    ("chunk", "finish", "error"),
    [
        # an abort comes as the last chunk's finish reason, not as an error object
        (_sglang_chunk("", 0, {"type": "abort", "message": "aborted", "status_code": 503}), "abort", False),
        (b'data: {"error": {"message": "the request failed"}}', None, True),
        (_sglang_chunk(" Paris.", 2, "stop"), "stop", False),  # a finish reason given as a string
    ],
)
def test_sglangs_abort_and_error(chunk: bytes, finish: str | None, error: bool) -> None:
    stamps = _fed([_sglang_chunk(" Paris", 1) + b"\n\n", chunk + b"\n\n", b"data: [DONE]\n\n"])
    assert (stamps.finish_reason, stamps.error, stamps.t_first_token_ns) == (finish, error, 0)


async def test_sglangs_native_generate_makes_a_window(proxied: tuple[str, ListSink]) -> None:
    """SGLang's own answer, not streamed (its docs' output): its counts and finish reason."""
    url, sink = proxied
    _, w = await _through(url, sink, "/generate", "f=sglang_generate.json")
    assert not w.failed, w.source
    assert (w.prompt_tokens, w.completion_tokens, w.cached_tokens, w.finish_reason) == (5, 32, 2, "length")


def test_sglangs_batch_stream_counts_each_request_and_sums_them() -> None:
    """A batch (or ``n`` > 1) streams its requests' chunks mixed, each with its ``index``: one running count
    for all of them took the shorter request's count for the whole, and missed its later tokens."""
    chunks = [
        _sglang_chunk("a", 1, index=0),
        _sglang_chunk("b", 1, index=1),
        _sglang_chunk("a a", 2, index=0),
        _sglang_chunk("a a a", 3, {"type": "length", "length": 3}, index=0),
        _sglang_chunk("b b", 2, index=1),
        _sglang_chunk("b b", 2, {"type": "stop", "matched": 2}, index=1),
    ]
    stamps = _fed([*(c + b"\n\n" for c in chunks), b"data: [DONE]\n\n"])
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (0, 4), stamps
    assert (stamps.prompt_tokens, stamps.completion_tokens, stamps.cached_tokens) == (10, 5, 4)
    assert (stamps.finish_reason, stamps.done) == ("stop", True)
