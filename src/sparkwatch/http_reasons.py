"""Why an HTTP request of ours failed, in words a user can act on: for the CLI's client, the coordinator's
links to agents and the simulated model's driver of sim agents alike."""

from __future__ import annotations

import json
import os

import aiohttp


def unreachable_reason(exc: aiohttp.ClientError) -> str:
    """Why a request failed: the system's words for a connection that could not be made (aiohttp's own
    say ``ssl:default`` of a plain-http URL too), the TLS library's for a handshake or certificate that
    failed (``[SSL: CERTIFICATE_VERIFY_FAILED] …``), else aiohttp's."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return str(exc.certificate_error)
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        if not isinstance(exc, aiohttp.ClientSSLError) and error.errno is not None and error.errno > 0:
            return os.strerror(error.errno)  # a resolver's errno is negative: its own words, below
        return error.strerror or str(error) or type(error).__name__
    return str(exc) or type(exc).__name__


def refusal_reason(text: str) -> str:
    """A sparkwatch server's JSON reason in one line (or the start of whatever else it sent)."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # a page nested past the parser's stack is no JSON reason
        return " ".join(text.split())[:200] or "(empty body)"
    if isinstance(body, dict) and "reason" in body:
        reason = body["reason"]
        if isinstance(reason, list):
            return "; ".join(f"{r.get('loc', '')}: {r.get('msg', '')}" for r in reason if isinstance(r, dict))
        return str(reason)
    return json.dumps(body)[:200]


def refusal_code(text: str) -> tuple[str | None, int | None]:
    """A sparkwatch server's JSON refusal's ``error`` word (None for any other answer), and the
    ``t_end_ns`` it carries (a ``run_ended``'s: where the run ended)."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return None, None
    code, end = (body.get("error"), body.get("t_end_ns")) if isinstance(body, dict) else (None, None)
    return code if isinstance(code, str) else None, end if type(end) is int else None


def failure_line(error: str) -> str:
    """A poller's failure as its state, its log and the store keep it (a meter's, the engine's): one line of
    at most 500 characters (as the store's error columns keep: a damaged file's line, path and recovery
    command included)."""
    return " ".join(error.split())[:500] or "failed"
