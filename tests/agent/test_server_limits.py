"""The limits every sparkwatch HTTP server gets from start_site, on a real aiohttp server on loopback:
the connection cap (idle sockets make room, busy ones are refused with a 503), the first request's
header deadline (a slowloris socket gets a 408 and is closed), the keep-alive idle timeout, streams that
no limit cuts, the environment's overrides and the accept-error line that is logged once a minute."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sparkwatch_agent.shared.http import AGENT_SERVER, BindError, name_server, start_site
from sparkwatch_agent.shared.log_limit import AcceptErrorLog, RateLimitedLog, install_accept_error_log
from sparkwatch_agent.shared.server_limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    LimitsError,
    ServerLimits,
    default_max_connections,
    limits_from_environ,
)

LIMITS = ServerLimits(max_connections=4, header_timeout_s=0.5, idle_timeout_s=0.5)
SILENCE_S = 1.2  # longer than both timeouts above


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def quiet_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events with a silence longer than every timeout between two of them."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"data: first\n\n")
    await asyncio.sleep(SILENCE_S)
    await resp.write(b"data: second\n\n")
    return resp


async def quiet_socket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await asyncio.sleep(SILENCE_S)
    await ws.send_str("after the silence")
    await ws.close()
    return ws


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, int]]:
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/events", quiet_events)
    app.router.add_get("/ws", quiet_socket)
    name_server(app, AGENT_SERVER)
    runner = web.AppRunner(app, access_log=None)
    url = await start_site(runner, "127.0.0.1", 0, LIMITS)
    yield url, int(url.rsplit(":", 1)[1])
    await runner.cleanup()


async def _read_until_closed(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    async with asyncio.timeout(timeout_s):
        return await reader.read()


async def _get(url: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r,
    ):
        return r.status, await r.json(content_type=None)


async def test_a_slowloris_socket_gets_a_408_and_is_closed_at_the_header_deadline(
    server: tuple[str, int],
) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # ... and nothing more
    t0 = time.monotonic()
    reply = await _read_until_closed(reader, 3.0)
    elapsed_s = time.monotonic() - t0
    writer.close()
    assert reply.startswith(b"HTTP/1.1 408 ") and b'"error": "request_timeout"' in reply
    assert LIMITS.header_timeout_s - 0.1 <= elapsed_s < LIMITS.header_timeout_s + 0.5


async def test_idle_sockets_beyond_the_cap_make_room_and_healthz_still_answers(
    server: tuple[str, int],
) -> None:
    url, port = server
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3 * LIMITS.max_connections)]
    t0 = time.monotonic()
    assert await _get(f"{url}/healthz") == (200, {"status": "ok"})
    assert time.monotonic() - t0 < 0.5  # not after the idle ones time out: they made room
    replies = await asyncio.gather(*(_read_until_closed(r, 2.0) for r, _ in idle))
    evicted = [r for r in replies[: -LIMITS.max_connections] if r]
    assert len(evicted) >= 2 * LIMITS.max_connections  # the oldest went first, with a 408 and its reason
    assert all(r.startswith(b"HTTP/1.1 408 ") and b"connection was needed" in r for r in evicted)
    assert all(b"\r\nServer: sparkwatch-agent\r\n" in r.partition(b"\r\n\r\n")[0] for r in evicted)
    for _, writer in idle:
        writer.close()


async def test_at_the_cap_of_busy_connections_a_new_one_gets_503_and_the_others_go_on(
    server: tuple[str, int],
) -> None:
    url, port = server
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        streams = [await session.get(f"{url}/events") for _ in range(LIMITS.max_connections)]
        for r in streams:
            assert await r.content.readuntil(b"\n\n") == b"data: first\n\n"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head, _, body = (await _read_until_closed(reader, 2.0)).partition(b"\r\n\r\n")
        writer.close()
        assert head.startswith(b"HTTP/1.1 503 ")
        assert b"\r\nServer: sparkwatch-agent\r\n" in head  # named as the server's other answers are
        assert json.loads(body)["error"] == "busy"
        # the streams outlive both timeouts: a response in progress is never cut
        for r in streams:
            async with asyncio.timeout(3.0):
                assert await r.content.read() == b"data: second\n\n"
            r.release()


async def test_a_quiet_websocket_outlives_the_idle_and_header_timeouts(server: tuple[str, int]) -> None:
    url, _ = server
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/ws", autoping=False) as ws:
        msg = await ws.receive(timeout=3.0)
        assert msg.type == aiohttp.WSMsgType.TEXT and msg.data == "after the silence"


async def test_a_keep_alive_connection_idle_between_requests_is_closed(server: tuple[str, int]) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    async with asyncio.timeout(2.0):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    t0 = time.monotonic()
    await _read_until_closed(reader, 3.0)  # body, then EOF when the idle timeout closes it
    writer.close()
    assert time.monotonic() - t0 < LIMITS.idle_timeout_s + 1.0


def test_defaults_and_environment_overrides() -> None:
    assert limits_from_environ({}, None) == ServerLimits(
        DEFAULT_MAX_CONNECTIONS, DEFAULT_HEADER_TIMEOUT_S, DEFAULT_IDLE_TIMEOUT_S
    )
    assert default_max_connections(1024) == 512 and default_max_connections(128) == 64
    assert default_max_connections(20) == 16 and default_max_connections(1 << 20) == DEFAULT_MAX_CONNECTIONS
    env = {
        "SPARKWATCH_HTTP_MAX_CONNECTIONS": "1000",
        "SPARKWATCH_HTTP_HEADER_TIMEOUT_S": "2.5",
        "SPARKWATCH_HTTP_IDLE_TIMEOUT_S": "90",
    }
    assert limits_from_environ(env, 128) == ServerLimits(1000, 2.5, 90.0)  # a configured cap is as given
    for name, bad in [
        ("SPARKWATCH_HTTP_MAX_CONNECTIONS", "0"),
        ("SPARKWATCH_HTTP_MAX_CONNECTIONS", "many"),
        ("SPARKWATCH_HTTP_HEADER_TIMEOUT_S", "-1"),
        ("SPARKWATCH_HTTP_IDLE_TIMEOUT_S", "nan"),
    ]:
        with pytest.raises(LimitsError, match=name):
            limits_from_environ({name: bad}, None)


async def test_a_bad_limit_in_the_environment_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKWATCH_HTTP_HEADER_TIMEOUT_S", "soon")
    runner = web.AppRunner(web.Application())
    with pytest.raises(BindError, match=r"^SPARKWATCH_HTTP_HEADER_TIMEOUT_S must be a number of seconds"):
        await start_site(runner, "127.0.0.1", 0)
    assert runner.server is None


def _accept_failure() -> dict[str, Any]:
    exc = OSError(errno.EMFILE, "Too many open files")
    return {"message": "socket.accept() out of system resource", "exception": exc, "socket": socket.socket()}


async def test_accept_errors_are_one_line_a_minute_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    others: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: others.append(context))
    now_s = [1000.0]
    try:
        install_accept_error_log(loop, logging.getLogger("limits-test"), mono_s=lambda: now_s[0])
        install_accept_error_log(loop, logging.getLogger("limits-test"))  # once per loop
        assert isinstance(loop.get_exception_handler(), AcceptErrorLog)
        with caplog.at_level(logging.DEBUG, "limits-test"):
            for _ in range(100):  # asyncio retries accept() every second: 100 s of EMFILE
                context = _accept_failure()
                loop.call_exception_handler(context)
                context["socket"].close()
                now_s[0] += 1.0
            loop.call_exception_handler({"message": "something else"})
    finally:
        loop.set_exception_handler(previous)
    lines = [r for r in caplog.records if r.name == "limits-test"]
    assert len(lines) == 2 and all(r.exc_info is None for r in lines)
    assert "Too many open files (EMFILE)" in lines[0].getMessage()
    assert lines[1].getMessage().endswith("(59 more since the last such line)")
    assert others == [{"message": "something else"}]  # the rest still reaches the handler before


def test_rate_limited_log_counts_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    now_s = [0.0]
    lines = RateLimitedLog(logging.getLogger("rl-test"), every_s=60.0, mono_s=lambda: now_s[0])
    with caplog.at_level(logging.INFO, "rl-test"):
        assert lines.log(logging.INFO, "a") is True
        assert lines.log(logging.INFO, "b") is False
        now_s[0] = 60.0
        assert lines.log(logging.INFO, "c") is True
    assert [r.getMessage() for r in caplog.records] == ["a", "c (1 more since the last such line)"]
