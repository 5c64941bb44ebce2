"""GETs that follow a redirect only on the server's own host: for readers that send credentials (meters,
engines' metrics pages). aiohttp's own following would send a Redfish session's X-Auth-Token (it strips
only Authorization) or a digest answer to another host, and store that host's reading as the node's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from yarl import URL

from sparkwatch_agent.shared.strict_text import cut_short

#: Redirects a reader follows on the server's own host (a trailing slash added, http upgraded to https).
MAX_REDIRECTS = 3


def _redirect_target(
    url: URL, response: aiohttp.ClientResponse, kind: str, error: type[Exception]
) -> URL | None:
    """Where ``response`` redirects, when it does and stays on the server (same host and port, or its https):
    the reader follows it there itself, credentials and all; None when it is no redirect. One leading
    elsewhere raises ``error``."""
    if not 300 <= response.status < 400:
        return None
    location = response.headers.get("Location") or ""
    target = url.join(URL(location)) if location else None
    same = target is not None and target.host == url.host
    if target is None or not same or not (target.origin() == url.origin() or target.scheme == "https"):
        raise error(
            f"{kind} answered HTTP {response.status} for {url.path}, pointing to"
            f" {cut_short(location or 'nowhere said', 120)}: not followed (another host: credentials"
            " go to the configured url only)"
        )
    return target


@contextlib.asynccontextmanager
async def get_on_host(
    session: aiohttp.ClientSession, url: URL, kind: str, error: type[Exception], **options: Any
) -> AsyncIterator[aiohttp.ClientResponse]:
    """``session.get(url, **options)``, its redirects on the same host followed (``_redirect_target``), at
    most ``MAX_REDIRECTS``; the final answer, whatever its status."""
    at = url
    for _ in range(MAX_REDIRECTS + 1):
        async with session.get(at, allow_redirects=False, **options) as response:
            target = _redirect_target(at, response, kind, error)
            if target is None:
                yield response
                return
        at = target
    raise error(f"{kind} redirected {url.path or '/'} more than {MAX_REDIRECTS} times")
