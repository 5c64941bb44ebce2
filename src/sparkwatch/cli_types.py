"""Argument types of the `sparkwatch` command line: each turns a wrong flag into argparse's one-line error
naming the flag as the user typed it, against the same bounds the coordinator's API enforces, before any
server starts."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from sparkwatch.defaults import (
    DEFAULT_COORDINATOR,
    ENV_COORDINATOR,
    ENV_TOKEN_FILE,
    MAX_INTERVAL_S,
    MAX_RUN_NAME_CHARS,
    MIN_INTERVAL_S,
    PHASE_RE,
    check_name,
    check_phases,
    check_series_buckets,
)
from sparkwatch_agent.config import ConfigError, parse_listen
from sparkwatch_agent.shared.strict_text import TextFormatError, cut_short, quoted_number, whole_number


def count(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {quoted_number(value)}")
    return value


def _whole(text: str) -> int:
    try:
        return whole_number(text)
    except TextFormatError as exc:  # a ValueError too: first
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {cut_short(text)!r}") from None


def positive_int(text: str) -> int:
    value = _whole(text)
    if value < 1:  # one sentence for 0 and -1 alike ("must not be negative" was said of -1 only)
        raise argparse.ArgumentTypeError(f"must be at least 1, got {quoted_number(value)}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


#: The longest wait a flag takes: a day. A model server may take half an hour to load; a larger figure is a
#: typo (``--wait 1e9`` was taken and said back as ``1e+09 s``).
MAX_WAIT_S = 86_400.0


def wait_s(text: str) -> float:
    """Seconds to wait for nodes: positive, at most MAX_WAIT_S."""
    value = positive_float(text)
    if value > MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WAIT_S:.0f} seconds (a day), got {text}")
    return value


def interval_s(text: str) -> float:
    """Seconds within the agents' bounds; 0, a negative or NaN is said as the range too, as 0.001 is."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} seconds, got {text}"
        )
    return value


_UNITS_S: Mapping[str, float] = MappingProxyType({"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0})
#: The longest retention an age may ask for (a century: its nanoseconds fit the store's 64-bit clocks).
MAX_RETENTION_S = 100 * 365.25 * 86400.0


def retention_s(text: str) -> float | None:
    """An age such as ``7d``, ``36h``, ``90m`` or ``600`` (seconds), at least a minute; ``forever``: None."""
    if text == "forever":
        return None
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS_S else (text, "s")
    try:
        value = float(number) * _UNITS_S[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an age like 7d, 36h, 90m or 600: {text!r}") from None
    if not 60 <= value <= MAX_RETENTION_S:
        raise argparse.ArgumentTypeError(f"must be a minute to 100 years (or 'forever'), got {text!r}")
    return value


def ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a ratio between 0 and 1, got {text}")
    return value + 0.0  # -0 is 0 ("recomputed with gate -0" was said)


def http_url(text: str) -> str:
    """An http(s) URL with a host and, if given, a port 1–65535."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a URL with a valid port: {text!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"must be an http:// or https:// URL with a host, got {text!r}")
    if port == 0:
        raise argparse.ArgumentTypeError(f"port must be 1-65535, got {text!r}")
    return text


def engine_url(text: str) -> str:
    """``--prometheus URL``: a Prometheus-compatible engine's base URL (sources/prometheus/client.py says
    what it may not be), refused as any flag is."""
    from sparkwatch.sources.prometheus.client import url_problem  # noqa: PLC0415  (numpy: only when given)

    problem = url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def agent_urls(text: str) -> tuple[str, ...]:
    """Agents' bases, comma-separated: each an http(s) URL with a host and no path beyond ``/`` (the agent's
    routes are below it), without credentials (its token comes from a file)."""
    urls = []
    for item in (u.strip() for u in text.split(",")):
        url = http_url(item).rstrip("/")
        parts = _without_credentials(url, "an agent URL must not carry credentials: give --agent-token-file")
        if parts.path or parts.query or parts.fragment:
            raise argparse.ArgumentTypeError(f"an agent URL is its base, http://HOST:PORT, got {item!r}")
        urls.append(url)
    return tuple(urls)


def _without_credentials(url: str, refusal: str) -> SplitResult:
    """``url``'s parts; ``refusal`` when it carries a user or a password."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise argparse.ArgumentTypeError(refusal)
    return parts


def upstream_url(text: str) -> str:
    """The proxy's upstream: an http(s) URL that each request's path is appended to, so no query or fragment
    (a request to ``…/?key=k`` went to ``…/?key=k/v1/chat/completions``), and no credentials: the client's
    own ``Authorization`` header is forwarded as sent (aiohttp refuses both at once: every request failed)."""
    url = http_url(text)
    parts = _without_credentials(
        url,
        "credentials do not belong in the upstream URL: the client's own Authorization header is forwarded"
        " as sent (give the key to the client)",
    )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise argparse.ArgumentTypeError(
            f"the upstream URL takes no query or fragment (each request's path and query are appended to"
            f" it): give {urlunsplit(parts._replace(query='', fragment=''))!r}"
        )
    return url


def remote_write_url(text: str) -> str:
    """A receiver's write endpoint: an http(s) URL without credentials (they would show in process lists
    and shell history: the token and password come from files)."""
    url = http_url(text)
    parts = _without_credentials(
        url,
        "credentials do not belong in the URL; use --remote-write-bearer-token-file, or"
        " --remote-write-basic-auth-user with --remote-write-basic-auth-password-file",
    )
    # a bare root is taken: Vector's prometheus_remote_write source listens at "/" (a Prometheus root is
    # then a 405 whose warning says where the engines take writes)
    if parts.path.rstrip("/").endswith(READ_ENDPOINTS):
        raise argparse.ArgumentTypeError(
            f"{url!r} is a read endpoint, not a receiver's write endpoint: e.g. http://prom:9090/api/v1/write"
            " (Prometheus, VictoriaMetrics), …/api/v1/push (Mimir), …/api/v1/receive (Thanos Receive)"
        )
    return url


#: Paths of the Prometheus HTTP API's reads: never where samples are written.
READ_ENDPOINTS = tuple(
    f"/api/v1/{name}"
    for name in ("query", "query_range", "series", "labels", "export", "read", "status/buildinfo")
)


def listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT``; port 0 picks a free one. Read as the agent and the coordinator read
    theirs (one parser: this one let ``h:1:2`` through as host ``h:1``)."""
    try:
        return parse_listen(text, named="the address")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def coordinator_args(parser: argparse.ArgumentParser | argparse._ArgumentGroup, group: Any = None) -> None:
    """``--coordinator URL`` (in ``group`` when given: mutually exclusive with ``--nodes``) and
    ``--token-file FILE``, defaulting to the environment (client.py). ``parser`` may be an argument
    group: both flags are then listed under its heading in ``--help``."""
    (group or parser).add_argument(
        "--coordinator",
        type=http_url,
        metavar="URL",
        help=f"coordinator API (default ${ENV_COORDINATOR} or {DEFAULT_COORDINATOR})",
    )
    parser.add_argument(
        "--token-file", type=Path, metavar="FILE", help=f"API token (default ${ENV_TOKEN_FILE})"
    )


def phases(text: str) -> tuple[str, ...]:
    """A comma-separated list of window phases to measure: ``timed`` or ``timed,warmup``."""
    try:
        return check_phases(tuple(p.strip() for p in text.split(",")))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def series_buckets(text: str) -> int:
    """``--series-buckets N``: the series block's time buckets, within the bounds the API takes."""
    try:
        return check_series_buckets(count(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def output_file(text: str) -> Path:
    """A file the command writes where its stdout is taken (a table, CMD's own output): ``-`` names no
    file here, and making one called ``-`` is never what was meant."""
    if text == "-":
        raise argparse.ArgumentTypeError("- is not standard output here: give a file (./- for one named -)")
    return Path(text)


def export_file(text: str) -> Path:
    """The JSON export `run` and `demo` write (:func:`output_file`), its report beside it as
    ``NAME.report.html``: a name ending in .html would hold the JSON and push the page to
    ``NAME.report.report.html``."""
    path = output_file(text)
    if path.name.lower().endswith((".html", ".htm")):
        raise argparse.ArgumentTypeError(
            f"{text!r} names the JSON export (its report goes beside it as NAME.report.html): give .json"
        )
    return path


def output_or_stdout(text: str) -> Path | None:
    """A file, or ``-`` for stdout (None), for a command that prints its JSON there without ``-o``."""
    return None if text == "-" else Path(text)


def basic_auth_user(text: str) -> str:
    """A basic-auth user-id: RFC 7617 §2 allows no colon in it (the receiver would split the credentials at
    it and read the rest as the password), and an empty one names nobody."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    if ":" in text:
        raise argparse.ArgumentTypeError("must not contain ':' (RFC 7617: it ends the user-id)")
    return text


def spill_file(text: str) -> Path:
    """Where unsent windows go: a ``.json`` file, the plain window format ``import plain`` reads back."""
    path = Path(text)
    if path.suffix.lower() != ".json":
        raise argparse.ArgumentTypeError(f"must be a .json file (a plain window file), got {text!r}")
    return path


def run_name(text: str) -> str:
    if not 1 <= len(text) <= MAX_RUN_NAME_CHARS:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_RUN_NAME_CHARS} characters, got {len(text)}")
    try:
        return check_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def phase(text: str) -> str:
    """One window phase: ``timed``, ``warmup`` or another short lower-case word."""
    if not PHASE_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must match {PHASE_RE.pattern}, got {text!r}")
    return text


def log_level_arg(parser: argparse.ArgumentParser, default: str) -> None:
    """``--log-level``: on the top level with its default, on every subcommand with none (SUPPRESS), so it
    may stand before or after the subcommand."""
    parser.add_argument("--log-level", default=default, choices=["debug", "info", "warning", "error"])


def engine_metrics_url(text: str) -> str:
    """The serving engine's /metrics URL (a URL without a path means /metrics), checked as the coordinator
    checks ``[engine] url``; imported here, not at the top: ``--help`` stays light."""
    from sparkwatch.engines.spec import EngineSpecError, engine_from_url  # noqa: PLC0415

    try:
        return engine_from_url(text).url
    except EngineSpecError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def epoch_ns(text: str) -> int:
    """A point in time as Unix seconds (``1764850000`` or ``1764850000.25``) or RFC 3339 with its offset
    (``2025-12-04T13:02:08Z``, ``…+01:00``), as epoch ns (exact: no float rounding of the seconds), between
    2000 and 2100 as every stamp sparkwatch takes (milliseconds given as seconds are refused here, not
    carried to the export's 64-bit integers)."""
    ns = _epoch_ns(text)
    from sparkwatch.core.windows import epoch_ns_problem  # noqa: PLC0415  (numpy: this flag only)

    if ns is None or epoch_ns_problem(ns) is not None:
        raise argparse.ArgumentTypeError(
            f"{cut_short(text)!r} is not a time between 2000 and 2100 (Unix seconds, not milliseconds, or"
            " RFC 3339)"
        )
    return ns


#: Seconds past any time sparkwatch takes (year 5138): not multiplied out (``1e999999999`` would be a
#: billion-digit integer, past decimal's own limits).
_SECONDS_PAST = 10**11


#: Unix seconds as sparkwatch takes them: ASCII digits, a fraction, an exponent (``Decimal`` alone took
#: ``1_796_583_903`` and full-width digits).
_SECONDS = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)", re.I
)
#: RFC 3339's date-time (§ 5.6), a space for its T as `runs list` shows one, " UTC" for its offset likewise
#: (``fromisoformat`` alone took week dates, basic forms, ``+0100``, ``+01:00:30`` and ``T19Z``).
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(Z| UTC|[+-][0-9]{2}:[0-9]{2})",
    re.I,
)


def _epoch_ns(text: str) -> int | None:
    """``text`` as epoch ns, to the nanosecond it gives (``fromisoformat`` kept microseconds); None for
    seconds too many to be a time (refused by the caller)."""
    import datetime  # noqa: PLC0415  (this flag only)
    import decimal  # noqa: PLC0415

    text = text.strip()
    if _SECONDS.fullmatch(text):
        seconds = decimal.Decimal(text)
        if not seconds.is_finite() or seconds < 0:
            raise argparse.ArgumentTypeError(f"not a time: {cut_short(text)!r}")
        if seconds >= _SECONDS_PAST:
            return None
        ns = seconds * 1_000_000_000
        if ns != ns.to_integral_value():
            raise argparse.ArgumentTypeError(f"finer than a nanosecond: {cut_short(text)!r}")
        return int(ns)
    found = _RFC3339.fullmatch(text)
    if found is None:
        hint = " (RFC 3339 needs its offset: Z or +hh:mm)" if _RFC3339.fullmatch(text + "Z") else ""
        raise argparse.ArgumentTypeError(
            f"not Unix seconds or an RFC 3339 time (e.g. 2025-12-04T13:02:08Z): {cut_short(text)!r}{hint}"
        )
    *fields, fraction, offset = found.groups()
    if fraction is not None and fraction[9:].strip("0"):
        raise argparse.ArgumentTypeError(f"finer than a nanosecond: {cut_short(text)!r}")
    try:
        zone = datetime.UTC
        if offset.upper() not in ("Z", " UTC"):
            hours, minutes = int(offset[1:3]), int(offset[4:6])
            if hours > 23 or minutes > 59:
                raise ValueError("offset out of range")
            sign = -1 if offset[0] == "-" else 1
            zone = datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))
        year, month, day, hour, minute, second = map(int, fields)
        moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError as exc:  # a month 13, a 31 February, a second 60
        raise argparse.ArgumentTypeError(f"not a time: {cut_short(text)!r} ({exc})") from None
    whole_s = int((moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)).total_seconds())
    return whole_s * 1_000_000_000 + int((fraction or "0")[:9].ljust(9, "0"))
