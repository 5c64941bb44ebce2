"""Readings of the meters the coordinator polls (stamped on its own clock, so no offset applies), and the
errors that explain their gaps.

A reading is read back checked against what ``add`` writes: the file is the user's, and a row edited or
damaged outside sparkwatch (a power of 'abc', an infinite energy) would otherwise reach the export as a
traceback or as a NaN read as "unknown". It is refused with one line that names the row and the column.
A finite power of any size is no damage: the export's interval checks already refuse implausible ones."""

from __future__ import annotations

import sqlite3
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from sparkwatch.core.failures import Reason
from sparkwatch.store import failure_reasons
from sparkwatch.store.row_values import shown_value
from sparkwatch.store.rows import F64, I64
from sparkwatch.store.tx import Damaged, tx


class MeterReading(NamedTuple):
    domain: str
    source: str  # meter:<kind>
    interval_s: float  # the poll interval
    t_ns: int  # coordinator clock: the middle of the request
    power_w: float | None
    energy_j: float | None  # the meter's own counter, J
    uncertainty_ns: int  # half the round trip, plus the meter's refresh period when known


@dataclass(frozen=True, slots=True)
class MeterRows:
    domain: list[str]
    source: list[str]
    t_ns: I64
    interval_s: F64
    power_w: F64  # NaN: unknown
    energy_j: F64
    uncertainty_ns: I64  # half the round trip, plus the meter's refresh period when known


def add(db: sqlite3.Connection, node: str, reading: MeterReading) -> bool:
    """Whether the reading was stored (False: one of that meter domain at that ns is already)."""
    with tx(db):
        cursor = db.execute(
            "INSERT OR IGNORE INTO meter_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (node, *_row(reading))
        )
    return cursor.rowcount == 1


def _row(r: MeterReading) -> tuple[object, ...]:
    return (r.domain, r.t_ns, r.source, r.interval_s, r.power_w, r.energy_j, r.uncertainty_ns)


def add_error(db: sqlite3.Connection, node: str, domain: str, t_ns: int, error: str, *, source: str) -> None:
    """A failed poll of the meter domain ``domain`` (``source``: ``meter:<kind>``, as its readings)."""
    with tx(db):
        db.execute(
            "INSERT OR IGNORE INTO meter_errors (node, domain, t_ns, error, source) VALUES (?, ?, ?, ?, ?)",
            (node, domain, t_ns, error[:500], source),
        )


#: A finite REAL or INTEGER (or NULL): not ±inf, which SQLite holds (NaN it stores as NULL), nor text.
_NUMBER = f"BETWEEN {-sys.float_info.max!r} AND {sys.float_info.max!r}"
#: Each column's test for a value ``add`` never writes, and what the refusal says of it.
_DAMAGE = MappingProxyType(
    {
        "interval_s": ("interval_s NOT {n}", "is not a finite number"),
        "power_w": ("power_w NOT {n}", "is not a finite number or null"),
        "energy_j": ("energy_j NOT {n}", "is not a finite number or null"),
        "uncertainty_ns": ("typeof(uncertainty_ns) != 'integer'", "is not an integer"),
        "domain": ("typeof(domain) != 'text'", "is not text"),
        "source": ("typeof(source) != 'text'", "is not text"),
    }
)
#: The first damaged column of each row, or NULL: found by SQLite as the rows are read, not per row in Python.
_DAMAGED = "CASE {} END".format(
    " ".join(f"WHEN {test.format(n=_NUMBER)} THEN '{column}'" for column, (test, _) in _DAMAGE.items())
)
_READ = ("domain", "source", "t_ns", "interval_s", "power_w", "energy_j", "uncertainty_ns")
_COLUMNS = f"{', '.join(_READ)}, {_DAMAGED}"


def rows(
    db: sqlite3.Connection, node: str, t_from_ns: int, t_to_ns: int, next_within_ns: int = 0
) -> MeterRows:
    """The readings in [t_from_ns, t_to_ns] by domain and time; with ``next_within_ns``, each of those
    domains' first reading after ``t_to_ns`` too, when it is at most that much later: it closes the span's
    last interval, and no later reading is read (an export made later reads the same)."""
    found = db.execute(
        f"SELECT {_COLUMNS} FROM meter_samples WHERE node = ? AND t_ns BETWEEN ? AND ? ORDER BY domain, t_ns",
        (node, t_from_ns, t_to_ns),
    ).fetchall()
    if (bad := next((row for row in found if row[-1]), None)) is not None:  # before a sort by its domain
        raise _damaged(node, bad)
    if next_within_ns:
        closing = [
            db.execute(  # by the whole key: one row read
                f"SELECT {_COLUMNS} FROM meter_samples"
                " WHERE node = ? AND domain = ? AND t_ns > ? AND t_ns <= ? ORDER BY t_ns LIMIT 1",
                (node, domain, t_to_ns, t_to_ns + next_within_ns),
            ).fetchone()
            for domain in dict.fromkeys(row[0] for row in found)
        ]
        found = sorted(
            [*found, *(row for row in closing if row is not None)], key=lambda row: (row[0], row[2])
        )
    columns = list(zip(*found, strict=True)) if found else [()] * (len(_READ) + 1)
    if any(columns[-1]):
        raise _damaged(node, next(row for row in found if row[-1]))
    return MeterRows(
        domain=[str(d) for d in columns[0]],
        source=[str(s) for s in columns[1]],
        t_ns=np.array(columns[2], dtype=np.int64),
        interval_s=np.array(columns[3], dtype=np.float64),
        power_w=np.array(columns[4], dtype=np.float64),
        energy_j=np.array(columns[5], dtype=np.float64),
        uncertainty_ns=np.array(columns[6], dtype=np.int64),
    )


def _damaged(node: str, row: tuple[Any, ...]) -> Damaged:
    """The one-line refusal of a row (as ``_COLUMNS`` reads it, its damaged column last)."""
    column = row[len(_READ)]
    value = row[_READ.index(column)]
    key = f"node {shown_value(node)}, domain {shown_value(row[0])}, t_ns {row[2]}"
    return Damaged(
        f"meter_samples row ({key}) is damaged in the database:"
        f" {column} {shown_value(value)} {_DAMAGE[column][1]}"
    )


def failure_times(db: sqlite3.Connection, node: str, t_from_ns: int, t_to_ns: int) -> dict[str, I64]:
    """Each meter domain's failed polls in the span, every one (where its readings break), by time."""
    found: dict[str, list[int]] = {}
    for domain, t_ns in db.execute(
        "SELECT domain, t_ns FROM meter_errors WHERE node = ? AND t_ns BETWEEN ? AND ? ORDER BY domain, t_ns",
        (node, t_from_ns, t_to_ns),
    ):
        found.setdefault(str(domain), []).append(int(t_ns))
    return {domain: np.array(times, dtype=np.int64) for domain, times in found.items()}


def reasons(
    db: sqlite3.Connection, node: str, domain: str, span_ns: tuple[int, int], *, with_source: bool = True
) -> tuple[list[Reason], str | None]:
    """The reasons of the domain's failed polls in the span (store/failure_reasons.py), and the meter kind
    its latest failed poll stored (``meter:<kind>``; None before schema 10, and for a schema-9 file read as
    it is, ``with_source`` False: no such column)."""
    where, params = "node = ? AND domain = ? AND t_ns BETWEEN ? AND ?", (node, domain, *span_ns)
    kind = None
    if with_source:
        row = db.execute(
            f"SELECT source FROM meter_errors WHERE {where} AND source IS NOT NULL"
            " ORDER BY t_ns DESC LIMIT 1",
            params,
        ).fetchone()
        kind = None if row is None else str(row[0])
    return failure_reasons.reasons(db, "meter_errors", where, params), kind
