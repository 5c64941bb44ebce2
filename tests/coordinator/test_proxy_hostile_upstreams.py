"""The proxy between a client and an upstream that answers what a server should not (found by a new user's
sweep, each once wrong): bytes that are not HTTP, a 101 or a 999 as the final answer, a media type in
capitals, a usage past 2^63 or erased by a later one, events after [DONE], headers a ``Connection`` names,
a path with a newline, a request aiohttp cannot parse. The proxy runs as `sparkwatch proxy` runs it
(``running_proxy``: the guarded site and its refusals); the upstreams are real servers on loopback, raw
TCP where no HTTP server would answer so."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web

from helpers.loopback import served
from helpers.window_sink import ListSink
from sparkwatch.core.windows import check_window
from sparkwatch.proxy.proxy import ProxyConfig
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sse_watch import ResponseWatcher

CHAT = "/v1/chat/completions"
TOKEN = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
FINISH = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'


async def _raw_upstream(answer: bytes) -> tuple[asyncio.Server, str]:
    """A TCP server that reads a request's head and body (by its Content-Length), writes ``answer`` as it
    is, and closes: answers no HTTP server library would write."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        await reader.readexactly(length)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _through(upstream: str, sink: ListSink) -> AsyncIterator[str]:
    async with running_proxy("127.0.0.1", 0, ProxyConfig(upstream), sink) as url:
        yield url


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
            "Got more than 8190 bytes when reading",
        ),
        (b"this is not http at all\r\n\r\n", "Bad status line"),
        (b"HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\n{}", "answered HTTP 999"),
        (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            "answered HTTP 101",
        ),
    ],
    ids=["headers_too_long", "not_http", "status_999", "switch_101"],
)
async def test_an_answer_a_proxy_cannot_relay_is_a_502_and_a_window_that_says_so(
    answer: bytes, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """It was "did not answer: 400, message=…" with the upstream's bytes over several log lines and the
    window marked unreachable; a 999 went to the client and a window the coordinator refused (so the request
    was lost), and a 101 to a POST left the client hanging on a half-relayed switch, measured as ok."""
    server, upstream = await _raw_upstream(answer)
    sink = ListSink()
    with caplog.at_level(logging.WARNING, logger="sparkwatch.proxy"):
        async for url in _through(upstream, sink):
            async with aiohttp.ClientSession() as session:
                async with asyncio.timeout(10):
                    r = await session.post(url + CHAT, json={"model": "m"})
                    body = await r.json()
    server.close()
    assert r.status == 502 and body["error"]["code"] == "bad_gateway", body
    assert said in body["error"]["message"] and "aaaa" not in body["error"]["message"]
    (window,) = sink.windows
    assert window.http_status == 502 and window.source.get("upstream_invalid_answer") is True
    assert "upstream_unreachable" not in window.source and window.failed
    check_window(window)  # a window the coordinator takes
    (line,) = [r.getMessage() for r in caplog.records if CHAT in r.getMessage()]
    assert said in line and "\n" not in line and "aaaa" not in line


def _echo_app(
    seen: list[dict[str, list[str]]], answer: Callable[[web.Request], web.StreamResponse]
) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        headers: dict[str, list[str]] = {}
        for k, v in request.headers.items():
            headers.setdefault(k.lower(), []).append(v)
        if request.method == "POST":  # not the proxy's HEAD at its start
            seen.append(headers | {":path": [request.raw_path]})
        response = answer(request)
        if isinstance(response, web.Response):
            return response
        await response.prepare(request)
        for part in (
            TOKEN,
            b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}\n\n',
        ):
            await response.write(part)
        for part in (FINISH, b'data: {"choices": [], "usage": {}}\n\n', b"data: [DONE]\n\n"):
            await response.write(part)
        late = (
            b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}], "usage": {"completion_tokens": 9}}'
        )
        await response.write(late + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:[\\s\\S]*}", handle)
    return app


async def test_headers_pass_as_sent_and_a_stream_is_read_as_clients_read_it() -> None:
    """No Content-Type the client did not send (aiohttp added application/octet-stream); headers a
    ``Connection`` names dropped each way (RFC 9110 §7.6.1), and ``Proxy-Connection``;
    ``Text/Event-Stream`` read as a stream (it was taken for one JSON answer); a later ``"usage": {}``
    erases no count, and nothing after [DONE] counts (it took 999 tokens and a later last token); a path
    with %0A forwarded (the proxy answered 404 itself)."""
    seen: list[dict[str, list[str]]] = []

    def stream(_request: web.Request) -> web.StreamResponse:
        return web.StreamResponse(
            headers={
                "Content-Type": "Text/Event-Stream; charset=utf-8",
                "Connection": "X-Up-Secret",
                "X-Up-Secret": "hop",
            }
        )

    sink = ListSink()
    async for upstream in served(_echo_app(seen, stream)):
        async for url in _through(upstream, sink):
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /a%0Ab" + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close, X-Secret\r\n"
                b"X-Secret: hop\r\nX-Kept: yes\r\nProxy-Connection: keep-alive\r\nContent-Length: 2\r\n\r\n{}"
            )
            await writer.drain()
            async with asyncio.timeout(10):
                raw = await reader.read()
            writer.close()
    head = raw.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 200") and b"x-up-secret" not in head
    (upstream_saw,) = seen
    assert upstream_saw[":path"] == ["/a%0Ab" + CHAT]
    assert "content-type" not in upstream_saw and "x-secret" not in upstream_saw
    assert "proxy-connection" not in upstream_saw  # libcurl's, for the proxy alone (not in RFC 9110's list)
    assert upstream_saw["x-kept"] == ["yes"]
    (window,) = sink.windows
    assert window.source["stream"] is True and window.finish_reason == "stop"
    assert (window.prompt_tokens, window.completion_tokens) == (9, 2)
    assert window.t_first_token_ns == window.t_last_token_ns is not None and not window.failed


async def test_a_count_no_window_holds_is_unknown_and_the_window_is_kept() -> None:
    """A usage of 2^63 tokens made the coordinator refuse the window (and the request's time with it). (The
    client's own Content-Type goes upstream as it was: only one it did not send is never added.)"""

    def json_answer(_request: web.Request) -> web.StreamResponse:
        usage = {"prompt_tokens": 2**63, "completion_tokens": 5}
        return web.json_response(
            {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": usage}
        )

    sink = ListSink()
    seen: list[dict[str, list[str]]] = []
    async for upstream in served(_echo_app(seen, json_answer)):
        async for url in _through(upstream, sink):
            async with aiohttp.ClientSession() as session:
                kind = {"Content-Type": "Application/JSON; charset=utf-8"}
                r = await session.post(url + CHAT, data=b'{"model": "m"}', headers=kind)
                assert (
                    r.status == 200 and (await r.json())["usage"]["prompt_tokens"] == 2**63
                )  # relayed as sent
    (window,) = sink.windows
    assert window.prompt_tokens is None and window.completion_tokens == 5
    check_window(window)
    assert [s["content-type"] for s in seen] == [["Application/JSON; charset=utf-8"]]


async def test_a_request_aiohttp_cannot_parse_is_refused_in_openais_shape() -> None:
    """Every other refusal of the proxy is an OpenAI error object; this one was sparkwatch's own shape."""
    sink = ListSink()
    async for upstream in served(_echo_app([], lambda _r: web.json_response({}))):
        async for url in _through(upstream, sink):
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
            )
            await writer.drain()
            async with asyncio.timeout(10):
                raw = await reader.read()
            writer.close()
    head, body = raw.split(b"\r\n\r\n", 1)
    error = json.loads(body)["error"]
    assert head.split(b" ")[1] == b"400" and error["code"] == "bad_request"
    assert error["message"].startswith("cannot parse the request: ") and sink.windows == []


def test_a_later_usage_keeps_the_counts_it_lacks_and_makes_unknown_one_no_window_holds() -> None:
    watcher = ResponseWatcher(streaming=True)
    watcher.feed(b'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}\n\n', 1)
    watcher.feed(b'data: {"choices": [], "usage": {"completion_tokens": null}}\n\n', 2)
    assert (watcher.stamps.prompt_tokens, watcher.stamps.completion_tokens) == (9, 2)
    watcher.feed(b'data: {"choices": [], "usage": {"prompt_tokens": 9223372036854775808}}\n\n', 3)
    stamps = watcher.finish(4)
    assert (stamps.prompt_tokens, stamps.completion_tokens) == (None, 2)  # not the stale 9


async def _raw_request(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    async with asyncio.timeout(10):
        raw = await reader.read()
    writer.close()
    return raw


async def test_header_bytes_that_are_not_utf8_are_refused_or_said(caplog: pytest.LogCaptureFixture) -> None:
    """``X-Name: caf\\xe9`` (obs-text) reached the other side as ``caf``, each way, without a word: aiohttp
    hands such bytes over escaped and writes a value without them. A client's is refused (400, nothing
    sent upstream, no window); an upstream's answer is relayed, its dropped bytes said in the log."""
    seen: list[dict[str, list[str]]] = []
    sink = ListSink()
    answer = (
        b"HTTP/1.1 200 OK\r\nX-Up: ol\xe9\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    )
    async for upstream in served(_echo_app(seen, lambda _r: web.json_response({}))):
        async for url in _through(upstream, sink):
            raw = await _raw_request(
                url,
                b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Name: caf\xe9\r\nConnection: close\r\n"
                b"Content-Length: 2\r\n\r\n{}",
            )
    head, body = raw.split(b"\r\n\r\n", 1)
    error = json.loads(body)["error"]
    assert head.split(b" ")[1] == b"400" and error["code"] == "header_not_utf8"
    assert (
        error["message"]
        == "header X-Name holds bytes that are not UTF-8 text (0xE9), which the proxy cannot pass on"
    )
    assert seen == [] and sink.windows == []
    server, upstream = await _raw_upstream(answer)
    try:
        with caplog.at_level(logging.WARNING, logger="sparkwatch.proxy.proxy"):
            async for url in _through(upstream, sink):
                raw = await _raw_request(
                    url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                )
    finally:
        server.close()
    assert raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"{}")
    (line,) = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert line == (
        f"upstream {upstream}: header X-Up holds bytes that are not UTF-8 text (0xE9), which the proxy cannot"
        " pass on; relayed without those bytes"
    )


@pytest.mark.parametrize("typed", [False, True])
async def test_an_answer_without_a_content_type_is_relayed_without_one(typed: bool) -> None:
    """aiohttp gave it ``application/octet-stream``: a type the upstream never said (RFC 9110 §8.3)."""
    kind = b"Content-Type: text/plain\r\n" if typed else b""
    server, upstream = await _raw_upstream(b"HTTP/1.1 200 OK\r\n" + kind + b"Content-Length: 2\r\n\r\nok")
    try:
        async for url in _through(upstream, ListSink()):
            raw = await _raw_request(url, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    finally:
        server.close()
    head, body = raw.split(b"\r\n\r\n", 1)
    types = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-type:")]
    assert body == b"ok" and types == ([b"content-type: text/plain"] if typed else []), head
