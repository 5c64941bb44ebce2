"""What a link says when something other than a sparkwatch agent answers at a node's url: before, a
server that never answered read "TimeoutError:" (nothing after the colon), bytes that are not HTTP read as
aiohttp's parser message over five lines, a web page as "ContentTypeError: 200, message='Attempt to decode
JSON with unexpected mimetype: text/html', url=…", and `python3 -m http.server` as "LinkError: /v1/time
answered 404". Each is one line now that says what answered and which setting to check."""

from __future__ import annotations

import asyncio
import pathlib
import socket
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from sparkwatch.links import ws_link
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkStatus
from sparkwatch.links.ws_link import WsLink
from sparkwatch.store import Store

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
NOT_AGENT = "; check nodes.toml (an agent listens on 9464 unless its --listen says otherwise)"


async def _never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(30)  # takes the connection, says nothing


async def _ssh_banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")  # an sshd's port given as the agent's
    await writer.drain()
    writer.close()


def _http(status: str, content_type: str, body: bytes) -> Reply:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    return answer


async def _said(reply: Reply, tmp_path: pathlib.Path) -> tuple[str, str]:
    """What the link's session ends with against ``reply``'s server, and the url it was given."""
    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    url = f"ws://127.0.0.1:{port}"
    store = Store(tmp_path / "c.db")
    try:
        async with aiohttp.ClientSession() as session:
            link = WsLink(
                NodeSpec(name="n0", url=url), store, session, holder="t", desired_interval=lambda: None
            )
            status, error, _ = await link._one_session()
        assert status is LinkStatus.DOWN
        return error, url
    finally:
        store.close()
        server.close()


@pytest.fixture(autouse=True)
def _short_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ws_link, "PROBE_TIMEOUT_S", 0.5)  # the hang is waited for once: not 5 s


async def test_a_server_that_never_answers(tmp_path: pathlib.Path) -> None:
    error, _ = await _said(_never, tmp_path)
    assert error == "/v1/time gave no answer within 0.5 s"


async def test_bytes_that_are_not_http(tmp_path: pathlib.Path) -> None:
    error, url = await _said(_ssh_banner, tmp_path)
    assert (
        error
        == f"answered what is not HTTP (Bad status line): no sparkwatch agent answers at url {url}{NOT_AGENT}"
    )


async def test_a_web_page(tmp_path: pathlib.Path) -> None:
    error, url = await _said(_http("200 OK", "text/html", b"<html>router</html>"), tmp_path)
    assert error == f"/v1/time answered text/html: no sparkwatch agent answers at url {url}{NOT_AGENT}"


async def test_a_file_server(tmp_path: pathlib.Path) -> None:
    error, url = await _said(_http("404 Not Found", "text/html", b"no such file"), tmp_path)
    assert error == f"/v1/time answered 404: no sparkwatch agent answers at url {url}{NOT_AGENT}"


async def test_a_node_that_takes_no_connection(tmp_path: pathlib.Path) -> None:
    """A node switched off, or a firewall that drops: nothing answers the connection itself. Its backlog
    full, a listener takes no more, as such a node does; read as "gave no answer" it blamed a server."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held = []
    for _ in range(4):  # until the kernel's queue for it is full (never accepted)
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
    store = Store(tmp_path / "c.db")
    try:
        async with aiohttp.ClientSession() as session:
            link = WsLink(
                NodeSpec(name="n0", url=f"ws://127.0.0.1:{port}"), store, session, holder="t",
                desired_interval=lambda: None,
            )  # fmt: skip
            _, error, _ = await link._one_session()
    finally:
        store.close()
        for s in held:
            s.close()
        listener.close()
    assert error == f"cannot connect to 127.0.0.1:{port}: no answer within 0.4 s"
