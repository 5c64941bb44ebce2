"""The Responses API (``POST /v1/responses``) and the Messages API (``POST /v1/messages``) through the proxy:
recorded answers of each (tests/fixtures/apis, with their sources) give a window with its token times,
counts and finish reason, however the bytes are split; an answer that says it failed, or that never says it
ended, is kept and not measured. Before, neither path made a window: a harness on either API measured
nothing, and nothing said why."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession, web

from helpers.window_sink import ListSink
from sparkwatch.core.windows import Window
from sparkwatch.proxy.proxy import Proxy, ProxyConfig, make_proxy_runner
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


def test_vllms_done_after_message_stop_and_a_late_event_count_nothing() -> None:
    """vLLM's Messages stream ends with message_stop and then ``data: [DONE]``: both end it once."""
    lines = [*_lines("anthropic_basic_response.sse"), b"\n\n", b"data: [DONE]\n\n"]
    lines += [b'data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"late"}}\n\n']
    stamps = _fed(lines)
    assert stamps.t_last_token_ns == _ended(lines, _at(lines, b'"text":"!"')) and stamps.done


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


async def _upstream(request: web.Request) -> web.StreamResponse:
    """Answers ``/v1/responses`` and ``/v1/messages`` with a recorded answer (``?f=`` its file), streamed a
    line at a time, or as JSON for a ``.json`` file; ``?cut=N`` ends the stream cleanly after N lines."""
    await request.read()
    name = request.query["f"]
    if name.endswith(".json"):
        return web.Response(body=(APIS / name).read_bytes(), content_type="application/json")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    lines = _lines(name)[: int(request.query.get("cut", 10**6))]
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


async def test_a_responses_answer_not_streamed_gives_its_counts_and_status(
    proxied: tuple[str, ListSink],
) -> None:
    url, sink = proxied
    _, w = await _through(url, sink, "/v1/responses", "f=openai_response.json")
    assert not w.failed, w.source
    assert (w.prompt_tokens, w.completion_tokens, w.cached_tokens, w.finish_reason) == (
        36,
        87,
        0,
        "completed",
    )
    assert w.t_first_token_ns is None  # a whole answer has no token times


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
    """Counting a prompt's tokens is no generation (Anthropic's /v1/messages/count_tokens)."""
    url, sink = proxied
    async with ClientSession() as session:
        async with session.post(f"{url}/v1/messages/count_tokens?f=openai_response.json", json={}) as resp:
            assert resp.status == 200
        await _through(url, sink, "/v1/messages", "f=anthropic_basic_response.sse")
    assert [w.source["path"] for w in sink.windows] == ["/v1/messages"]
