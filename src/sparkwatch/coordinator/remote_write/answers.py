"""What a remote-write receiver's answer means for the settings, in words: a refusal's likely cause, a
connection that was never made (the system's words, as the links say them), its Retry-After."""

from __future__ import annotations

import urllib.parse

import aiohttp

from sparkwatch.http_reasons import unreachable_reason


def shown_url(url: str) -> str:
    """The receiver's URL as logs show it: no user information, query or fragment."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def not_sent(exc: aiohttp.ClientError | OSError) -> str:
    """Why a batch never reached the receiver: "Connection refused", not aiohttp's ``ClientConnectorError:
    Cannot connect to host … ssl:default [Connect call failed …]``."""
    if isinstance(exc, aiohttp.ClientError):
        return unreachable_reason(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def refusal_hint(
    status: int, authorised: bool, location: str | None = None, service: str | None = None
) -> str:
    """What a refusal most likely means for the settings (a receiver's body often says nothing);
    ``service``: the sparkwatch service that answered instead of a receiver, by its Server header."""
    if service is not None:
        return f" (that URL is a {service}, not a remote-write receiver: give the engine's write URL)"
    if 300 <= status < 400:  # never followed: a redirected POST may lose its body, and a write is no GET
        where = f" to {shown_url(location)}" if location else ""
        return f" (the receiver redirects{where}: give --remote-write that URL, e.g. without a trailing /)"
    if status == 401:
        if authorised:
            return " (the receiver refused the credentials given)"
        return (
            " (the receiver wants credentials: --remote-write-bearer-token-file, or"
            " --remote-write-basic-auth-user with --remote-write-basic-auth-password-file)"
        )
    if status == 403:
        return " (the credentials given may not write here)"
    if status in (404, 405):
        return (
            " (no remote-write receiver at this URL: Prometheus takes writes at /api/v1/write only with"
            " --web.enable-remote-write-receiver; Mimir's is /api/v1/push, Thanos Receive's /api/v1/receive)"
        )
    return ""


def retry_after_s(text: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not used by remote-write receivers: ignored)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None
