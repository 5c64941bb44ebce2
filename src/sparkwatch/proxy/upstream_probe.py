"""Whether the proxy's upstream answers at all when the proxy starts: a server that is not up, a wrong
port or a certificate that fails is said once, before the benchmark starts, not found by its first
request's 502 (or by a whole benchmark of them)."""

from __future__ import annotations

import aiohttp

from sparkwatch.http_reasons import unreachable_reason

#: How long the start waits for the upstream's answer: a refused port answers at once; a host that drops
#: packets costs this much before the warning.
PROBE_TIMEOUT_S = 3.0


async def upstream_unanswered(upstream: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why ``upstream`` gives no HTTP answer now; None when it answers, whatever the status (a HEAD of its
    URL: a model server's 404 or 405 there still proves it is up and speaks HTTP). It is not a refusal to
    start: the command may start the server itself."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.head(upstream, allow_redirects=False),
        ):
            return None
    except aiohttp.ClientError as exc:
        return unreachable_reason(exc)
    except TimeoutError:
        return f"no answer in {timeout_s:g} s"
