"""A small synchronous HTTP client for a Prometheus-compatible API (the export command is synchronous: no
event loop for a handful of GETs). TLS is verified (the system's CAs, or ``SSL_CERT_FILE``); credentials come
from files and never appear in a message or in the export."""

from __future__ import annotations

import base64
import http.client
import json
import math
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sparkwatch.meters.credentials import SecretFileError, first_line
from sparkwatch.sources import SourceError
from sparkwatch_agent.shared.http import host_port, other_service

TIMEOUT_S = 60.0
#: The most of an error body quoted in a message: its start and its end (VictoriaMetrics echoes the query
#: or the request URI first and gives its reason last, which the start alone cut off).
QUOTED_CHARS = 200
QUOTED_TAIL_CHARS = 200
#: The most one JSON answer may hold: a range query of half an hour (raw.CHUNK_MS) of one node's eight GPUs
#: at 100 Hz is ~45 MB; read whole and parsed, an answer costs about 13 times its size in memory.
MAX_ANSWER_BYTES = 128 << 20


@dataclass(frozen=True, slots=True)
class Auth:
    bearer_token_file: Path | None = None
    user: str | None = None
    password_file: Path | None = None

    def header(self) -> str | None:
        """The Authorization header, read from its files now (a rotated token is picked up)."""
        try:
            if self.bearer_token_file is not None:
                return f"Bearer {first_line(self.bearer_token_file, 'the bearer token', in_header=True)}"
            if self.user is not None:
                password = first_line(self.password_file, "the password") if self.password_file else ""
                pair = base64.b64encode(f"{self.user}:{password}".encode()).decode()
                return f"Basic {pair}"
        except SecretFileError as exc:
            raise SourceError(str(exc)) from None
        return None

    def refusal_hint(self, status: int) -> str:
        """What a 401 or 403 most likely means for the flags given (an engine's body often says nothing)."""
        if status == 401 and self.bearer_token_file is None and self.user is None:
            return (
                " (the engine wants credentials: --bearer-token-file, or --basic-auth-user with"
                " --basic-auth-password-file)"
            )
        if status == 401 and self.user is not None and self.password_file is None:
            return " (the engine refused --basic-auth-user without --basic-auth-password-file)"
        if status == 401:
            return " (the engine refused the credentials given)"
        return " (the credentials given may not read this)" if status == 403 else ""


def public_url(url: str) -> str:
    """``url`` without user information, query or fragment: what may be printed and exported."""
    parts = urllib.parse.urlsplit(url)
    netloc = host_port(parts.hostname or "", parts.port)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def check_url(url: str) -> str:
    """The engine's base URL as it may be shown, SourceError (one line) where :func:`url_problem` has one."""
    problem = url_problem(url)
    if problem is not None:
        raise SourceError(f"--prometheus: {problem}")
    return public_url(url)


def url_problem(url: str) -> str | None:
    """Why ``url`` is no engine's base URL (not http(s) with a host, a bad port, an API path, credentials:
    they would show in process lists and shell history, so the files take them), or None. The words never
    hold what may be credentials; the parser takes them as ``--prometheus``'s error."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as exc:  # not printed: the URL may carry credentials
        return f"not a URL with a valid host and port ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = f", not {url!r:.80}" if "@" not in url else ""  # never what may be credentials
        return f"must be an http:// or https:// URL with a host{shown}"
    if parts.username is not None or parts.password is not None:
        return (
            "credentials do not belong in the URL; use --bearer-token-file, or --basic-auth-user with"
            " --basic-auth-password-file"
        )
    if "/api/v1" in parts.path:
        return (
            "the engine's API root, without /api/v1/… (e.g. http://prom:9090, or VictoriaMetrics"
            f" cluster's …/select/0/prometheus), not {public_url(url)!r}"
        )
    return None


class Unreachable(SourceError):
    """No answer at all: refused, unresolvable, timed out (not worth asking the same engine again)."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the error it is, never followed: urllib would send the Authorization
    header on to wherever it points (another host, or http after https)."""

    def redirect_request(self, *_args: Any) -> None:
        return None


class EngineRefusal(SourceError):
    """The engine answered with an HTTP error: ``status`` says which (400 and 422: what was asked was bad)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


#: What to give instead when --prometheus names a sparkwatch service.
SERVICE_HINT = "give --prometheus the engine's URL, and a coordinator's URL to --coordinator"
#: What a certificate that does not verify most likely needs (verification is never switched off).
CA_HINT = " (an engine with a private CA: point SSL_CERT_FILE at its certificate)"
PLAIN_HINT = " (the engine answered without TLS: does its URL start with http://, not https://?)"
#: OpenSSL's reason for an answer that is no TLS record: before 3.2, and from 3.2 on.
NO_TLS_REASONS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE")
#: What a 404 from an endpoint most likely means.
NOT_FOUND_HINTS = {
    "/api/v1/export": " (no VictoriaMetrics export here: --engine auto asks the engine which it is)",
    "/api/v1/query": " (no Prometheus query API here: is --prometheus the engine's API root?)",
}


class Client:
    """GETs against one engine, each answer checked, every failure one :class:`SourceError` line."""

    def __init__(self, url: str, auth: Auth | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url
        self._auth = auth or Auth()
        self._timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirects)

    def _open(self, path: str, params: Mapping[str, str | list[str]]) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        request = urllib.request.Request(f"{self.url}{path}?{query}")
        header = self._auth.header()
        if header is not None:
            request.add_header("Authorization", header)
        try:
            return self._opener.open(request, timeout=self._timeout_s)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                exc.close()
                raise EngineRefusal(self._redirected(path, exc), exc.code) from None
            body = exc.read(4096).decode("utf-8", "replace")
            hint = NOT_FOUND_HINTS.get(path, "") if exc.code == 404 else self._auth.refusal_hint(exc.code)
            said = exc.headers
            named = {h: ", ".join(said.get_all(h) or ()) for h in ("Server", "Via")} if said else {}
            service = other_service(named, expected="")  # none of sparkwatch's services is an engine
            if service is not None:  # its 401 said "the engine wants credentials"
                hint = f" ({self.url} is a {service}, not a Prometheus-compatible engine: {SERVICE_HINT})"
            message = f"{self.url}{path} answered HTTP {exc.code}: {_reason(body)}{hint}"
            raise EngineRefusal(message, exc.code) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", None) or exc
            hint = CA_HINT if isinstance(why, ssl.SSLCertVerificationError) else ""
            if isinstance(why, ssl.SSLError) and getattr(why, "reason", None) in NO_TLS_REASONS:
                hint = PLAIN_HINT  # TLS spoken to a plain-http port: the answer is no TLS record
            reason = str(why) or type(why).__name__
            if isinstance(why, TimeoutError):  # "timed out", after a minute: of what, and how long
                reason = f"no answer in {self._timeout_s:g} s"
            raise Unreachable(f"cannot reach {self.url}{path}: {reason}{hint}") from None

    def _redirected(self, path: str, exc: urllib.error.HTTPError) -> str:
        where = exc.headers.get("Location") if exc.headers else None
        to = f" to {public_url(urllib.parse.urljoin(exc.url, where))}" if where else ""
        return (
            f"{self.url}{path} answered HTTP {exc.code}, a redirect{to}: not followed (it would carry the"
            " credentials there); give --prometheus the engine's own URL"
        )

    def get_json(self, path: str, params: Mapping[str, str | list[str]]) -> Any:
        """The ``data`` of a ``{"status": "success"}`` answer."""
        with self._open(path, params) as response:
            try:
                raw = response.read(MAX_ANSWER_BYTES + 1)
            except (http.client.HTTPException, OSError) as exc:
                raise self._cut_short(path, exc) from None
            if response.length and len(raw) <= MAX_ANSWER_BYTES:  # read(n) takes an early end for the end
                raise self._cut_short(path, http.client.IncompleteRead(raw, response.length))
            if len(raw) > MAX_ANSWER_BYTES:  # parsed whole, 450 MB of JSON took 6 GB and 78 s to refuse
                raise SourceError(
                    f"{self.url}{path} answered more than {MAX_ANSWER_BYTES >> 20} MiB to one query, more"
                    " than any of sparkwatch's reads (half an hour of one node's series) holds: is the URL"
                    " the engine's?"
                )
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise SourceError(f"{self.url}{path} answered something that is not JSON ({exc})") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise SourceError(f"{self.url}{path} refused: {_reason(json.dumps(body))}")
        return body.get("data")

    def get_lines(self, path: str, params: Mapping[str, str | list[str]]) -> Iterator[Any]:
        """Each line of a JSON-lines answer, parsed (VictoriaMetrics' export), as it arrives."""
        with self._open(path, params) as response:
            for number, line in enumerate(self._lines(path, response), 1):
                if not line.strip():
                    continue
                try:
                    parsed = orjson.loads(line)
                except orjson.JSONDecodeError:  # ±Inf or NaN as bare words (orjson takes neither), or bad
                    try:
                        parsed = json.loads(_json_constants(line), parse_constant=_constant)
                    except ValueError as exc:
                        if not line.endswith(b"\n"):  # the last line, unfinished: the answer ended early
                            raise self._cut_short(path, f"in line {number}") from None
                        raise SourceError(f"{self.url}{path} line {number} is not JSON ({exc})") from None
                yield parsed

    def _lines(self, path: str, response: Any) -> Iterator[bytes]:
        """The answer's lines as they arrive; a connection that breaks or stalls between them is one line."""
        try:
            yield from response
        except (http.client.HTTPException, OSError) as exc:
            raise self._cut_short(path, exc) from None

    def _cut_short(self, path: str, why: object) -> SourceError:
        """The engine's answer ended before its end (a dropped connection, a stall past the timeout)."""
        if isinstance(why, http.client.IncompleteRead):  # expected is None in a chunked answer
            got = len(why.partial)
            why = (
                "a chunk of it ended early"
                if why.expected is None
                else f"{got} of {got + why.expected} bytes"
            )
        return SourceError(f"{self.url}{path}: the answer was cut short ({str(why) or type(why).__name__})")


#: A values array of VictoriaMetrics' export, which writes ±Inf as Go does (``[+Inf]``, ``-Inf``: seen from
#: the real 1.79.5 server, tests/coordinator/test_prom_source.py), outside JSON.
_VALUES = re.compile(rb'"values":\[[^\]"]*\]')
_GO_CONSTANTS = re.compile(rb"(?<=[\[,])([+-])Inf(?=[,\]])")


def _json_constants(line: bytes) -> bytes:
    """The line with Go's ``+Inf``/``-Inf`` in its values written as json reads them (``Infinity``)."""
    return _VALUES.sub(lambda m: _GO_CONSTANTS.sub(lambda c: c[1].lstrip(b"+") + b"Infinity", m[0]), line)


def _constant(name: str) -> float:
    """NaN and ±Infinity as bare words (a staleness marker is a NaN)."""
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def _reason(body: str) -> str:
    """The ``error`` of a Prometheus API error body, else the body, on one line: its start and its end where
    it is long (see QUOTED_CHARS)."""
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            body = parsed["error"]
    except ValueError:
        pass
    text = " ".join(body.split())
    if len(text) > QUOTED_CHARS + QUOTED_TAIL_CHARS:
        text = f"{text[:QUOTED_CHARS]} … {text[-QUOTED_TAIL_CHARS:]}"
    return text or "(empty answer)"
