"""The headers the proxy passes each way: everything but the hop-by-hop ones, which belong to each
connection, and its own phase header; and the proxy named as RFC 9110 asks (§7.6.3): a ``Via`` on every
message it forwards, so a client that reached it by mistake (its port given as the coordinator's) learns
what it reached, while a relayed answer keeps its origin's ``Server``."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from sparkwatch_agent.shared.http import PROXY_SERVER, SERVER_NAME

PHASE_HEADER = "X-Sparkwatch-Phase"
#: RFC 9110 §7.6.1 hop-by-hop headers, plus the ones aiohttp sets for each side itself.
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)


def via(version: aiohttp.HttpVersion | None) -> str:
    """The proxy's ``Via`` entry for a message received over HTTP ``version`` (1.1 when unknown)."""
    major, minor = version or aiohttp.HttpVersion11
    return f"{major}.{minor} {PROXY_SERVER}"


def forwarded(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers as the upstream gets them: hop-by-hop ones and the phase header dropped, the
    proxy's ``Via`` added after any the client's message already had."""
    phase = PHASE_HEADER.lower()
    kept = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != phase]
    return [*kept, ("Via", via(request.version))]


def relayed(upstream: aiohttp.ClientResponse) -> list[tuple[str, str]]:
    """The upstream's headers as the client gets them, with the proxy's ``Via``."""
    kept = [(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP]
    return [*kept, ("Via", via(upstream.version))]


def name_own_answers(app: web.Application) -> None:
    """The proxy's own answers (a refused phase header, a 502) say ``Server: sparkwatch-proxy``; a relayed
    one keeps the upstream's (it carries the proxy's ``Via`` instead)."""
    app[SERVER_NAME] = PROXY_SERVER  # the connection guard's refusals too

    async def named(_request: web.Request, response: web.StreamResponse) -> None:
        if not any(PROXY_SERVER in value for value in response.headers.getall("Via", ())):
            response.headers["Server"] = PROXY_SERVER

    app.on_response_prepare.append(named)
