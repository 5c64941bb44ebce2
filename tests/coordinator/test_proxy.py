"""The OpenAI-compatible proxy: the SSE watcher on its own, then real aiohttp servers on loopback —
bytes unchanged both ways, nothing buffered, stamps in order, phases, usage, errors, posting to a run."""

from __future__ import annotations

import asyncio
import itertools
import json
import pathlib
import re
import socket
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yarl
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.window_sink import ListSink
from sparkwatch.client import CoordinatorClient, CoordinatorTarget
from sparkwatch.commands.sim_model import SimModel, SimModelSpec, make_sim_model_app
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.windows import Window, check_window
from sparkwatch.proxy import sse_watch
from sparkwatch.proxy.proxy import Proxy, ProxyConfig, make_proxy_app, make_proxy_runner
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sinks import RunPoster
from sparkwatch.proxy.sse_watch import MAX_EVENT_BYTES, MAX_JSON_BODY_BYTES, ResponseWatcher
from sparkwatch.proxy.upstream_probe import upstream_warning
from sparkwatch.store import Store
from sparkwatch_agent.shared.http import COORDINATOR_SERVER, name_server
from sparkwatch_agent.shared.server_limits import ENV_HEADER_TIMEOUT_S


def sse(*events: dict[str, Any] | str) -> bytes:
    out = b""
    for e in events:
        out += b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
    return out


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
THINK = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
TOKEN = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
LAST = {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]}
USAGE = {
    "choices": [],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"reasoning_tokens": 1},
    },
}
STREAM = sse(ROLE, THINK, TOKEN, LAST, USAGE, "[DONE]")


def watch(chunks: list[bytes]) -> ResponseWatcher:
    watcher = ResponseWatcher(streaming=True)
    for t, chunk in enumerate(chunks, start=1):
        watcher.feed(chunk, t)
    watcher.finish(len(chunks) + 1)
    return watcher


def test_watcher_stamps_text_events_not_the_role_chunk() -> None:
    events = STREAM.split(b"\n\n")[:-1]
    stamps = watch([e + b"\n\n" for e in events]).stamps
    assert stamps.t_first_byte_ns == 1  # the role-only chunk is a byte, not a token
    assert stamps.t_first_token_ns == 2  # reasoning text counts as generated text
    assert stamps.t_last_token_ns == 4
    assert (stamps.prompt_tokens, stamps.completion_tokens) == (12, 3)
    assert (stamps.cached_tokens, stamps.reasoning_tokens) == (8, 1)
    assert stamps.finish_reason == "stop"
    assert (stamps.events, stamps.unparsed_events) == (5, 0)


def test_a_streamed_tool_call_is_generated_text() -> None:
    """A tool call streams its name, then its arguments in pieces, with no content: before, it had no first
    or last token, so its prefill and decode energy were unknown."""
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
    name = {"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]}
    args = [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": a}}]}}]}
            for a in ('{"city"', ': "Oslo"}')]  # fmt: skip
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    stamps = watch([sse(ROLE), sse(name), *(sse(a) for a in args), sse(end, "[DONE]")]).stamps
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (2, 4)
    assert stamps.finish_reason == "tool_calls" and stamps.done


def test_the_watcher_flags_a_json_answer_too_large_to_read() -> None:
    watcher = ResponseWatcher(streaming=False)
    watcher.feed(b" " * (MAX_JSON_BODY_BYTES + 1), 1)
    assert watcher.finish(2).body_too_large and watcher.stamps.completion_tokens is None


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), unique=True, max_size=30),
)
def test_watcher_reads_the_same_however_the_bytes_are_split(newline: bytes, cuts: list[int]) -> None:
    """Whatever ends the lines (LF, CRLF, a lone CR: all three are the event-stream format's) and however
    the bytes arrive: a CRLF split between two chunks is one line end, not a line and a blank line."""
    stream = STREAM.replace(b"\n", newline)
    bounds = [0, *sorted(c for c in cuts if c < len(stream)), len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    stamps = watch(chunks).stamps
    assert (stamps.prompt_tokens, stamps.completion_tokens, stamps.cached_tokens) == (12, 3, 8)
    assert stamps.finish_reason == "stop" and stamps.events == 5 and stamps.done
    assert stamps.t_first_token_ns is not None and stamps.t_last_token_ns is not None
    assert stamps.t_first_byte_ns == 1 <= stamps.t_first_token_ns <= stamps.t_last_token_ns


def test_watcher_handles_crlf_completions_and_a_missing_final_blank_line() -> None:
    body = (
        b'data: {"choices": [{"index": 0, "text": "a"}]}\r\n\r\n'
        b'data: {"choices": [{"index": 0, "text": "b", "finish_reason": "length"}]}\r\n\r\n'
        b"data: not json\r\n\r\n"
        b'data: {"usage": {"prompt_tokens": 2, "completion_tokens": 2}}'
    )
    cut = body.index(b"\r\n\r\n") + 4  # after the first event
    stamps = watch([body[:cut], body[cut:]]).stamps
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (1, 2)
    assert stamps.completion_tokens == 2 and stamps.finish_reason == "length"
    assert stamps.unparsed_events == 1


MULTILINE = b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "x"}}]}\n\ndata: [DONE]\n\n'


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=1, max_value=len(MULTILINE) - 1), unique=True, max_size=10),
)
def test_an_event_of_two_data_lines_is_one_event_however_split(newline: bytes, cuts: list[int]) -> None:
    """A CRLF cut between two chunks is one line end: read as a CR and then an empty line, it ended the
    event after its first data line (two unparsable halves)."""
    stream = MULTILINE.replace(b"\n", newline)
    bounds = [0, *sorted(c for c in cuts if c < len(stream)), len(stream)]
    stamps = watch([stream[a:b] for a, b in itertools.pairwise(bounds)]).stamps
    assert (stamps.events, stamps.unparsed_events, stamps.done) == (1, 0, True)
    assert stamps.t_first_token_ns is not None


def test_a_cr_only_event_is_read_when_its_chunk_arrives() -> None:
    """A lone CR ends a line at once: the event is stamped with its own chunk's time, not the next one's
    (a CR that ends a chunk is not held back to see whether a LF follows)."""
    role, token = (sse(e).replace(b"\n", b"\r") for e in (ROLE, TOKEN))
    stamps = watch([role, token, b"\n", sse(LAST)]).stamps
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns, stamps.events) == (2, 4, 3)


def test_a_data_field_with_no_colon_is_an_empty_line_of_the_event() -> None:
    event = b'data: {"choices": [{"index": 0,\ndata\ndata:"text": "x"}]}\n\n'
    stamps = watch([event]).stamps
    assert (stamps.t_first_token_ns, stamps.unparsed_events) == (1, 0)


@pytest.mark.parametrize("lines", [1, 9])
def test_an_event_past_the_bound_is_skipped_counted_and_the_stream_read_on(lines: int) -> None:
    """A 100 MB data line was held whole and searched again at each chunk (a minute of one core for the
    proxy, and 190 ms gaps in the other streams' stamps): past MAX_EVENT_BYTES, in one line or in many,
    the event is counted unparsed, its bytes dropped as they come, and the next event read as ever."""
    watcher = ResponseWatcher(streaming=True)
    watcher.feed(sse(ROLE), 1)
    line = b"x" * (MAX_EVENT_BYTES // lines // 64 * 64 + 64)  # together past the bound
    tracemalloc.start()
    for k in range(lines):
        watcher.feed(b'data: {"pad": "', 2)
        for at in range(0, len(line), 1 << 16):
            watcher.feed(line[at : at + (1 << 16)], 2)
        watcher.feed(b'"}\n' if k < lines - 1 else b'"}\n\n', 2)
    held_bytes = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    for t, event in enumerate((TOKEN, LAST), start=3):
        watcher.feed(sse(event), t)
    stamps = watcher.finish(5)
    assert (stamps.events, stamps.unparsed_events) == (4, 1)
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (3, 4)
    assert held_bytes < 2 * MAX_EVENT_BYTES  # the line was never joined into one string past the bound


BIG = b"data: " + b"x" * 150 + b"\ndata: more\n: a comment\n\n"  # one event of 160 data bytes


# the bound patched the same way for every example: the fixture's scope does not matter here
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(
        st.integers(min_value=1, max_value=len(sse(ROLE) + BIG + sse(TOKEN, LAST)) - 1), max_size=12
    ),
)
def test_an_event_past_the_bound_is_one_skipped_event_however_split(
    monkeypatch: pytest.MonkeyPatch, newline: bytes, cuts: list[int]
) -> None:
    """A line dropped as too long that ended exactly at a chunk's start read as a blank line: it ended the
    event early, and its next data line was read as an event of its own."""
    monkeypatch.setattr(sse_watch, "MAX_EVENT_BYTES", 100)
    stream = (sse(ROLE) + BIG + sse(TOKEN, LAST)).replace(b"\n", newline)
    bounds = [0, *sorted({c for c in cuts if c < len(stream)}), len(stream)]
    stamps = watch([stream[a:b] for a, b in itertools.pairwise(bounds)]).stamps
    assert (stamps.events, stamps.unparsed_events) == (4, 1)
    assert stamps.finish_reason == "stop" and stamps.t_first_token_ns is not None


def test_a_comment_line_past_the_bound_is_dropped_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """An over-bound line that is no data line (a comment, here) made its whole event unreadable."""
    monkeypatch.setattr(sse_watch, "MAX_EVENT_BYTES", 100)
    token = sse(TOKEN)
    event = b": " + b"c" * 150 + b"\n" + token  # the comment, then the token's data line and blank line
    stamps = watch([event[:60], event[60:130], event[130:], sse(LAST)]).stamps
    assert (stamps.events, stamps.unparsed_events) == (2, 0)
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (3, 4)


def test_a_llama_cpp_native_stream_is_stamped_counted_and_finished() -> None:
    """llama.cpp's own stream (``POST /completion`` with ``"stream": true``): partial results with their
    text in ``content`` and running counts, a last one with ``stop`` true, its ``stop_type`` and timings
    (tools/server/server-task.cpp, ``to_json_non_oaicompat`` of a partial and of a final result)."""
    part = {"index": 0, "tokens": [], "stop": False, "id_slot": 0, "tokens_evaluated": 5}
    last = {
        **part,
        "content": "",
        "stop": True,
        "tokens_predicted": 2,
        "stop_type": "limit",
        "stopping_word": "",
        "tokens_cached": 7,
        "timings": {"cache_n": 0, "prompt_n": 5, "predicted_n": 2},
    }
    events = [
        {**part, "content": "", "tokens_predicted": 0, "prompt_progress": {"total": 5, "processed": 5}},
        {**part, "content": "he", "tokens_predicted": 1},
        {**part, "content": "llo", "tokens_predicted": 2},
        last,
    ]
    stamps = watch([sse(e) for e in events]).stamps
    assert (stamps.t_first_token_ns, stamps.t_last_token_ns) == (2, 3)  # not the progress, not the last
    assert (stamps.prompt_tokens, stamps.completion_tokens, stamps.cached_tokens) == (5, 2, None)
    assert stamps.finish_reason == "limit" and stamps.unparsed_events == 0
    cut = watch([sse(e) for e in events[:3]]).stamps  # the stream ended before its last result
    assert cut.finish_reason is None and cut.t_last_token_ns == 3


def test_non_streamed_json_gives_usage_but_no_token_times() -> None:
    watcher = ResponseWatcher(streaming=False)
    body = json.dumps(
        {"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}], "usage": USAGE["usage"]}
    ).encode()
    watcher.feed(body[:10], 5)
    watcher.feed(body[10:], 6)
    stamps = watcher.finish(7)
    assert stamps.t_first_byte_ns == 5 and stamps.t_first_token_ns is None
    assert (stamps.completion_tokens, stamps.finish_reason) == (3, "stop")


# ---- real servers --------------------------------------------------------------------------------


async def serve(app: web.Application, **runner_kwargs: Any) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, **runner_kwargs)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


class Upstream:
    """An upstream that records what it received and streams STREAM in pieces, each piece only after the
    client saw the previous one — a buffering proxy would deadlock it."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes, dict[str, str]]] = []
        self.client_saw = asyncio.Event()
        self.pieces = [STREAM[:30], STREAM[30:200], STREAM[200:]]
        self.handshake = True

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append((request.path_qs, await request.read(), dict(request.headers)))
        if request.path == "/v1/models":
            return web.json_response({"data": []}, headers={"X-Upstream": "yes"})
        if "fail" in request.query:
            return web.json_response({"error": "overloaded"}, status=500)
        if "slow" in request.query:
            await asyncio.sleep(float(request.query["slow"]))
        headers = {"Content-Type": "text/event-stream", "X-Upstream": "yes", "Server": "upstream-llm/1.0"}
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        try:
            for piece in self.pieces:
                self.client_saw.clear()
                await resp.write(piece)
                if self.handshake:
                    async with asyncio.timeout(5):
                        await self.client_saw.wait()
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the proxy dropped us because its client hung up
        return resp


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    up = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", up.handle)
    runner, url = await serve(app, auto_decompress=False)  # records bodies exactly as they arrive
    yield up, url
    await runner.cleanup()


async def proxied(upstream_url: str, warmup: int = 0) -> tuple[web.AppRunner, str, ListSink]:
    sink = ListSink()
    runner, url = await serve(make_proxy_app(Proxy(ProxyConfig(upstream_url, warmup=warmup), sink)))
    return runner, url, sink


async def test_stream_passes_unchanged_and_unbuffered(upstream: tuple[Upstream, str]) -> None:
    up, up_url = upstream
    runner, url, sink = await proxied(up_url)
    body = b'{"model": "m", "stream": true,  "messages": [{"role": "user", "content": "hi"}]}'
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{url}/v1/chat/completions?x=1",
                data=body,
                headers={"Authorization": "Bearer upstream-key", "X-Sparkwatch-Phase": "timed"},
            ) as resp,
        ):
            got = b""
            async for chunk in resp.content.iter_any():
                got += chunk
                up.client_saw.set()
            assert resp.headers["X-Upstream"] == "yes"
            # RFC 9110 §7.6.3: the hop is said in Via both ways; the answer keeps its origin's Server
            assert re.fullmatch(r"1\.1 sparkwatch-proxy \([0-9a-f]{6}\)", resp.headers["Via"])
            assert resp.headers["Server"] == "upstream-llm/1.0"  # the upstream's, not the proxy's
    finally:
        await runner.cleanup()
    assert got == STREAM
    path, received, headers = up.received[0]
    assert (path, received) == ("/v1/chat/completions?x=1", body)
    assert headers["Authorization"] == "Bearer upstream-key" and re.fullmatch(
        r"1\.1 sparkwatch-proxy \([0-9a-f]{6}\)", headers["Via"]
    )
    assert "X-Sparkwatch-Phase" not in headers  # our header is ours
    (w,) = sink.windows
    assert w.phase == "timed" and w.http_status == 200 and w.finish_reason == "stop"
    assert (w.prompt_tokens, w.completion_tokens, w.cached_tokens, w.reasoning_tokens) == (12, 3, 8, 1)
    assert w.t_first_byte_ns and w.t_first_token_ns and w.t_last_token_ns
    assert w.t_start_ns <= w.t_first_byte_ns <= w.t_first_token_ns <= w.t_last_token_ns <= w.t_end_ns
    assert w.source["kind"] == "proxy" and w.source["stream"] is True


async def test_warmup_count_header_and_passthrough(upstream: tuple[Upstream, str]) -> None:
    up, up_url = upstream
    up.handshake = False
    runner, url, sink = await proxied(up_url, warmup=1)
    try:
        async with aiohttp.ClientSession() as session:
            for headers in ({}, {}, {"X-Sparkwatch-Phase": "warmup"}, {}):
                async with session.post(f"{url}/v1/completions", data=b"{}", headers=headers) as resp:
                    assert resp.status == 200
                    await resp.read()
            async with session.get(f"{url}/v1/models") as resp:
                assert resp.status == 200 and (await resp.json()) == {"data": []}
            async with session.post(
                f"{url}/v1/completions", data=b"{}", headers={"X-Sparkwatch-Phase": "Bad Phase"}
            ) as resp:
                assert resp.status == 400 and resp.headers["Server"] == "sparkwatch-proxy"  # its own answer
                assert (await resp.json())["error"]["code"] == "invalid_phase" and "Via" not in resp.headers
    finally:
        await runner.cleanup()
    assert [w.phase for w in sink.windows] == ["warmup", "timed", "warmup", "timed"]
    assert len({w.id for w in sink.windows}) == 4
    assert len(up.received) == 5  # the refused request never went upstream; /v1/models made no window


async def test_upstream_down_is_a_502_with_a_reason_and_uses_no_warmup_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # discard port: nothing listens; the upstream's credentials must show neither in the log nor the answer
    runner, url, sink = await proxied("http://user:pw-SECRET@127.0.0.1:9", warmup=1)
    try:
        query = f"{url}/v1/completions?api_key=q-SECRET"
        async with aiohttp.ClientSession() as session, session.post(query, data=b"{}") as r:
            assert r.status == 502
            answer = await r.json()
    finally:
        await runner.cleanup()
    # an OpenAI client's error shape: the client reads error.message (a bare "bad_gateway" lost the reason)
    assert answer["error"]["code"] == answer["error"]["type"] == "bad_gateway"
    assert "127.0.0.1:9" in answer["error"]["message"] and answer["error"]["param"] is None
    assert (
        "upstream http://127.0.0.1:9/v1/completions did not answer: Connection refused" in caplog.text
    )  # not "ssl:default"
    assert answer["error"]["message"] == "upstream http://127.0.0.1:9 did not answer: Connection refused"
    assert "SECRET" not in caplog.text + json.dumps(answer)
    (w,) = sink.windows  # reported (and, being a failure, never measured)
    assert (w.http_status, w.phase, w.source["upstream_unreachable"]) == (502, "warmup", True)
    assert w.failed


async def test_encoded_paths_and_compressed_bodies_pass_as_they_are(upstream: tuple[Upstream, str]) -> None:
    import gzip

    up, up_url = upstream
    sink = ListSink()
    runner = make_proxy_runner(Proxy(ProxyConfig(up_url), sink))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = "http://{}:{}".format(*runner.addresses[0][:2])
    body = gzip.compress(b'{"model": "m"}')
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(yarl.URL(f"{url}/v1/models/org%2Fmodel?q=a%20b", encoded=True)) as r:
                assert r.status == 200
            headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
            async with session.get(f"{url}/v1/models", data=body, headers=headers) as r:
                assert r.status == 200
    finally:
        await runner.cleanup()
    assert up.received[0][0] == "/v1/models/org%2Fmodel?q=a%20b"
    assert up.received[1][1] == body and up.received[1][2]["Content-Encoding"] == "gzip"


class FlakyCoordinator:
    """Answers window posts like the API does: 409 for an id it has, 422 for a window marked bad."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.posts = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.posts += 1
        windows = (await request.json())["windows"]
        ids = [w["id"] for w in windows]
        if any(w["phase"] == "bad" for w in windows):
            return web.json_response({"error": "invalid_body", "reason": "bad phase"}, status=422)
        if any(i in self.stored for i in ids):
            return web.json_response({"error": "duplicate_window_ids", "reason": "duplicate"}, status=409)
        self.stored.update({w["id"]: w for w in windows})
        return web.json_response({"stored": len(windows)}, status=201)


async def test_run_poster_keeps_going_past_refused_windows() -> None:
    fake = FlakyCoordinator()
    app = web.Application()
    app.router.add_post("/v1/runs/r1/windows", fake.handle)
    runner, url = await serve(app)
    client = CoordinatorClient(CoordinatorTarget(url, None))
    poster = RunPoster(client, "r1", batch_delay_s=0.05)
    fake.stored["dup"] = {}  # as if an earlier post had been stored but its answer lost
    poster.start()
    try:
        for wid, phase in (("dup", "timed"), ("a", "timed"), ("x", "bad"), ("b", "timed")):
            poster.submit(Window(wid, phase, 10, 20))
        await asyncio.sleep(0.3)
        poster.submit(Window("late", "timed", 10, 20))  # arrives just before close
        lost = await poster.close()
    finally:
        await client.close()
        await runner.cleanup()
    assert sorted(fake.stored) == ["a", "b", "dup", "late"]
    assert [w.id for w in lost] == ["x"] and poster.stored == 4  # dup counts: it is stored


async def test_sim_model_through_the_proxy_into_a_coordinator_run(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    coordinator = Coordinator([], store)
    coord_runner, coord_url = await serve(make_app(coordinator, None))
    model_runner, model_url = await serve(make_sim_model_app(SimModel(SimModelSpec(tokens_per_s=500.0))))
    client = CoordinatorClient(CoordinatorTarget(coord_url, None))
    run = await client.create_run("proxy-test")
    poster = RunPoster(client, run["id"], batch_delay_s=0.01)
    poster.start()
    proxy_runner, proxy_url = await serve(make_proxy_app(Proxy(ProxyConfig(model_url, warmup=1), poster)))
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                body = {"messages": [{"role": "user", "content": "a b c"}], "max_tokens": 20, "stream": True,
                        "stream_options": {"include_usage": True}}  # fmt: skip
                async with session.post(f"{proxy_url}/v1/chat/completions", json=body) as resp:
                    text = await resp.text()
                    assert text.endswith("data: [DONE]\n\n")
        assert await poster.close() == []
        windows = store.windows(run["id"])
    finally:
        await proxy_runner.cleanup()
        await client.close()
        await model_runner.cleanup()
        await coord_runner.cleanup()
        store.close()
    assert [w.phase for w in windows] == ["warmup", "timed", "timed"]
    for w in windows:
        assert (w.prompt_tokens, w.completion_tokens, w.finish_reason, w.http_status) == (
            3,
            20,
            "length",
            200,
        )
        assert w.t_first_token_ns is not None and w.t_last_token_ns is not None
        # 20 tokens at 500 tok/s: the first-to-last token span is 19 periods = 38 ms (loopback, loose)
        assert 0.030 < (w.t_last_token_ns - w.t_first_token_ns) / 1e9 < 0.2


async def test_a_client_hanging_up_keeps_the_window_and_logs_no_error(
    upstream: tuple[Upstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    up, up_url = upstream
    up.pieces = [STREAM[:30]] + [b": keep-alive\n\n" * 2000] * 20  # enough bytes to hit a closed socket
    runner, url, sink = await proxied(up_url)
    try:
        async with aiohttp.ClientSession() as session:
            resp = await session.post(f"{url}/v1/chat/completions", data=b"{}")
            await resp.content.readany()
            resp.close()  # hang up mid-stream
            for _ in range(25):
                up.client_saw.set()
                await asyncio.sleep(0.02)
        for _ in range(100):
            if sink.windows:
                break
            await asyncio.sleep(0.02)
    finally:
        await runner.cleanup()
    (w,) = sink.windows
    assert w.source.get("client_disconnected") is True
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_warmup_slots_go_by_arrival_and_a_failed_warmup_gives_its_slot_back(
    upstream: tuple[Upstream, str],
) -> None:
    up, up_url = upstream
    up.handshake = False
    runner, url, sink = await proxied(up_url, warmup=1)
    try:
        async with aiohttp.ClientSession() as session:

            async def post(query: str) -> int:
                async with session.post(f"{url}/v1/completions?{query}", data=b"{}") as resp:
                    await resp.read()
                    return resp.status

            assert await post("fail=1") == 500  # the first to arrive fails: its slot is given back
            # the next to arrive is long and ends last; the one after is short and ends first
            long_first = asyncio.create_task(post("slow=0.4&id=cold"))
            await asyncio.sleep(0.1)
            assert await post("id=warm") == 200
            assert await long_first == 200
    finally:
        await runner.cleanup()
    by_end = [(w.http_status, w.phase) for w in sink.windows]
    assert by_end == [(500, "warmup"), (200, "timed"), (200, "warmup")]


class DroppingCoordinator(FlakyCoordinator):
    """Answers 503 once for the window "b" posted alone: a transit failure in the middle of a retry."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = False

    async def handle(self, request: web.Request) -> web.Response:
        windows = (await request.json())["windows"]
        if [w["id"] for w in windows] == ["b"] and not self.dropped:
            self.dropped = True
            return web.json_response({"error": "unavailable"}, status=503)
        return await super().handle(request)


async def test_a_transit_error_during_a_window_by_window_retry_counts_nothing_twice() -> None:
    fake = DroppingCoordinator()
    app = web.Application()
    app.router.add_post("/v1/runs/r1/windows", fake.handle)
    runner, url = await serve(app)
    client = CoordinatorClient(CoordinatorTarget(url, None))
    poster = RunPoster(client, "r1", batch_delay_s=0.05)
    poster.start()
    try:
        for wid, phase in (("a", "timed"), ("x", "bad"), ("b", "timed"), ("c", "timed")):
            poster.submit(Window(wid, phase, 10, 20))
        await asyncio.sleep(1.0)  # the first retry waits 0.5 s
        lost = await poster.close()
    finally:
        await client.close()
        await runner.cleanup()
    assert fake.dropped and sorted(fake.stored) == ["a", "b", "c"]
    assert poster.stored == 3 and [w.id for w in lost] == ["x"]


async def test_an_upstream_given_as_a_clients_base_url_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`--upstream http://host:8000/v1` (a client's base URL) sends every request to /v1/v1/…: said at
    the start, without the URL's credentials."""
    config = ProxyConfig("http://user:pw@127.0.0.1:1/v1/")
    async with running_proxy("127.0.0.1", 0, config, ListSink()):
        pass
    (said,) = [r.getMessage() for r in caplog.records if "ends in /v1" in r.getMessage()]
    assert "http://127.0.0.1:1/v1/v1/chat/completions" in said and "pw" not in said, said
    caplog.clear()
    async with running_proxy("127.0.0.1", 0, ProxyConfig("http://127.0.0.1:1"), ListSink()):
        pass
    assert "ends in /v1" not in caplog.text


async def test_an_upstream_that_does_not_answer_is_said_once_when_the_proxy_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A model server not up yet, or a wrong port, was found by the benchmark's first request's 502: the
    start now says so, once, in the system's words and without the URL's credentials. Any HTTP answer
    (here a 404 to a HEAD of the root, after one that warned nothing) is an upstream that is there."""
    async with running_proxy("127.0.0.1", 0, ProxyConfig("http://user:pw@127.0.0.1:1"), ListSink()):
        pass
    (said,) = [r.getMessage() for r in caplog.records if "the upstream " in r.getMessage()]
    assert said == (
        "the upstream http://127.0.0.1:1 cannot be reached (Connection refused):"
        " requests through the proxy get 502 until it can"
    )
    caplog.clear()
    asked: list[tuple[str, str]] = []

    async def not_found(request: web.Request) -> web.Response:
        asked.append((request.method, request.path))
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner, url = await serve(app)
    try:
        async with running_proxy("127.0.0.1", 0, ProxyConfig(url), ListSink()):
            pass
    finally:
        await runner.cleanup()
    assert "the upstream " not in caplog.text
    assert asked == [("HEAD", "/")]  # one HEAD, nothing more
    # a coordinator's port given as the model server's (the CLI knows one by its Server header)
    coordinator = web.Application()
    name_server(coordinator, COORDINATOR_SERVER)
    runner, url = await serve(coordinator)
    try:
        said = await upstream_warning(url, url)
    finally:
        await runner.cleanup()
    assert said == (
        f"the upstream {url} is a sparkwatch-coordinator, not a model server: check the upstream URL"
    )


async def test_an_upstream_that_takes_the_connection_but_never_answers_is_said_as_that_and_let_go() -> None:
    """No answer in the probe's time is not said to mean 502s (the proxy waits longer than the probe); and
    a proxy whose start is cancelled while it probes lets its port go."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # held open, never answered

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    upstream = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        said = await upstream_warning(upstream, upstream, timeout_s=0.3)
        assert said == f"the upstream {upstream} did not answer a HEAD within 0.3 s: check that it is up"
        with socket.socket() as probe:  # a port for the proxy, known before it binds
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]

        async def start() -> None:
            async with running_proxy("127.0.0.1", port, ProxyConfig(upstream), ListSink()):
                pass

        starting = asyncio.create_task(start())
        await asyncio.sleep(0.5)  # listening, and inside the 3 s probe
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        with socket.socket() as again:  # the listener was closed on the way out
            again.bind(("127.0.0.1", port))
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_the_connection_guards_refusals_reach_an_openai_client_in_openai_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A socket that sends no request before the header deadline gets the guard's 408; an OpenAI client
    reads ``error.message``, which sparkwatch's own ``{"error", "reason"}`` left it without."""
    monkeypatch.setenv(ENV_HEADER_TIMEOUT_S, "0.3")
    async with running_proxy("127.0.0.1", 0, ProxyConfig("http://127.0.0.1:1"), ListSink()) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        async with asyncio.timeout(5.0):
            head, _, body = (await reader.read()).partition(b"\r\n\r\n")
        writer.close()
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"\r\nServer: sparkwatch-proxy\r\n" in head  # the proxy's own answer, named as its others are
    error = json.loads(body)["error"]
    assert error["code"] == error["type"] == "request_timeout" and error["param"] is None
    assert error["message"] == "the request headers did not arrive within 0.3 s"


def test_a_finish_reason_the_window_rules_refuse_is_made_one_they_take() -> None:
    """An engine's finish_reason with a control character, or longer than 64 characters: the window rules
    refuse either, and the coordinator then refused the proxy's window (found in review). It is kept with
    each control character as '?', cut to 64 characters, and the window passes check_window."""
    for said, kept in (("stop\n", "stop?"), ("x" * 80, "x" * 64)):
        watcher = ResponseWatcher(streaming=False)
        watcher.feed(
            json.dumps({"choices": [{"message": {"content": "x"}, "finish_reason": said}]}).encode(), 5
        )
        stamps = watcher.finish(7)
        assert stamps.finish_reason == kept
        check_window(Window("w", "timed", 10**18, 10**18 + 5, finish_reason=stamps.finish_reason))


async def test_a_request_naming_a_full_url_is_a_400_and_takes_no_warmup_slot(
    upstream: tuple[Upstream, str], caplog: pytest.LogCaptureFixture
) -> None:
    """What a client sends to a forward proxy (HTTP_PROXY set to this one): a 500 with two tracebacks, and
    the warm-up slot it took was never given back, so the first real request was measured as timed."""
    up, up_url = upstream
    up.handshake = False
    runner, url, sink = await proxied(up_url, warmup=1)
    port = int(url.rsplit(":", 1)[1])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"POST {up_url}/v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            "Connection: close\r\n\r\n{}".encode()
        )
        answer = await reader.read()
        writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer
        assert json.loads(body)["error"]["code"] == "not_origin_form"
        async with aiohttp.ClientSession() as session, session.post(f"{url}/v1/completions", data=b"{}") as r:
            assert r.status == 200
            await r.read()
    finally:
        await runner.cleanup()
    assert [w.phase for w in sink.windows] == ["warmup"] and not up.received[1:]
    assert "Traceback" not in caplog.text and "Error handling request" not in caplog.text


async def test_a_cookie_the_upstream_sets_is_never_sent_for_another_client() -> None:
    """A load balancer's sticky cookie (``Set-Cookie: AWSALB=…``) went into a cookie jar all clients shared:
    every later request carried it, over a client's own of that name, and a client's ``Cookie`` header
    was rewritten. Only an upstream named by host name kept one (aiohttp takes none from an IP address)."""
    seen: list[str | None] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        return web.json_response({"data": []}, headers={"Set-Cookie": "AWSALB=replica-7; Path=/"})

    app = web.Application()
    app.router.add_get("/v1/models", handle)
    up_runner, up_url = await serve(app)
    runner, url, _sink = await proxied(up_url.replace("127.0.0.1", "localhost"))
    own = 'session=abc; weird="a b"; flag'
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:  # keeps none
            for headers in ({}, {}, {"Cookie": own}, {"Cookie": "AWSALB=mine"}):
                async with session.get(f"{url}/v1/models", headers=headers) as resp:
                    assert resp.status == 200 and resp.headers["Set-Cookie"] == "AWSALB=replica-7; Path=/"
    finally:
        await runner.cleanup()
        await up_runner.cleanup()
    assert seen == [None, None, own, "AWSALB=mine"]  # each client's own, as it sent it
