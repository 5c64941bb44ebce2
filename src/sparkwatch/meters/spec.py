"""A node's ``[nodes.NAME.meter]`` table in ``nodes.toml``, checked into a :class:`MeterSpec`.

Every key's type and range is checked here, at load time: a meter that would only fail once polled (a port
out of range, ``verify_tls = "no"``, ``refresh_s = nan``) is refused before anything is dialled."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import ParseResult, urlparse

from sparkwatch_agent.shared.strict_text import cut_short

MeterKind = Literal["redfish", "shelly", "prometheus"]
KINDS: tuple[MeterKind, ...] = ("redfish", "shelly", "prometheus")
#: Polls more often than this would only measure the meter's own refresh; rarer ones miss short windows.
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.2, 60.0
#: The longest refresh period a meter may state: a BMC's is seconds. 1e300 s passed, and the poller died on
#: its first reading (the uncertainty in ns past 64 bits), in silence.
MAX_REFRESH_S = 3600.0
SHELLY_COMPONENTS = ("Switch", "PM1")
#: How much of a wrong value an error message repeats.
SHOWN_CHARS = 80

_KEYS: dict[MeterKind, frozenset[str]] = {
    "redfish": frozenset({"chassis", "username", "password_file", "verify_tls", "refresh_s"}),
    "shelly": frozenset({"component", "id", "password_file", "refresh_s"}),
    "prometheus": frozenset({"query", "bearer_token_file", "verify_tls", "refresh_s"}),
}
_COMMON = frozenset({"kind", "url", "interval_s", "domain"})


class TableError(ValueError):
    """A nodes.toml table is wrong: ``key`` (None: the table itself) and ``problem``; the caller adds the
    file (and the node)."""

    def __init__(self, problem: str, key: str | None = None) -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.key, self.problem = key, problem


class MeterSpecError(TableError):
    """A ``[nodes.NAME.meter]`` table is wrong."""


def checked_http_url(url: Any, shape: str, secret_hint: str, error: type[TableError]) -> ParseResult:
    """``url`` parsed, when it is a printable http(s)://host[:port]… with a real port and no user or
    password (secrets live in files: ``secret_hint`` says where); else ``error`` on key ``url``."""
    if not isinstance(url, str) or any(c.isspace() or not c.isprintable() for c in url):
        raise error(f"{shape}, got {toml_shown(url)}", "url")
    try:
        parsed = urlparse(url)
        port = parsed.port  # raises on a port that is not a number or out of range
    except ValueError:
        raise error(f"{shape}, got {toml_shown(url)}", "url") from None
    if "@" in parsed.netloc:  # not repeated: it may hold a password
        raise error(f"must not hold a user or password: use {secret_hint}", "url")
    if parsed.scheme not in ("http", "https") or not parsed.hostname or port == 0:
        raise error(f"{shape}, got {toml_shown(url)}", "url")
    return parsed


def toml_shown(value: Any) -> str:
    """``value`` as it would be written in TOML (strings quoted, ``true``), cut short: for error messages."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, int | float):
        text = str(value)
    elif isinstance(value, list):
        text = "[" + ", ".join(toml_shown(v) for v in value) + "]"
    elif isinstance(value, dict):
        text = "a table"
    else:  # TOML dates and times
        text = str(value)
    return cut_short(text, SHOWN_CHARS)


@dataclass(frozen=True, slots=True)
class MeterSpec:
    kind: MeterKind
    url: str  # the meter's base URL (Redfish service, Shelly device, Prometheus server)
    interval_s: float = 1.0
    domain: str = "wall"  # the domain's name in the export
    refresh_s: float | None = None  # the meter's own update period, when known: part of the uncertainty
    chassis: str | None = None  # redfish: the chassis id (default: the only one, else the first)
    username: str | None = None  # redfish
    password_file: Path | None = None  # redfish, shelly (digest auth as "admin")
    verify_tls: bool = True
    component: str = "Switch"  # shelly: Switch or PM1
    channel: int = 0  # shelly: the component's id
    query: str | None = None  # prometheus: one series, in watts
    bearer_token_file: Path | None = None  # prometheus

    @property
    def source(self) -> str:
        return f"meter:{self.kind}"

    @property
    def identity(self) -> tuple[object, ...]:
        """What tells one meter from another (the URL as it is dialled: scheme, host, port, path): two nodes
        that name the same one would each count its whole draw."""
        url = urlparse(self.url)
        port = url.port or (443 if url.scheme == "https" else 80)
        where = (url.scheme, (url.hostname or "").lower(), port, url.path.rstrip("/"))
        return (self.kind, *where, self.chassis, self.component, self.channel, self.query)


def parse_meter(table: Any) -> MeterSpec:
    """The meter table of one node; a MeterSpecError names the key at fault."""
    if not isinstance(table, dict):
        raise MeterSpecError(f"must be a table, got {toml_shown(table)}")
    kind = table.get("kind")
    if kind not in KINDS:
        got = "it is missing" if kind is None else f"got {toml_shown(kind)}"
        raise MeterSpecError(f"must be one of {', '.join(KINDS)}; {got}", "kind")
    kind = cast(MeterKind, kind)
    unknown = sorted(set(table) - _COMMON - _KEYS[kind])
    if len(unknown) == 1:
        raise MeterSpecError(f"unknown key for a {kind} meter", unknown[0])
    if unknown:
        raise MeterSpecError(f"unknown keys for a {kind} meter: {', '.join(unknown)}")
    interval = _number(table, "interval_s", 1.0)
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise MeterSpecError(
            f"must be within [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}] s, got {toml_shown(interval)}", "interval_s"
        )
    refresh = table.get("refresh_s")
    if refresh is not None and not 0 < _number(table, "refresh_s", 0.0) <= MAX_REFRESH_S:
        shown = toml_shown(refresh)
        raise MeterSpecError(
            f"must be a number of seconds in (0, {MAX_REFRESH_S:g}], got {shown}", "refresh_s"
        )
    component = table.get("component", "Switch")
    if component not in SHELLY_COMPONENTS:
        shown = toml_shown(component)
        raise MeterSpecError(f"must be one of {', '.join(SHELLY_COMPONENTS)}, got {shown}", "component")
    url = _url(table.get("url"))
    if kind == "redfish" and urlparse(url).path.rstrip("/").endswith("/redfish/v1"):
        raise MeterSpecError(f"is the BMC's address without /redfish/v1 (the reader adds it): {url!r}", "url")
    if kind == "redfish" and table.get("password_file") is not None and table.get("username") is None:
        raise MeterSpecError("password_file goes with a username (a Redfish login is a user's)", "username")
    if kind == "prometheus" and "query" not in table:
        raise MeterSpecError('a prometheus meter needs query = "…" (one series, in watts)', "query")
    channel = table.get("id", 0)
    if type(channel) is not int or channel < 0:
        raise MeterSpecError(f"must be a non-negative integer, got {toml_shown(channel)}", "id")
    return MeterSpec(
        kind=kind,
        url=url,
        interval_s=interval,
        domain=_name(table, "domain", "wall"),
        refresh_s=None if refresh is None else float(refresh),
        chassis=_optional_text(table, "chassis"),
        username=_optional_text(table, "username"),
        password_file=_path(table, "password_file"),
        verify_tls=_flag(table, "verify_tls"),
        component=component,
        channel=channel,
        query=_optional_text(table, "query", longest=4096),
        bearer_token_file=_path(table, "bearer_token_file"),
    )


def _url(url: Any) -> str:
    """http(s)://host[:port][/path]; no user or password in it (secrets live in files), a real port."""
    shape = "must be http(s)://host[:port] with a port 1–65535"
    parsed = checked_http_url(url, shape, "username and password_file", MeterSpecError)
    if parsed.query or parsed.fragment or str(url).endswith(("?", "#")):  # the readers append their paths
        raise MeterSpecError(
            f"must have no query or fragment (the reader adds its own path), got {url!r}", "url"
        )
    return str(url).rstrip("/")


def _number(table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise MeterSpecError(f"must be a number, got {toml_shown(value)}", key)
    return float(value)


def _text(table: dict[str, Any], key: str, default: str, longest: int = 64) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value or len(value) > longest:
        raise MeterSpecError(f"must be a string of 1 to {longest} characters, got {toml_shown(value)}", key)
    return value


def _name(table: dict[str, Any], key: str, default: str) -> str:
    """A name the export, the report and /metrics show (a domain's): printable, no spaces."""
    value = _text(table, key, default)
    if any(c.isspace() or not c.isprintable() for c in value):
        raise MeterSpecError(
            f"must be a name without spaces or control characters, got {toml_shown(value)}", key
        )
    return value


def _optional_text(table: dict[str, Any], key: str, longest: int = 64) -> str | None:
    return None if table.get(key) is None else _text(table, key, "", longest)


def _path(table: dict[str, Any], key: str) -> Path | None:
    """A file path with ``~`` expanded at load time, as in the rest of nodes.toml."""
    if table.get(key) is None:
        return None
    value = _text(table, key, "", longest=4096)
    try:
        return Path(value).expanduser()
    except RuntimeError:  # HOME unset, or no such user
        raise MeterSpecError(
            f"cannot expand ~ in {toml_shown(value)}: no such user or home directory", key
        ) from None


def _flag(table: dict[str, Any], key: str) -> bool:
    value = table.get(key, True)
    if not isinstance(value, bool):
        raise MeterSpecError(f"must be true or false (unquoted), got {toml_shown(value)}", key)
    return value
