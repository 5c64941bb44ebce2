"""The reasons of a span's failed meter polls or engine scrapes, tallied in SQL (core/failures.py): a dead
meter fails every poll of a long run, and its rows are read here as a few groups, not one by one."""

from __future__ import annotations

import sqlite3

from sparkwatch.core.failures import MAX_REASONS, Reason


def reasons(db: sqlite3.Connection, table: str, where: str, params: tuple[object, ...]) -> list[Reason]:
    """Each distinct ``error`` of ``table``'s rows ``where`` holds: its first and last ``t_ns`` and count,
    the ``MAX_REASONS`` that came first."""
    return [
        Reason(int(first), int(last), int(count), str(error))
        for first, last, count, error in db.execute(
            f"SELECT MIN(t_ns), MAX(t_ns), COUNT(*), error FROM {table} WHERE {where}"
            " GROUP BY error ORDER BY MIN(t_ns) LIMIT ?",
            (*params, MAX_REASONS),
        )
    ]
