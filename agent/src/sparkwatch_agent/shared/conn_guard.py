"""Every connection passes a guard before aiohttp sees it: a cap on open connections and a deadline for
the first request's headers.

aiohttp's server has neither (its keep-alive timeout, which ``start_site`` also sets, closes connections
that wait for a *next* request; how a first one is treated depends on its version). The listener
(``shared.listener``) asks the guard with each accepted socket in hand: at the cap a new connection first
evicts the oldest one that has not sent a complete request yet (an idle or slowloris socket: the cheapest
to lose, and what a flood is made of), and is refused with a 503 when there is none. Each connection's
protocol is wrapped: one whose headers do not arrive in time gets a 408. Both close at once. Once the
headers are in, the connection is aiohttp's alone: a request in progress, a WebSocket stream or a
server-sent-events response is never cut by these limits.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from sparkwatch_agent.shared.log_limit import RateLimitedLog
from sparkwatch_agent.shared.server_limits import ServerLimits

log = logging.getLogger(__name__)


#: The JSON object a refusal's (error code, reason) is written as: the server's own error shape.
RefusalBody = Callable[[str, str], dict[str, object]]


def error_and_reason(error: str, reason: str) -> dict[str, object]:
    """sparkwatch's own shape (``shared.http.json_error``'s)."""
    return {"error": error, "reason": reason}


def http_refusal(
    status: int,
    phrase: str,
    error: str,
    reason: str,
    *,
    shape: RefusalBody = error_and_reason,
    server: str | None = None,
) -> bytes:
    """A whole HTTP/1.1 response with a JSON reason, for writing straight to a transport before closing;
    ``server``: the ``Server`` header it carries, as the server's own answers do."""
    body = json.dumps(shape(error, reason)).encode()
    named = f"Server: {server}\r\n" if server else ""
    head = (
        f"HTTP/1.1 {status} {phrase}\r\n{named}Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class ConnectionGuard:
    """One server's open connections, and those among them still waiting for their first headers (oldest
    first). Counts what it refused and evicted at the cap (said in at most one line a minute) and what
    it closed at the header deadline."""

    def __init__(
        self,
        limits: ServerLimits,
        lines: RateLimitedLog | None = None,
        shape: RefusalBody = error_and_reason,
        server: str | None = None,
    ) -> None:
        """``shape``: how the refusals' JSON reads (a server that speaks another API gives that API's);
        ``server``: the name its refusals give in ``Server`` (the service's, as on its other answers)."""
        self.limits = limits
        self.server = server
        self.shape = shape
        self._open: set[GuardedConnection] = set()
        self._waiting: dict[GuardedConnection, None] = {}  # insertion order: oldest first
        self._connecting = 0  # accepted sockets whose protocol is not made yet
        self._lines = lines or RateLimitedLog(log)
        self.refused = 0
        self.evicted = 0
        self.expired = 0  # closed at the header deadline (no request arrived in time)
        cap = limits.max_connections
        self.busy_reply = http_refusal(
            503,
            "Service Unavailable",
            "busy",
            f"the server holds its maximum of {cap} connections",
            shape=shape,
            server=server,
        )
        self.evicted_reply = http_refusal(
            408,
            "Request Timeout",
            "request_timeout",
            "no request arrived before the connection was needed",
            shape=shape,
            server=server,
        )
        self.timeout_reply = http_refusal(
            408,
            "Request Timeout",
            "request_timeout",
            f"the request headers did not arrive within {limits.header_timeout_s:g} s",
            shape=shape,
            server=server,
        )

    def protocol_factory(self, make_inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GuardedConnection(self, make_inner)

    def make_room(self) -> bool:
        """Whether a socket just accepted may be served; at the cap the oldest connection without a request
        makes room. A ``True`` reserves a place until :meth:`connect_done`."""
        if len(self._open) + self._connecting >= self.limits.max_connections:
            if not self._waiting:
                self.refused += 1
                self._at_cap()
                return False
            oldest = next(iter(self._waiting))
            self.evicted += oldest.refuse(self.evicted_reply)  # one already closing got no 408: not counted
            self._at_cap()
        self._connecting += 1
        return True

    def connect_done(self) -> None:
        """The reserved socket has its protocol now (counted in ``_open``), or failed to get one."""
        self._connecting -= 1

    def opened(self, conn: GuardedConnection) -> None:
        self._open.add(conn)
        self._waiting[conn] = None

    def headers_arrived(self, conn: GuardedConnection) -> None:
        self._waiting.pop(conn, None)

    def timed_out(self, conn: GuardedConnection) -> None:
        log.debug("closed a connection whose request headers did not arrive in time")
        self.expired += conn.refuse(self.timeout_reply)

    def forget(self, conn: GuardedConnection) -> None:
        self._open.discard(conn)
        self._waiting.pop(conn, None)

    def _at_cap(self) -> None:
        self._lines.log(
            logging.WARNING,
            f"at the cap of {self.limits.max_connections} connections (so far {self.refused} refused, "
            f"{self.evicted} without a request closed to make room); SPARKWATCH_HTTP_MAX_CONNECTIONS sets it",
        )


class GuardedConnection(asyncio.Protocol):
    """The protocol the loop sees: the header deadline, and everything passed on to aiohttp's own protocol
    for the connection."""

    def __init__(self, guard: ConnectionGuard, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._make_inner = make_inner
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tail = b""  # the last bytes seen, for a header end split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._guard.opened(self)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._guard.limits.header_timeout_s, self._guard.timed_out, self)
        self._inner = self._make_inner()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._timer is not None:
            seen = self._tail + data
            # the headers end at an empty line: CRLF CRLF, or bare LF LF that lenient parsers take
            if b"\n\r\n" in seen or b"\n\n" in seen:
                self._headers_done()
            else:
                self._tail = seen[-2:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard.forget(self)
        self._cancel_timer()
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def refuse(self, reply: bytes) -> bool:
        """Answer ``reply`` (no request has been answered on this connection yet) and close; whether it was
        answered (not when the connection was closing already)."""
        self._guard.forget(self)
        self._cancel_timer()
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        transport.write(reply)
        transport.close()
        return True

    def _headers_done(self) -> None:
        self._cancel_timer()
        self._tail = b""
        self._guard.headers_arrived(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
