"""The ``[engine]`` table of ``nodes.toml`` (or ``run --engine-metrics URL``), checked into an
:class:`EngineSpec` at load time, so a wrong key is one line before anything is scraped."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkwatch.defaults import ENGINE_MAX_INTERVAL_S, ENGINE_MIN_INTERVAL_S
from sparkwatch.meters.spec import TableError, checked_http_url, toml_shown

MIN_INTERVAL_S, MAX_INTERVAL_S = ENGINE_MIN_INTERVAL_S, ENGINE_MAX_INTERVAL_S  # defaults.py says why
DEFAULT_INTERVAL_S = 1.0
METRICS_PATH = "/metrics"
_KEYS = frozenset({"url", "interval_s", "bearer_token_file"})


class EngineSpecError(TableError):
    """The ``[engine]`` table (or ``engine_metrics``) is wrong."""


@dataclass(frozen=True, slots=True)
class EngineSpec:
    url: str  # the engine's metrics page: http(s)://host:port/metrics
    interval_s: float = DEFAULT_INTERVAL_S
    bearer_token_file: Path | None = None  # for a /metrics that answers 401 (a proxy, some vLLM versions)


def parse_engine(table: Any) -> EngineSpec:
    """The ``[engine]`` table; an EngineSpecError names the key at fault."""
    if not isinstance(table, dict):
        raise EngineSpecError(
            f'must be a table with url = "http://host:8000/metrics", got {toml_shown(table)}'
        )
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        keys = ", ".join(sorted(_KEYS))
        raise EngineSpecError(f"unknown key (the keys are {keys})", unknown[0])
    interval = table.get("interval_s", DEFAULT_INTERVAL_S)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval):
        raise EngineSpecError(f"must be a number, got {toml_shown(interval)}", "interval_s")
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        raise EngineSpecError(
            f"must be within [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}] s, got {toml_shown(interval)}", "interval_s"
        )
    return EngineSpec(metrics_url(table.get("url")), float(interval), _path(table.get("bearer_token_file")))


def engine_from_url(url: str, interval_s: float = DEFAULT_INTERVAL_S) -> EngineSpec:
    """``run --engine-metrics URL``: the flag's spec (an EngineSpecError says what is wrong with the URL)."""
    return parse_engine({"url": url, "interval_s": interval_s})


def metrics_url(url: Any) -> str:
    """http(s)://host[:port][/path]; a URL without a path means the engine's ``/metrics`` (vLLM and SGLang
    both serve it there). No user or password in it: a token goes in ``bearer_token_file``."""
    shape = "must be http(s)://host[:port][/path] with a port 1–65535"
    parsed = checked_http_url(url, shape, "bearer_token_file", EngineSpecError)
    if parsed.fragment:
        raise EngineSpecError(f"{shape}, got {toml_shown(url)}", "url")
    if parsed.path in ("", "/"):
        return parsed._replace(path=METRICS_PATH).geturl()
    return str(url)


def _path(value: Any) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise EngineSpecError(f"must be a file path, got {toml_shown(value)}", "bearer_token_file")
    try:
        return Path(value).expanduser()
    except RuntimeError:  # HOME unset, or no such user
        raise EngineSpecError(
            f"cannot expand ~ in {toml_shown(value)}: no such user or home directory", "bearer_token_file"
        ) from None
