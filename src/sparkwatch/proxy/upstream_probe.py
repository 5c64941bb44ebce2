"""Whether the proxy's upstream can be reached when the proxy starts: a server that is not up, a wrong port
or a certificate that fails is said once, before the benchmark starts, not found by its first request's
502 (or by a whole benchmark of them)."""

from __future__ import annotations

import aiohttp

from sparkwatch.http_reasons import unreachable_reason
from sparkwatch_agent.shared.http import SIM_MODEL_SERVER, other_service

#: How long the start waits for the upstream's answer: a refused port answers at once; a host that drops
#: packets costs this much before the warning.
PROBE_TIMEOUT_S = 3.0


async def upstream_warning(upstream: str, shown: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """What to say of ``upstream`` (written ``shown``: no credentials) when the proxy starts; None when it
    answers a HEAD of its URL, whatever the status (a model server's 404 or 405 there still proves it up),
    unless the answer names another sparkwatch service (a coordinator's or an agent's port given).
    Only a connection that cannot be made (refused, a name that does not resolve, TLS) is said to mean
    502s, since the proxy's own requests fail the same way; no answer in time is said as that (the proxy
    itself waits 10 s to connect and an hour for an answer). It is never a refusal to start: the command
    may start the server itself."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.head(upstream, allow_redirects=False) as answer,
        ):
            service = other_service(answer.headers, expected="")  # a model server is none of ours
            if service is None or service == SIM_MODEL_SERVER:
                return None
            return f"the upstream {shown} is a {service}, not a model server: check the upstream URL"
    except aiohttp.ClientConnectorError as exc:
        why, then = unreachable_reason(exc), "requests through the proxy get 502 until it can"
        return f"the upstream {shown} cannot be reached ({why}): {then}"
    except (aiohttp.ClientError, TimeoutError):
        return f"the upstream {shown} did not answer a HEAD within {timeout_s:g} s: check that it is up"
