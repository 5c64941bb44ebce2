"""The headers the proxy passes each way: everything but the hop-by-hop ones, which belong to each
connection, and its own phase header; and the proxy named as RFC 9110 asks (§7.6.3): a ``Via`` on every
message it forwards, so a client that reached it by mistake (its port given as the coordinator's) learns
what it reached, while a relayed answer keeps its origin's ``Server``."""

from __future__ import annotations

import re

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDictProxy

from sparkwatch.defaults import PHASE_RE
from sparkwatch_agent.shared.http import PROXY_SERVER, SERVER_NAME

PHASE_HEADER = "X-Sparkwatch-Phase"
#: RFC 9110 §7.6.1 hop-by-hop headers, plus the ones aiohttp sets for each side itself, and
#: ``Proxy-Connection``: in no RFC's list, but sent by libcurl (and others) to a proxy, for it alone (Go's
#: httputil.ReverseProxy and Apache httpd's mod_proxy drop it too).
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Proxy-Connection",
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


#: The answer to a request that came back to the proxy it already passed (508 Loop Detected, RFC 5842).
LOOP_REASON = (
    "this request already passed through this proxy: its upstream leads back to it, and each pass would"
    " forward it again; give the proxy the model server's URL"
)


def via_name(instance: str) -> str:
    """One proxy's ``Via`` received-by and comment (RFC 9110 §7.6.3): ``sparkwatch-proxy (a1b2c3)``, so a
    request that comes back to it is known (the section's loop detection) rather than forwarded again
    until its headers overflow, while the name stays the one clients look for (``other_service``)."""
    return f"{PROXY_SERVER} ({instance})"


def via(version: aiohttp.HttpVersion | None, name: str) -> str:
    """The proxy's ``Via`` entry for a message received over HTTP ``version`` (1.1 when unknown)."""
    major, minor = version or aiohttp.HttpVersion11
    return f"{major}.{minor} {name}"


def came_back(request: web.Request, name: str) -> bool:
    """Whether the request already passed the proxy called ``name``: an entry of its ``Via`` is that
    proxy's (:func:`via_name`) after the protocol."""
    entries = (e.strip().split(None, 1)[1:] for v in request.headers.getall("Via", ()) for e in v.split(","))
    return any(by == [name] for by in entries)


def phase_refusal(request: web.Request) -> str | None:
    """Why the request's phase header cannot be taken (None: absent, or one valid value)."""
    given = request.headers.getall(PHASE_HEADER, ())
    if len(given) > 1:  # which one the client meant is not for the proxy to guess
        return f"{PHASE_HEADER} is given {len(given)} times: give it once"
    if given and not PHASE_RE.fullmatch(given[0]):
        return f"{PHASE_HEADER} must match {PHASE_RE.pattern}"
    return None


#: What aiohttp makes of a header's bytes that are not UTF-8 (surrogate escapes), and then drops from a
#: value it writes: ``caf\xe9`` reached the other side as ``caf``.
_ESCAPED_BYTES = re.compile("[\udc80-\udcff]+")


def not_text(given: CIMultiDictProxy[str]) -> str | None:
    """Why ``given`` cannot be passed on unchanged: its first header whose value holds bytes that are not
    UTF-8 (obs-text), named with them; None when every value is text."""
    for key, value in given.items():
        if (found := _ESCAPED_BYTES.search(value)) is not None:
            shown = " ".join(f"0x{ord(c) - 0xDC00:02X}" for c in found[0][:4])
            return (
                f"header {key} holds bytes that are not UTF-8 text ({shown}), which the proxy cannot pass on"
            )
    return None


def _end_to_end(given: CIMultiDictProxy[str], also: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """``given`` without its hop-by-hop headers: the fixed set, ``also``, and those its ``Connection`` names
    (RFC 9110 §7.6.1: a header listed there belongs to this connection only)."""
    named = {n.strip().lower() for v in given.getall("Connection", ()) for n in v.split(",")}
    dropped = HOP_BY_HOP | also | named
    return [(k, v) for k, v in given.items() if k.lower() not in dropped]


def forwarded(request: web.Request, name: str) -> list[tuple[str, str]]:
    """The client's headers as the upstream gets them: hop-by-hop ones and the phase header dropped, the
    proxy's ``Via`` (as ``name``) added after any the client's message already had."""
    kept = _end_to_end(request.headers, frozenset({PHASE_HEADER.lower()}))
    return [*kept, ("Via", via(request.version, name))]


def relayed(upstream: aiohttp.ClientResponse, name: str) -> list[tuple[str, str]]:
    """The upstream's headers as the client gets them, with the proxy's ``Via`` (as ``name``)."""
    return [*_end_to_end(upstream.headers), ("Via", via(upstream.version, name))]


class _Untyped(web.StreamResponse):
    """An answer relayed without a Content-Type, as its upstream sent it: aiohttp gives every body one
    (``application/octet-stream``), where RFC 9110 §8.3 has a sender that does not know the type send none,
    and a proxy does not know it."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.CONTENT_TYPE, None)


def relay_response(upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """The client's answer to ``upstream``'s: its status and reason, and no Content-Type of the proxy's."""
    kind = web.StreamResponse if hdrs.CONTENT_TYPE in upstream.headers else _Untyped
    return kind(status=upstream.status, reason=upstream.reason)


def name_own_answers(app: web.Application) -> None:
    """The proxy's own answers (a refused phase header, a 502) say ``Server: sparkwatch-proxy``; a relayed
    one keeps the upstream's (it carries the proxy's ``Via`` instead)."""
    app[SERVER_NAME] = PROXY_SERVER  # the connection guard's refusals too

    async def named(_request: web.Request, response: web.StreamResponse) -> None:
        if not any(PROXY_SERVER in value for value in response.headers.getall("Via", ())):
            response.headers["Server"] = PROXY_SERVER

    app.on_response_prepare.append(named)
