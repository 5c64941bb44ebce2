"""Keeping the database small: what no run covers goes once it is older than the idle retention, a deleted
run's samples go with it, and the pages they held go back to the file system a few at a time.

A run covers its span — from the earlier of its start and its first window's start to the later of its end
and its last window's end (an open run: onwards) — widened by ``MARGIN_NS``: the memory baseline before the
first window, and the clock-probe rounds an export reads around the span (a sample block is placed by its
agent's wall clock, which the margin also forgives). Idle samples are dropped, not downsampled: nothing
sparkwatch measures reads them, and a site that wants long idle history has its Prometheus for it
(``--remote-write``). Every step is its own short transaction, so links keep storing in between.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from sparkwatch.store.row_values import is_integer, shown_value
from sparkwatch.store.sample_reads import NEAREST_NS
from sparkwatch.store.tx import Damaged, tx

#: Around each run's span: the memory baseline (≤ 60 s), and the nearest probe rounds (≤ 600 s) of its boots.
MARGIN_NS = NEAREST_NS + 60 * 1_000_000_000
#: Blocks dropped per transaction, and pages handed back per incremental vacuum step.
DROP_BLOCKS = 200
VACUUM_PAGES = 256
#: Rows on the coordinator's clock, by table, time column and key; they go with the samples around them.
TIMED_TABLES = (
    ("clock_offsets", "t_ns", "rowid"),
    ("meter_samples", "t_ns", "node, domain, t_ns"),  # WITHOUT ROWID tables: deleted by primary key
    ("meter_errors", "t_ns", "node, domain, t_ns"),
    ("engine_samples", "t_ns", "rowid"),
    ("engine_errors", "t_ns", "rowid"),
    ("gaps", "recorded_ns", "rowid"),
)
#: Timed rows deleted per transaction.
DROP_ROWS = 5000
_NEVER = 2**63 - 1
#: A run ``r``'s start and end and its windows' first start and last end: each of the last two one seek in
#: its index (schema 13; a file older than that, read as it is, reads the run's windows).
_SPAN_COLUMNS = (
    "r.t_start_ns, r.t_end_ns, (SELECT MIN(t_start_ns) FROM windows WHERE run_id = r.id),"
    " (SELECT MAX(t_end_ns) FROM windows WHERE run_id = r.id)"
)

Span = tuple[int, int]


def run_spans(db: sqlite3.Connection, *, skip_damaged: bool = False) -> dict[str, Span]:
    """Each live run's span (not widened); a damaged row is a ``Damaged`` error, or left out."""
    rows = db.execute(f"SELECT r.id, {_SPAN_COLUMNS} FROM runs r WHERE r.deleted_at_ns IS NULL").fetchall()
    spans: dict[str, Span] = {}
    for row in rows:
        try:
            spans[str(row[0])] = _span(*row)
        except Damaged:
            if not skip_damaged:
                raise
    return spans


def _span(run_id: str, start: Any, end: Any, first: Any, last: Any) -> Span:
    """A run's span from its start and end (None: open) and its windows' first start and last end. A
    value that is not an integer (a row edited outside sparkwatch) is a StoreError naming it: a pass must
    not guess a span, and drop the samples of a run it misread."""
    named = (("t_start_ns", start), ("t_end_ns", end), ("its first window's t_start_ns", first))
    for column, value in (*named, ("its last window's t_end_ns", last)):
        if not is_integer(value) and (value is not None or column == "t_start_ns"):
            raise Damaged(
                f"run {run_id} is damaged in the database: {column} {shown_value(value)} is not an integer"
            )
    if end is not None and end < start:
        raise Damaged(f"run {run_id} is damaged in the database: t_end_ns {end} is before t_start_ns {start}")
    lo = min(start, first) if first is not None else start
    hi = _NEVER if end is None else max(end, last) if last is not None else end
    return int(lo), int(hi)


def covered(first_ns: np.ndarray, last_ns: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Which [first, last] ranges meet a span widened by ``MARGIN_NS``."""
    hit = np.zeros(len(first_ns), dtype=bool)
    for lo, hi in _widened(spans):
        hit |= (last_ns >= lo) & (first_ns <= hi)
    return hit


#: A block's span on the coordinator's clock, widely: its agent wall-clock range moved by the smallest and
#: the largest offset (coordinator − agent) measured in its boot (none probed: as stamped). Runs are on the
#: coordinator's clock; an agent clock hours off, or stepped by NTP in the middle of a boot, must not put a
#: run's samples outside the run (the export places them by the monotonic fit, which rides over a step).
#: Only integers place anything: a block or offset edited outside sparkwatch to 'abc' (which SQLite's
#: arithmetic takes as 0) is never dropped for where it seemed to be, nor moves another.
_PLACED = (
    "SELECT id, wall_first_ns + low, wall_last_ns + high FROM (SELECT b.id, b.wall_first_ns,"
    " b.wall_last_ns, COALESCE(o.low, 0) AS low, COALESCE(o.high, 0) AS high FROM sample_blocks b"
    " LEFT JOIN (SELECT node, boot_id, MIN(offset_ns) AS low, MAX(offset_ns) AS high FROM clock_offsets"
    " WHERE typeof(offset_ns) = 'integer' GROUP BY node, boot_id) o USING (node, boot_id)"
    " WHERE typeof(b.wall_first_ns) = 'integer' AND typeof(b.wall_last_ns) = 'integer')"
)


def drop_idle(db: sqlite3.Connection, before_ns: int, since_ns: int | None = None) -> Iterator[int]:
    """Steps that drop every block and timed row older than ``before_ns`` that no live run covers (timed
    rows from ``since_ns`` on: a caller that swept up to there before); each yields the blocks it dropped."""
    spans = LiveSpans(db)
    rows = db.execute(f"{_PLACED} WHERE wall_last_ns + high < ?", (before_ns,)).fetchall()
    yield from _drop_blocks(db, rows, spans)
    yield from _drop_timed(db, (since_ns, before_ns), spans)


class LiveSpans:
    """The live runs' spans, looked at again inside each step's transaction: a run opened while the steps
    go (`runs delete X && runs open Y`) is spared from the next step on (steps that knew only the runs of
    their start took the 11 minutes before Y with X's widened span). The runs' ids are read each time; a
    new run's span alone is read (its windows, by the windows' key), under the lock only that long.
    Windows added meanwhile to a run the steps already knew do not widen its span here."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._by_id = run_spans(db)
        self.spans = list(self._by_id.values())

    def changed(self) -> bool:
        """Whether a run was opened or deleted since the spans were read; the spans then follow."""
        ids = {str(r[0]) for r in self._db.execute("SELECT id FROM runs WHERE deleted_at_ns IS NULL")}
        if ids == self._by_id.keys():
            return False
        self._by_id = {i: span for i, span in self._by_id.items() if i in ids}
        for run_id in ids - self._by_id.keys():
            if (span := span_of(self._db, run_id)) is not None:  # None: deleted and forgotten meanwhile
                self._by_id[run_id] = span
        self.spans = list(self._by_id.values())
        return True


def span_of(db: sqlite3.Connection, run_id: str) -> Span | None:
    """One run's span, live or deleted, as :func:`run_spans` makes it; None for no such run."""
    row = db.execute(f"SELECT {_SPAN_COLUMNS} FROM runs r WHERE r.id = ?", (run_id,)).fetchone()
    return None if row is None else _span(run_id, *row)


def drop_span(db: sqlite3.Connection, span: Span) -> Iterator[int]:
    """Steps that drop the blocks and timed rows of a deleted run's ``span``, widened as a live run's is,
    that no live run covers, whatever their age (the run's samples go with it). Widened, because what an
    earlier deleted run left behind is what this run's widened span kept: deleting A, then B within
    ``MARGIN_NS`` of it, left A's samples near B for ever (retention ``forever``)."""
    spans = LiveSpans(db)
    ((lo, hi),) = _widened([span])
    rows = db.execute(
        f"{_PLACED} WHERE wall_last_ns + high >= ? AND wall_first_ns + low <= ?", (lo, hi)
    ).fetchall()
    yield from _drop_blocks(db, rows, spans)
    yield from _drop_timed(db, (lo, hi), spans)


#: Before blocks are dropped: the highest seq they hold, by boot, kept in ``boots.seq_dropped`` (schema 12)
#: where a link resumes after it (store.sample_store.SampleBlocks.top_seq) once no block holds it.
_DROPPED_TOPS = (
    "SELECT MAX(seq_last), node, boot_id FROM sample_blocks WHERE id IN ({ids})"
    " AND typeof(seq_last) = 'integer' GROUP BY node, boot_id"
)
_KEEP_TOP = "UPDATE boots SET seq_dropped = MAX(COALESCE(seq_dropped, 0), ?) WHERE node = ? AND boot_id = ?"


def _drop_blocks(db: sqlite3.Connection, rows: list[tuple[int, int, int]], live: LiveSpans) -> Iterator[int]:
    if not rows:
        return
    ids, first, last = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    doomed = np.flatnonzero(~covered(first, last, live.spans))
    at = 0
    while at < len(doomed):
        with tx(db):
            if live.changed():  # what is left to drop, judged again
                rest = doomed[at:]
                doomed = np.concatenate([doomed[:at], rest[~covered(first[rest], last[rest], live.spans)]])
            chunk = doomed[at : at + DROP_BLOCKS]
            dropped = _still_placed(db, ids[chunk], first[chunk], last[chunk])
            marks = ",".join("?" * len(dropped))  # DROP_BLOCKS at most: as many parameters
            db.executemany(_KEEP_TOP, db.execute(_DROPPED_TOPS.format(ids=marks), dropped).fetchall())
            db.executemany("DELETE FROM sample_blocks WHERE id = ?", [(i,) for i in dropped])
        at += len(chunk)
        yield len(dropped)


def _still_placed(db: sqlite3.Connection, ids: np.ndarray, first: np.ndarray, last: np.ndarray) -> list[int]:
    """Of blocks chosen before this step, those that still are what was chosen (the same bounds under the
    same id). A link merges its small blocks meanwhile, and SQLite may give the merged block a freed id:
    dropped by its old id, its fresh samples went with it."""
    chosen = dict(zip(ids.tolist(), zip(first.tolist(), last.tolist(), strict=True), strict=True))
    now = db.execute(f"SELECT * FROM ({_PLACED}) WHERE id IN ({','.join('?' * len(chosen))})", list(chosen))
    return [i for i, low, high in now.fetchall() if chosen.get(i) == (low, high)]


def _drop_timed(db: sqlite3.Connection, between: tuple[int | None, int], live: LiveSpans) -> Iterator[int]:
    """Timed rows in [from, to) (from None: from the first) outside every widened span, ``DROP_ROWS`` per
    transaction. The spans go into a temporary table: a condition per run would outgrow SQLite's expression
    depth (1 000) on a coordinator with that many runs."""

    def keep() -> None:
        db.execute("DELETE FROM temp.kept_spans")
        db.executemany("INSERT INTO temp.kept_spans VALUES (?, ?)", _widened(live.spans))

    db.execute("CREATE TEMP TABLE IF NOT EXISTS kept_spans (lo INTEGER NOT NULL, hi INTEGER NOT NULL)")
    keep()
    since, before = between
    for table, column, key in TIMED_TABLES:
        inside = f"SELECT 1 FROM temp.kept_spans k WHERE {table}.{column} BETWEEN k.lo AND k.hi"
        batch = (
            f"DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM {table} WHERE {column} >= ?"
            f" AND {column} < ? AND NOT EXISTS ({inside}) LIMIT {DROP_ROWS})"
        )
        while True:
            with tx(db):
                if live.changed():
                    keep()
                gone = db.execute(batch, (-(2**63) if since is None else since, before)).rowcount
            yield 0
            if gone < DROP_ROWS:
                break


def _widened(spans: Sequence[Span]) -> list[Span]:
    return [(lo - MARGIN_NS, min(hi, _NEVER - MARGIN_NS) + MARGIN_NS) for lo, hi in spans]


def vacuum_steps(db: sqlite3.Connection) -> Iterator[int]:
    """Hand free pages back ``VACUUM_PAGES`` at a time (a database with auto_vacuum=INCREMENTAL); each
    step yields 0: steps count the sample blocks they dropped, and a page is none (the pages counted
    once made "dropped 17578 sample blocks" of 28)."""
    while True:
        (free,) = db.execute("PRAGMA freelist_count").fetchone()
        if not free:
            return
        db.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
        yield 0


def sizes(db: sqlite3.Connection, spans: dict[str, Span]) -> dict[str, int]:
    """Bytes of sample blocks each run's span (not widened) touches, shared blocks counted in each: every
    block's row is read once (run it off the event loop)."""
    if not spans:
        return {}
    rows = db.execute(f"{_PLACED}").fetchall()
    if not rows:
        return dict.fromkeys(spans, 0)
    ids, first, last = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    lengths = dict(db.execute("SELECT id, length(data) FROM sample_blocks").fetchall())
    size = np.array([lengths.get(i, 0) for i in ids.tolist()], dtype=np.int64)
    return {run_id: int(size[(last >= lo) & (first <= hi)].sum()) for run_id, (lo, hi) in spans.items()}
