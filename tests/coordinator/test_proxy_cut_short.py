"""Requests that do not complete, through the proxy as `sparkwatch proxy` runs it (make_proxy_runner): an
upstream that breaks off or stalls past the upstream timeout, a client that gives up. The client sees the
answer cut (never a clean end of a chunked body), the window ends when the request did and says why, and
the export does not measure it (core.windows.CUT_SHORT). A body the proxy refuses takes no warm-up slot."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from helpers.window_sink import ListSink
from sparkwatch.core.windows import Window
from sparkwatch.proxy.proxy import Proxy, ProxyConfig, make_proxy_runner
from sparkwatch.proxy.sse_watch import ResponseWatcher

TOKEN = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'


@dataclass
class Scripted:
    """An upstream whose answer is chosen by the request's ``?do=``: ``break`` (two tokens, then the
    connection dropped mid-body), ``stall`` (a token, then silence), ``late`` (silence before any answer),
    ``early`` (a token, then a clean end without [DONE]), ``garbage`` (a line that is no event, then the
    end), ``error`` (an error event before the [DONE]), anything else a whole short stream."""

    stall_s: float = 30.0
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        do = request.query.get("do", "")
        self.seen.append(do)
        await request.read()
        if do == "late":
            await asyncio.sleep(self.stall_s)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(TOKEN)
        if do == "break":
            await resp.write(TOKEN)
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.abort()
            return resp
        if do == "stall":
            await asyncio.sleep(self.stall_s)
        if do in ("early", "garbage"):  # a clean end of a stream that never said it was done
            await resp.write(b"<html>proxy error</html>\n\n" if do == "garbage" else TOKEN)
            await resp.write_eof()
            return resp
        if do == "abort":  # a request the server gave up (SGLang's graceful abort), then [DONE]
            await resp.write(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]}\n\n')
        if do == "error":  # vLLM's in-stream error object, then a [DONE] as it writes one
            await resp.write(b'data: {"object": "error", "message": "engine died", "code": 500}\n\n')
        if do == "linger":  # the whole answer, then a while before the body's end
            await resp.write(b"data: [DONE]\n\n")
            await asyncio.sleep(0.3)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def _site(runner: web.AppRunner) -> str:
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return "http://{}:{}".format(*runner.addresses[0][:2])


@dataclass
class Rig:
    url: str
    sink: ListSink
    upstream: Scripted
    proxy: Proxy
    runner: web.AppRunner
    closed: bool = False

    async def close(self) -> None:
        """The proxy closes as `sparkwatch run` closes it at the end of a run (once)."""
        if not self.closed:
            self.closed = True
            self.proxy.closing()
            await self.runner.cleanup()


@pytest.fixture
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    timeout_s, warmup = getattr(request, "param", (3600.0, 0))
    upstream = Scripted()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", upstream.handle)
    up_runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1, handler_cancellation=True)
    up_url = await _site(up_runner)
    sink = ListSink()
    proxy = Proxy(ProxyConfig(up_url, warmup=warmup, upstream_timeout_s=timeout_s), sink)
    runner = make_proxy_runner(proxy)
    rig = Rig(await _site(runner), sink, upstream, proxy, runner)
    try:
        yield rig
    finally:
        await rig.close()
        await up_runner.cleanup()


async def _window(sink: ListSink, count: int = 1, within_s: float = 5.0) -> Window:
    async with asyncio.timeout(within_s):
        while len(sink.windows) < count:
            await asyncio.sleep(0.01)
    return sink.windows[count - 1]


async def _read_all(url: str, do: str, timeout_s: float = 10.0) -> bytes:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions?do={do}", data=b"{}", timeout=timeout_s) as resp,
    ):
        return await resp.read()


@pytest.mark.parametrize(
    ("do", "note"),
    [
        ("early", "upstream_unfinished"),
        ("garbage", "upstream_unfinished"),
        ("error", "upstream_error"),
        ("abort", "upstream_aborted"),
    ],
)
async def test_a_200_stream_that_never_finished_or_said_error_is_not_measured(
    rig: Rig, do: str, note: str
) -> None:
    """A 200 event stream that ends cleanly without [DONE] or a finish reason (tokens then EOF; lines that
    are no events at all), that carries an error event, or whose finish reason says the server gave the
    request up: before, an ``ok`` window, measured."""
    await _read_all(rig.url, do)  # the client gets what the upstream sent, ended as it ended it
    w = await _window(rig.sink)
    assert w.http_status == 200 and w.source.get(note) is True and w.failed, w.source
    assert "is not measured" in (w.failure() or "")


async def test_a_fault_of_the_proxy_while_relaying_fails_the_window(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception of the proxy's own while it relays (here the watcher's, on the first chunk, which the
    client already has): the client's answer is cut, and the window is not measured as a whole answer (it
    was: nothing said the relay had stopped)."""

    def faulty(self: ResponseWatcher, chunk: bytes, t_ns: int) -> None:
        raise RuntimeError("a bug in the watcher")

    monkeypatch.setattr(ResponseWatcher, "feed", faulty)
    with pytest.raises(aiohttp.ClientPayloadError):
        await _read_all(rig.url, "whole")
    w = await _window(rig.sink)
    assert w.source.get("proxy_failed") is True and w.failed, w.source
    assert "a fault of sparkwatch's own" in (w.failure() or "")
    assert "a bug in the watcher" in caplog.text  # aiohttp's log of the handler's exception


async def test_a_fault_of_the_watcher_at_the_answers_end_keeps_the_window_failed(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception of the proxy's own once the answer ended (the watcher's ``finish``): the client already
    has its whole answer, and the window is kept, not measured (it was lost: the exception left the handler
    before the window reached the sink)."""

    def faulty(self: ResponseWatcher, t_ns: int) -> None:
        raise RuntimeError("a bug at the end of the answer")

    monkeypatch.setattr(ResponseWatcher, "finish", faulty)
    body = await _read_all(rig.url, "whole")
    assert b"[DONE]" in body  # the client's answer is whole
    w = await _window(rig.sink)
    assert w.source.get("proxy_failed") is True and w.failed, w.source
    assert w.t_end_ns >= w.t_start_ns and w.http_status == 200
    assert "a bug at the end of the answer" in caplog.text


async def test_a_whole_stream_is_measured(rig: Rig) -> None:
    await _read_all(rig.url, "whole")
    w = await _window(rig.sink)
    assert not w.failed and w.t_first_token_ns is not None, w.source
    assert not {"upstream_unfinished", "upstream_error", "client_left_unfinished"} & set(w.source)


async def test_an_answer_the_upstream_breaks_off_is_cut_for_the_client_and_not_measured(rig: Rig) -> None:
    with pytest.raises(aiohttp.ClientPayloadError):  # not a clean end of the chunked body
        await _read_all(rig.url, "break")
    w = await _window(rig.sink)
    assert w.http_status == 200 and w.source.get("upstream_broke_off") is True and w.failed
    assert w.t_first_token_ns is not None  # what arrived was still stamped
    assert "the upstream broke off its answer" in (w.failure() or "")


@pytest.mark.parametrize("rig", [(0.5, 0)], indirect=True)
async def test_an_answer_that_outlasts_the_upstream_timeout_is_cut_and_logs_no_error(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(aiohttp.ClientPayloadError):
        await _read_all(rig.url, "stall")
    w = await _window(rig.sink)
    assert w.source.get("upstream_timed_out") is True and w.failed
    assert (w.t_end_ns - w.t_start_ns) / 1e9 < 3.0
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


async def test_a_client_that_gives_up_on_a_stalled_answer_ends_its_window_then(rig: Rig) -> None:
    """Before, the window lasted until the upstream next wrote (177 s in a trial; the upstream timeout is an
    hour): a request nobody waited for was measured as an `ok` one."""
    with pytest.raises(TimeoutError):
        await _read_all(rig.url, "stall", timeout_s=0.5)
    w = await _window(rig.sink, within_s=3.0)
    assert w.source.get("client_left_unfinished") is True and w.failed
    assert (w.t_end_ns - w.t_start_ns) / 1e9 < 2.0


@pytest.mark.parametrize("rig", [(3600.0, 1)], indirect=True)
async def test_a_client_that_leaves_before_any_answer_gives_its_warmup_slot_back(rig: Rig) -> None:
    with pytest.raises(TimeoutError):
        await _read_all(rig.url, "late", timeout_s=0.5)
    w = await _window(rig.sink, within_s=3.0)
    assert (w.phase, w.http_status, w.source.get("client_left_unfinished")) == ("warmup", None, True)
    assert await _read_all(rig.url, "whole")  # the next to arrive is the warm-up
    assert (await _window(rig.sink, 2)).phase == "warmup" and not rig.sink.windows[1].failed


@pytest.mark.parametrize("rig", [(3600.0, 1)], indirect=True)
async def test_a_body_the_proxy_refuses_is_a_json_413_and_takes_no_warmup_slot(rig: Rig) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{rig.url}/v1/chat/completions", data=b"x" * (64 * 1024 * 1024 + 1)) as resp,
    ):
        assert resp.status == 413
        said = json.loads(await resp.read())
    assert said["error"]["code"] == "body_too_large" and "67108864" in said["error"]["message"], said
    assert rig.upstream.seen == [] and rig.sink.windows == []  # nothing went upstream, nothing recorded
    await _read_all(rig.url, "whole")
    assert (await _window(rig.sink)).phase == "warmup"


async def test_a_client_that_leaves_on_done_before_the_bodys_end_was_answered(rig: Rig) -> None:
    """It hung up (client_disconnected), but after the answer's last event: a whole answer, measured."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{rig.url}/v1/chat/completions?do=linger", data=b"{}") as resp,
    ):
        async for line in resp.content:
            if line.startswith(b"data: [DONE]"):
                break
    w = await _window(rig.sink, within_s=3.0)
    assert w.source.get("client_disconnected") is True and "client_left_unfinished" not in w.source
    assert not w.failed and w.t_first_token_ns is not None


@pytest.mark.parametrize("rig", [(3600.0, 1)], indirect=True)
async def test_a_client_that_leaves_while_sending_its_body_gives_its_warmup_slot_back(rig: Rig) -> None:
    _reader, writer = await asyncio.open_connection(*rig.url.removeprefix("http://").split(":"))
    writer.write(b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"a"')
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    await asyncio.sleep(0.2)
    assert rig.upstream.seen == [] and rig.sink.windows == []
    await _read_all(rig.url, "whole")
    assert (await _window(rig.sink)).phase == "warmup"


async def test_a_request_still_in_flight_when_the_proxy_closes_is_not_blamed_on_its_client(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """CMD ended with a request still streaming: the proxy closes at the end of the run and cuts it after
    its grace. Before, its window said the client hung up."""
    reader = asyncio.create_task(_read_all(rig.url, "stall"))
    try:
        async with asyncio.timeout(5):
            while not rig.upstream.seen:
                await asyncio.sleep(0.01)
        await rig.close()
        w = await _window(rig.sink)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    assert w.source.get("proxy_closed_unfinished") is True and w.failed, w.source
    assert "client_left_unfinished" not in w.source and "client_disconnected" not in w.source
    assert "the proxy closed (the run ended, or it was stopped)" in (w.failure() or "")
    assert "1 generation request(s) in flight as the proxy closes" in caplog.text


async def test_window_ids_follow_the_order_requests_arrived_in(rig: Rig) -> None:
    """A long first request and a short second one: the second's window is made first, but the ids number
    them as they arrived (before, as their windows were made)."""
    slow = asyncio.create_task(_read_all(rig.url, "linger"))  # its whole answer, then 0.3 s to its end
    async with asyncio.timeout(5):
        while not rig.upstream.seen:
            await asyncio.sleep(0.01)
    await _read_all(rig.url, "whole")
    await slow
    first_made, second_made = await _window(rig.sink, 1), await _window(rig.sink, 2)
    assert first_made.id.endswith("-000002") and second_made.id.endswith("-000001"), rig.sink.windows
