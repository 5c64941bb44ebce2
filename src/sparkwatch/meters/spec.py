"""A node's ``[nodes.NAME.meter]`` table in ``nodes.toml``, checked into a :class:`MeterSpec`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlparse

MeterKind = Literal["redfish", "shelly", "prometheus"]
KINDS: tuple[MeterKind, ...] = ("redfish", "shelly", "prometheus")
#: Polls more often than this would only measure the meter's own refresh; rarer ones miss short windows.
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.2, 60.0
SHELLY_COMPONENTS = ("Switch", "PM1")

_KEYS: dict[MeterKind, frozenset[str]] = {
    "redfish": frozenset({"chassis", "username", "password_file", "verify_tls", "refresh_s"}),
    "shelly": frozenset({"component", "id", "password_file", "refresh_s"}),
    "prometheus": frozenset({"query", "bearer_token_file", "verify_tls", "refresh_s"}),
}
_COMMON = frozenset({"kind", "url", "interval_s", "domain"})


class MeterSpecError(ValueError):
    """The table is wrong; the message says which key and why (the caller adds the file and node)."""


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


def parse_meter(table: Any) -> MeterSpec:
    """The meter table of one node; a MeterSpecError names the key at fault."""
    if not isinstance(table, dict):
        raise MeterSpecError("meter must be a table")
    kind = table.get("kind")
    if kind not in KINDS:
        raise MeterSpecError(f"meter kind must be one of {', '.join(KINDS)}, got {kind!r}")
    kind = cast(MeterKind, kind)
    unknown = sorted(set(table) - _COMMON - _KEYS[kind])
    if unknown:
        raise MeterSpecError(f"unknown keys for a {kind} meter: {', '.join(unknown)}")
    url = table.get("url")
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise MeterSpecError(f"meter url must be http(s)://host[:port], got {url!r}")
    interval = _number(table, "interval_s", 1.0)
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise MeterSpecError(f"meter interval_s must be within [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}] s")
    refresh = table.get("refresh_s")
    if refresh is not None and (_number(table, "refresh_s", 0.0) <= 0):
        raise MeterSpecError("meter refresh_s must be a positive number of seconds")
    component = table.get("component", "Switch")
    if component not in SHELLY_COMPONENTS:
        raise MeterSpecError(f"meter component must be one of {', '.join(SHELLY_COMPONENTS)}")
    if kind == "prometheus" and not isinstance(table.get("query"), str):
        raise MeterSpecError('a prometheus meter needs query = "…" (one series, in watts)')
    channel = table.get("id", 0)
    if type(channel) is not int or channel < 0:
        raise MeterSpecError("meter id must be a non-negative integer")
    return MeterSpec(
        kind=kind,
        url=str(url).rstrip("/"),
        interval_s=interval,
        domain=_text(table, "domain", "wall"),
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


def _number(table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MeterSpecError(f"meter {key} must be a number")
    return float(value)


def _text(table: dict[str, Any], key: str, default: str, longest: int = 64) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value or len(value) > longest:
        raise MeterSpecError(f"meter {key} must be a string of 1 to {longest} characters")
    return value


def _optional_text(table: dict[str, Any], key: str, longest: int = 64) -> str | None:
    return None if table.get(key) is None else _text(table, key, "", longest)


def _path(table: dict[str, Any], key: str) -> Path | None:
    return None if table.get(key) is None else Path(_text(table, key, "", longest=4096))


def _flag(table: dict[str, Any], key: str) -> bool:
    value = table.get(key, True)
    if not isinstance(value, bool):
        raise MeterSpecError(f"meter {key} must be true or false")
    return value
