"""The listening side of every sparkwatch server: bind, then accept with the connection guard's say on each
socket while it is in hand.

asyncio's own server accepts up to a hundred sockets per loop pass and makes their protocols later, so by
the time a protocol could refuse one, hundreds of descriptors may be open: a cap enforced there does not
keep a process under its open-file limit. Accepting here, a socket over the cap is answered 503 and
closed before the next is accepted. Running out of descriptors anyway (other files, a cap above the
limit) pauses accepting for a second and is logged once a minute, without a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from aiohttp import web

from sparkwatch_agent.shared.conn_guard import ConnectionGuard
from sparkwatch_agent.shared.log_limit import RateLimitedLog, accept_error_line
from sparkwatch_agent.shared.parse_errors import json_errors_for, json_protocol_errors

log = logging.getLogger(__name__)

#: Sockets accepted per readiness event before other callbacks get the loop.
ACCEPT_BATCH = 16
#: How long accepting pauses after an error such as EMFILE (asyncio waits the same).
ACCEPT_RETRY_S = 1.0


async def bind_listeners(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for every address ``host`` resolves to (as ``loop.create_server`` binds them)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def refuse_socket(conn: socket.socket, reply: bytes) -> None:
    """Answer ``reply`` on a socket no protocol owns and close it now. What the client already sent is read
    first: closing over unread bytes resets the connection, and the client may lose the reply."""
    with contextlib.suppress(OSError):
        conn.recv(65536)
    with contextlib.suppress(OSError):
        conn.send(reply)
    conn.close()


class GuardedListener(asyncio.AbstractServer):
    """Accepts on ``sockets``; each admitted socket gets a protocol from ``make_protocol``."""

    def __init__(
        self,
        sockets: list[socket.socket],
        guard: ConnectionGuard,
        make_protocol: Callable[[], asyncio.Protocol],
        lines: RateLimitedLog | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.sockets = sockets
        self._guard = guard
        self._make_protocol = make_protocol
        self._lines = lines or RateLimitedLog(log)
        self._tasks: set[asyncio.Task[None]] = set()
        self._retries: dict[socket.socket, asyncio.TimerHandle] = {}
        self._serving = True
        for sock in sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                self._pause(sock, exc)
                return
            conn.setblocking(False)
            if not self._guard.make_room():
                refuse_socket(conn, self._guard.busy_reply)
                continue
            task = self._loop.create_task(self._connect(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._make_protocol, conn)
        except OSError:
            conn.close()  # the client went away before its transport was made
        finally:
            self._guard.connect_done()

    def _pause(self, sock: socket.socket, exc: OSError) -> None:
        self._lines.log(logging.ERROR, accept_error_line(exc))
        self._loop.remove_reader(sock.fileno())
        self._retries[sock] = self._loop.call_later(ACCEPT_RETRY_S, self._resume, sock)

    def _resume(self, sock: socket.socket) -> None:
        del self._retries[sock]
        if self._serving:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        if not self._serving:
            return
        self._serving = False
        for handle in self._retries.values():
            handle.cancel()
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        return None  # serving from the start

    async def serve_forever(self) -> None:
        raise NotImplementedError("served by its aiohttp runner until the runner is cleaned up")

    async def wait_closed(self) -> None:
        return None


class GuardedSite(web.BaseSite):
    """aiohttp's TCP site, accepting through a :class:`GuardedListener`; its connections answer the
    requests aiohttp cannot parse in JSON (``shared.parse_errors``)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self.guard = guard

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()  # registers the site with its runner, which stops it on cleanup
        server = self._runner.server
        assert server is not None
        sockets = await bind_listeners(self._host, self._port, self._backlog)
        handler = json_errors_for(self.guard.server, self.guard.shape)
        make_handler = self.guard.protocol_factory(lambda: json_protocol_errors(server(), handler))
        self._server = GuardedListener(sockets, self.guard, make_handler)
