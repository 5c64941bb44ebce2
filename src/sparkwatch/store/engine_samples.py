"""Samples of the serving engine's ``/metrics`` (stamped on the coordinator's clock, so no offset applies)
and the errors that explain their gaps. Kept by time, not by run: a run reads the span it needs."""

from __future__ import annotations

import json
import sqlite3
from typing import Any, NamedTuple

from sparkwatch.store.tx import tx

#: Errors kept in a span: the first ones say why a gap began.
MAX_ERRORS = 20


class EngineRow(NamedTuple):
    t_ns: int
    family: str | None
    interval_s: float
    fields: dict[str, float]  # our field → value (families.py)
    sources: dict[str, str]  # our field → the engine's series name
    unknown: tuple[str, ...]  # raw series names of an engine with no table


def add(db: sqlite3.Connection, row: EngineRow, uncertainty_ns: int) -> None:
    with tx(db):
        db.execute(
            "INSERT OR IGNORE INTO engine_samples VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                row.t_ns,
                row.family,
                row.interval_s,
                uncertainty_ns,
                json.dumps(row.fields),
                json.dumps(row.sources),
                json.dumps(list(row.unknown)) if row.unknown else None,
            ),
        )


def add_error(db: sqlite3.Connection, t_ns: int, error: str) -> None:
    with tx(db):
        db.execute("INSERT OR IGNORE INTO engine_errors VALUES (?, ?)", (t_ns, error[:500]))


def rows(db: sqlite3.Connection, t_from_ns: int, t_to_ns: int) -> list[EngineRow]:
    return [
        EngineRow(int(t), family, float(interval), _dict(fields), _dict(sources), tuple(_list(unknown)))
        for t, family, interval, fields, sources, unknown in db.execute(
            "SELECT t_ns, family, interval_s, fields, sources, unknown FROM engine_samples"
            " WHERE t_ns BETWEEN ? AND ? ORDER BY t_ns",
            (t_from_ns, t_to_ns),
        )
    ]


def errors(db: sqlite3.Connection, t_from_ns: int, t_to_ns: int) -> list[tuple[int, str]]:
    """(t_ns, error) of the first failed scrapes in the span."""
    return [
        (int(t), str(e))
        for t, e in db.execute(
            "SELECT t_ns, error FROM engine_errors WHERE t_ns BETWEEN ? AND ? ORDER BY t_ns LIMIT ?",
            (t_from_ns, t_to_ns, MAX_ERRORS),
        )
    ]


def failure_times(db: sqlite3.Connection, t_from_ns: int, t_to_ns: int) -> list[int]:
    """When each failed scrape in the span was (all of them, where ``errors`` keeps the first few): a gauge
    is not held across them."""
    return [
        int(t)
        for (t,) in db.execute(
            "SELECT t_ns FROM engine_errors WHERE t_ns BETWEEN ? AND ? ORDER BY t_ns", (t_from_ns, t_to_ns)
        )
    ]


def _dict(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def _list(text: str | None) -> list[str]:
    value = json.loads(text) if text else []
    return [str(v) for v in value] if isinstance(value, list) else []
