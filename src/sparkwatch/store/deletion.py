"""Deleting a run without holding the write lock long and without a half-deleted run ever being seen.

Step 1 (:func:`tombstone`) is one tiny transaction: it sets ``runs.deleted_at_ns`` (and widens the row's
start and end over its windows, so its span is known once they are gone), and from then on every read of
the store leaves the run out (``LIVE_RUNS``). Step 2 (:func:`purge_step`, called until it says none is
left) deletes its windows, marks and imports ``PURGE_ROWS`` at a time, each chunk its own short
transaction, so the links' sample inserts never wait long for the lock. Step 3 drops the samples its span
touches that no live run covers (store/retention.py), and step 4 (:func:`forget`) the run row. A stop or
crash anywhere before step 4 leaves a tombstoned run that nobody sees, which :func:`tombstoned` lists for
the next coordinator start to finish from step 2 (the row went first once, and a stop during step 3 left
the run's samples for ever).
"""

from __future__ import annotations

import sqlite3

from sparkwatch.store.run_rows import RUN_COLUMNS_NODES, run_row
from sparkwatch.store.tx import Damaged, NotFound, StoreError, tx

#: Rows per purge transaction (like an aborted import's cleanup): a few milliseconds of writing.
PURGE_ROWS = 500
#: The ids of the runs every read may see: those not deleted.
LIVE_RUNS = "(SELECT id FROM runs WHERE deleted_at_ns IS NULL)"
#: The tables whose rows belong to a run, in the order they go (windows name their imports).
_RUN_TABLES = ("windows", "marks", "imports")


class RunOpen(StoreError):
    """A run that is still open cannot be deleted: its links are measuring it."""


def tombstone(db: sqlite3.Connection, run_id: str, now_ns: int) -> None:
    """Step 1: hide an ended run from every read. Refused for an unknown or already deleted run
    (``NotFound``) and for an open one (``RunOpen``), but one whose row was damaged outside sparkwatch: it
    cannot be ended (its row does not read), so deleting it is the only way out, and nothing measures it.
    Such a run ends where it is deleted (or at its last window), as if ended first: an open end would make
    its span reach for ever, and its samples' drop take what every later run needs."""
    row = db.execute(
        f"SELECT {RUN_COLUMNS_NODES} FROM runs WHERE id = ? AND id IN {LIVE_RUNS}", (run_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no run {run_id}")
    is_open = row[3] is None  # t_end_ns
    if is_open and not _damaged(row):
        raise RunOpen(f"run {run_id} is open: end it first (sparkwatch runs end {run_id}), then delete it")
    # read before the lock; the caller is the one writer of an ended run's windows (the window thread)
    first, last = db.execute(  # one aggregate per SELECT: each a seek in its index (schema 13), not a scan
        "SELECT (SELECT MIN(t_start_ns) FROM windows WHERE run_id = :id),"
        " (SELECT MAX(t_end_ns) FROM windows WHERE run_id = :id)",
        {"id": run_id},
    ).fetchone()
    with tx(db):
        cursor = db.execute(
            "UPDATE runs SET deleted_at_ns = :now,"
            " t_start_ns = MIN(t_start_ns, COALESCE(:first, t_start_ns)),"
            " t_end_ns = MAX(COALESCE(t_end_ns, :now), COALESCE(:last, t_end_ns, :now))"
            " WHERE id = :id AND deleted_at_ns IS NULL AND (t_end_ns IS NOT NULL OR :open)",
            {"now": now_ns, "first": first, "last": last, "id": run_id, "open": is_open},
        )
    if cursor.rowcount != 1:  # deleted meanwhile through another connection
        raise NotFound(f"no run {run_id}")


def _damaged(row: tuple[object, ...]) -> bool:
    try:
        run_row(row)
    except Damaged:
        return True
    return False


def purge_step(db: sqlite3.Connection, run_id: str) -> bool:
    """Step 2, one short transaction: up to ``PURGE_ROWS`` of the deleted run's rows. True when none is
    left (also when the run is gone already); its row stays for :func:`forget`."""
    with tx(db):
        row = db.execute("SELECT deleted_at_ns FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return True
        if row[0] is None:
            raise StoreError(f"run {run_id} is not deleted: refusing to purge it")
        for table in _RUN_TABLES:
            cursor = db.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE run_id = ? LIMIT ?)",
                (run_id, PURGE_ROWS),
            )
            if cursor.rowcount:
                return False
    return True


def forget(db: sqlite3.Connection, run_id: str) -> None:
    """Step 4: the deleted run's row, once its rows and samples are gone (a live run is never touched)."""
    with tx(db):
        db.execute("DELETE FROM runs WHERE id = ? AND deleted_at_ns IS NOT NULL", (run_id,))


def tombstoned(db: sqlite3.Connection) -> list[str]:
    """The runs deleted but not yet purged (a coordinator stopped or crashed in between)."""
    rows = db.execute("SELECT id FROM runs WHERE deleted_at_ns IS NOT NULL ORDER BY deleted_at_ns")
    return [str(row[0]) for row in rows]
