"""Marks: a window begun by name (``POST .../marks``) and ended later into a window of that name, in the run
that is still open; the run's end drops those still open, since none can end in it after."""

from __future__ import annotations

import sqlite3

from sparkwatch.core.windows import Window, WindowError, check_window
from sparkwatch.store import refusals, windows
from sparkwatch.store.row_values import is_integer, shown_value
from sparkwatch.store.tx import Damaged, DuplicateIds, Invalid, NotFound, StoreError, tx


def begin_mark(db: sqlite3.Connection, run_id: str, name: str, phase: str, t_ns: int) -> None:
    try:
        with tx(db):
            end = refusals.run_span(db, run_id)[1]
            if end is not None:
                raise refusals.ended(run_id, end, "no mark can begin in it")
            if db.execute("SELECT 1 FROM windows WHERE run_id = ? AND id = ?", (run_id, name)).fetchone():
                message = (
                    f"window ids must be unique within run {run_id}: {name!r} is already in it, and a mark"
                    " ends as a window of its name"
                )
                raise DuplicateIds(message, [name], 1)
            db.execute("INSERT INTO marks VALUES (?, ?, ?, ?)", (run_id, name, phase, t_ns))
    except sqlite3.IntegrityError as exc:
        raise StoreError(f"mark {name!r} is already open in run {run_id}") from exc


def drop_marks(db: sqlite3.Connection, run_id: str) -> list[str]:
    """The marks still open in ``run_id``, by name, dropped: once the run has ended none can end in it."""
    with tx(db):
        names = [
            str(n) for (n,) in db.execute("SELECT name FROM marks WHERE run_id = ? ORDER BY name", (run_id,))
        ]
        db.execute("DELETE FROM marks WHERE run_id = ?", (run_id,))
    return names


def _refuse_ended(db: sqlite3.Connection, run_id: str, name: str) -> None:
    end = refusals.run_span(db, run_id)[1]
    if end is not None:
        raise refusals.ended(run_id, end, f"mark {name!r} cannot end in it (a mark ends before its run)")


def end_mark(db: sqlite3.Connection, run_id: str, name: str, t_ns: int, source: dict[str, object]) -> Window:
    _refuse_ended(db, run_id, name)  # before the mark is looked for: the run's end dropped those still open
    row = db.execute(
        "SELECT phase, t_begin_ns FROM marks WHERE run_id = ? AND name = ?", (run_id, name)
    ).fetchone()
    if row is None:
        raise NotFound(f"no open mark {name!r} in run {run_id}")
    if not is_integer(row[1]) or not isinstance(row[0], str):
        column, value = ("t_begin_ns", row[1]) if not is_integer(row[1]) else ("phase", row[0])
        raise Damaged(
            f"mark {name!r} of run {run_id} is damaged in the database: {column} {shown_value(value)}"
        )
    window = Window(id=name, phase=row[0], t_start_ns=row[1], t_end_ns=t_ns, source=source)
    try:  # as every stored window is (a clock stepped back since the mark began: its end before its begin)
        check_window(window)
    except WindowError as exc:
        raise Invalid(f"mark {name!r} of run {run_id} cannot end as a window: {exc}") from None
    try:
        with tx(db):
            _refuse_ended(db, run_id, name)  # again inside the transaction that writes the window
            db.execute("DELETE FROM marks WHERE run_id = ? AND name = ?", (run_id, name))
            windows.insert_one(db, run_id, window)
    except sqlite3.IntegrityError:  # a window of its name came since it began: the mark goes, or it would
        # stay open for ever (a new one of its name refused as already open)
        with tx(db):
            db.execute("DELETE FROM marks WHERE run_id = ? AND name = ?", (run_id, name))
        message = (
            f"window ids must be unique within run {run_id}: {name!r} is already in it; the mark is"
            " dropped, begin one of another name"
        )
        raise DuplicateIds(message, [name], 1) from None
    return window
