"""Samples of the serving engine's ``/metrics`` (stamped on the coordinator's clock, so no offset applies)
and the errors that explain their gaps. Kept by time, not by run: a run reads the span it needs.

A row is read back checked against what the poller writes (engines/): the file is the user's, and a row
edited or damaged outside sparkwatch (``fields`` that are not JSON, a token count of 'abc', a scrape
interval of 'abc') would otherwise reach the export as a traceback. It is refused with one line that names
the row and the column. A finite value outside the bounds the poller's scrape now follows (defaults.py,
``engine_value_max``: never negative, a count at most 2**53, a ratio at most 1) is left out of its scrape,
as the scrape leaves it out: no damage (a poller before them stored the engine's -50 as it was), but no
count either (a 1e308 would spoil the sums over other scrapes)."""

from __future__ import annotations

import json
import math
import sqlite3
import sys
from itertools import chain, repeat
from typing import Any, NamedTuple

import numpy as np

from sparkwatch.core.failures import Reason
from sparkwatch.defaults import ENGINE_FAMILY_NAMES as _FAMILIES
from sparkwatch.defaults import ENGINE_FIELD_MAX, ENGINE_MAX_COUNT, engine_value_max
from sparkwatch.defaults import ENGINE_MAX_INTERVAL_S as MAX_INTERVAL_S
from sparkwatch.defaults import ENGINE_MIN_INTERVAL_S as MIN_INTERVAL_S
from sparkwatch.store import failure_reasons
from sparkwatch.store.row_values import shown_value
from sparkwatch.store.tx import Damaged, tx


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
    """The scrapes in the span by time; a row the poller would never write is ``Damaged``. Checked a column
    at a time (a day of 1 s scrapes is 86 400 rows): row by row only to name the damaged one."""
    found = db.execute(
        "SELECT t_ns, family, interval_s, fields, sources, unknown FROM engine_samples"
        " WHERE t_ns BETWEEN ? AND ? ORDER BY t_ns",
        (t_from_ns, t_to_ns),
    ).fetchall()
    if not found:
        return []
    t_ns, family, interval_s, fields, sources, unknown = zip(*found, strict=True)
    values, names = [_json(f) for f in fields], [_json(s) for s in sources]
    raw = [[] if u is None else _json(u) for u in unknown]
    if not _sound(family, interval_s, values, names, raw):
        for row, parsed in zip(found, zip(values, names, raw, strict=True), strict=True):
            _refuse_damaged(row, *parsed)
        # the column checks found damage that no row's check names: refused all the same
        raise Damaged("an engine_samples row in the span is damaged in the database")
    _leave_out_of_bounds(values, names)
    return [
        EngineRow(*row)
        for row in zip(t_ns, family, map(float, interval_s), values, names, map(tuple, raw), strict=True)
    ]


def reasons(db: sqlite3.Connection, t_from_ns: int, t_to_ns: int) -> list[Reason]:
    """The reasons of the failed scrapes in the span (store/failure_reasons.py)."""
    return failure_reasons.reasons(db, "engine_errors", "t_ns BETWEEN ? AND ?", (t_from_ns, t_to_ns))


def failure_times(db: sqlite3.Connection, t_from_ns: int, t_to_ns: int) -> list[int]:
    """When each failed scrape in the span was (all of them, where ``reasons`` tallies them): a gauge is
    not held across them."""
    return [
        int(t)
        for (t,) in db.execute(
            "SELECT t_ns FROM engine_errors WHERE t_ns BETWEEN ? AND ? ORDER BY t_ns", (t_from_ns, t_to_ns)
        )
    ]


_UNREADABLE = object()
_NUMBERS = frozenset({float, int})  # not bool: true is no count


def _sound(family: Any, interval_s: Any, values: list[Any], names: list[Any], raw: list[Any]) -> bool:
    """Whether every row is as a poller writes it: a known family or none, its scrape interval within
    engines/spec.py's bounds, finite numbers and series names as JSON. Types are compared as sets and
    numbers as arrays, so no Python runs per row or value."""
    if not set(family) <= {None, *_FAMILIES} or not set(map(type, interval_s)) <= _NUMBERS:
        return False
    if not set(map(type, values)) | set(map(type, names)) <= {dict} or not set(map(type, raw)) <= {list}:
        return False
    numbers = list(chain.from_iterable(map(dict.values, values)))
    if not set(map(type, numbers)) <= _NUMBERS:
        return False
    series = chain(chain.from_iterable(map(dict.values, names)), chain.from_iterable(raw))
    if not set(map(type, series)) <= {str}:
        return False
    try:
        every, intervals = np.array(numbers, np.float64), np.array(interval_s, np.float64)
    except OverflowError:  # an integer of 400 digits
        return False
    return bool(
        np.isfinite(every).all() and ((intervals >= MIN_INTERVAL_S) & (intervals <= MAX_INTERVAL_S)).all()
    )


def _leave_out_of_bounds(values: list[dict[str, Any]], names: list[dict[str, Any]]) -> None:
    """Each value outside its field's bounds left out of its row (with its series' name), in place: the
    row as today's scrape would have stored it. Checked as one array; rows are walked only where one is."""
    numbers = list(chain.from_iterable(map(dict.values, values)))
    fields = chain.from_iterable(map(dict.keys, values))  # in the order of ``numbers``
    most = np.fromiter(map(ENGINE_FIELD_MAX.get, fields, repeat(ENGINE_MAX_COUNT)), np.float64, len(numbers))
    every = np.array(numbers, np.float64)
    if ((every >= 0) & (every <= most)).all():
        return
    for fields_of_row, names_of_row in zip(values, names, strict=True):
        for field in [f for f, v in fields_of_row.items() if not 0 <= v <= engine_value_max(f)]:
            del fields_of_row[field]
            names_of_row.pop(field, None)


def _refuse_damaged(row: tuple[Any, ...], values: Any, names: Any, raw: Any) -> None:
    """``Damaged``, naming the column, when the row (as ``rows`` reads it, its JSON parsed) is not as the
    poller writes it (t_ns is the table's rowid: always an integer)."""
    t_ns, family, interval_s, fields, sources, unknown = row

    def damaged(column: str, value: Any, what: str) -> Damaged:
        return Damaged(
            f"engine_samples row (t_ns {t_ns}) is damaged in the database:"
            f" {column} {shown_value(value)} {what}"
        )

    if family is not None and family not in _FAMILIES:
        raise damaged("family", family, f"is not one of {', '.join(_FAMILIES)} or null")
    if not _finite(interval_s) or not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        raise damaged("interval_s", interval_s, f"is not in [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}] seconds")
    if not isinstance(values, dict):
        raise damaged("fields", fields, "is not a JSON object")
    for name, value in values.items():
        if not _finite(value):
            raise damaged(f"fields[{shown_value(name)}]", value, "is not a finite number")
    if not isinstance(names, dict):
        raise damaged("sources", sources, "is not a JSON object")
    for name, value in names.items():
        if type(value) is not str:
            raise damaged(f"sources[{shown_value(name)}]", value, "is not a series name")
    if not isinstance(raw, list) or not all(type(n) is str for n in raw):
        raise damaged("unknown", unknown, "is not a JSON array of series names or null")


def _json(text: Any) -> Any:
    """The column's JSON, or ``_UNREADABLE`` (not JSON; not text at all)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return _UNREADABLE


def _finite(value: Any) -> bool:
    """A number a float holds, not inf or NaN (JSON's ``1e999`` reads as inf, an integer of 400 digits
    overflows a float; ``true`` is no number)."""
    if type(value) is float:
        return math.isfinite(value)
    return type(value) is int and abs(value) <= sys.float_info.max
