"""What reads a run's windows as a whole — its span (retention, `GET /v1/runs`' sizes, a delete's tombstone)
and its count (`GET /v1/runs/{id}`, a delete's answer) — reads indexes, never the windows' rows: each SQL
statement the store runs for them is caught (sqlite3's trace callback) and its query plan asked of SQLite.
A read of every row of a 15 M-window run took ~5 s, on the event loop for a run's count."""

from __future__ import annotations

import pathlib
import sqlite3

from sparkwatch.core.windows import Window
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow

S = 1_000_000_000
T0 = 1_800_000_000 * S
#: The tables (and aliases) of those statements that are not the windows: small, read as they come.
OTHER_TABLES = ("runs", "r", "imports")


def windows(prefix: str, count: int, start_s: int = 1) -> list[Window]:
    return [
        Window(f"{prefix}{i}", "timed", T0 + (start_s + i) * S, T0 + (start_s + i + 1) * S)
        for i in range(count)
    ]


def store_with_runs(path: pathlib.Path) -> Store:
    """Two runs: one ended with direct windows, a committed import and one still staged; one open."""
    clock = [T0]
    store = Store(path, now_ns=lambda: clock[0])
    store.create_run(RunRow("r1", "one", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", windows("d", 5, start_s=-10))  # before the run's start: its span reaches them
    done = store.begin_import("r1")
    store.add_windows("r1", windows("c", 7, start_s=20), done)
    store.commit_import("r1", done)
    store.add_windows("r1", windows("s", 3, start_s=40), store.begin_import("r1"))  # staged: unseen
    clock[0] = T0 + 100 * S
    store.end_run("r1", clock[0])
    store.create_run(RunRow("r2", "two", clock[0], None, 0.1, 0.5, "request"))
    store.add_windows("r2", windows("x", 2, start_s=101))
    return store


def window_plans(store: Store, work: str) -> list[tuple[str, list[str]]]:
    """Each statement ``work`` (a Store method with no argument but the run) ran that names the windows
    table, with the details of its query plan."""
    db: sqlite3.Connection = store._db  # the store's own connection: what its reads run on
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        getattr(store, work)("r1") if work != "run_sizes" else store.run_sizes()
    finally:
        db.set_trace_callback(None)
    plans = []
    for sql in statements:
        if "windows" in sql and sql.lstrip().upper().startswith("SELECT"):
            plans.append((sql, [str(row[3]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")]))
    return plans


def test_a_runs_span_count_and_tombstone_read_indexes_not_rows(tmp_path: pathlib.Path) -> None:
    store = store_with_runs(tmp_path / "c.db")
    for work in ("run_sizes", "count_windows", "deleted_run_span", "delete_run"):
        plans = window_plans(store, work)
        assert plans, f"{work} read no windows"
        for sql, steps in plans:
            reads = [
                step
                for step in steps
                if step.split()[0] in ("SCAN", "SEARCH") and step != "SCAN CONSTANT ROW"
            ]
            of_windows = [step for step in reads if step.split()[1] not in OTHER_TABLES]
            assert of_windows, (work, sql, steps)
            for step in of_windows:
                assert "USING COVERING INDEX" in step, (work, sql, steps)


def test_the_fast_count_and_span_are_what_a_read_of_every_row_gives(tmp_path: pathlib.Path) -> None:
    """The figures the indexes give: visible windows only (staged ones are not), the span over every row."""
    store = store_with_runs(tmp_path / "c.db")
    assert store.count_windows("r1") == len(store.windows("r1")) == 12
    assert store.count_windows("r2") == 2
    db = sqlite3.connect(tmp_path / "c.db")
    first, last = db.execute(
        "SELECT MIN(t_start_ns), MAX(t_end_ns) FROM windows WHERE run_id = 'r1'"
    ).fetchone()
    db.close()
    assert (first, last) == (T0 - 10 * S, T0 + 43 * S)
    store.delete_run("r1")
    assert store.count_windows("r1") == 0  # gone from every read at once
    assert store.deleted_run_span("r1") == (first, T0 + 100 * S)  # from the first window to the run's end
    assert store.run_sizes().keys() == {"r2"}
