"""A run's whole-run window reads on a store holding one large run: its delete (`DELETE /v1/runs/{id}`: the
window count and the span's bounds before the tombstone), its count (`GET /v1/runs/{id}`) and the runs' spans
(`GET /v1/runs`' sizes, every retention pass). Schema 13 reads them from the windows' indexes; the baseline in
the same run is the statements the store ran before it (a filtered count and a MIN/MAX over every window row
of the run, and the runs LEFT JOIN windows GROUP BY), on the same file.

The store is built once per size (windows inserted in one transaction through SQLite, as an import's commit
leaves them) and cached in the temp dir; each figure is the median of --rounds, each round on a fresh copy
of the file (a delete changes it) with a warm page cache.

    python benchmarks/run_reads.py [--windows 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sqlite3
import statistics
import time
from collections.abc import Callable

from _common import bench_cache
from sparkwatch.core.windows import Window
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.windows import _VISIBLE

S = 1_000_000_000
T0 = 1_800_000_000 * S
RUN = "big"
#: What the store ran before schema 13, for the baseline.
OLD_COUNT = f"SELECT COUNT(*) FROM windows WHERE run_id = ? AND {_VISIBLE}"
OLD_BOUNDS = "SELECT MIN(t_start_ns), MAX(t_end_ns) FROM windows WHERE run_id = ?"
OLD_SPANS = (
    "SELECT r.id, r.t_start_ns, r.t_end_ns, MIN(w.t_start_ns), MAX(w.t_end_ns) FROM runs r"
    " LEFT JOIN windows w ON w.run_id = r.id WHERE r.deleted_at_ns IS NULL GROUP BY r.id"
)


def build(path: pathlib.Path, windows: int) -> None:
    """One ended run of ``windows`` one-second windows, through the store (its schema, its import)."""
    if path.exists():
        return
    tmp = path.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    store = Store(tmp, now_ns=lambda: T0 + (windows + 10) * S)
    store.create_run(RunRow(RUN, "bench", T0, None, 0.1, 0.5, "request"))
    step = 200_000
    for lo in range(0, windows, step):
        batch = [
            Window(f"req-{k:09d}", "timed", T0 + k * S, T0 + k * S + S // 2) for k in range(lo, lo + step)
        ]
        store.add_windows(RUN, batch[: max(0, min(step, windows - lo))])
    store.end_run(RUN, T0 + (windows + 5) * S)
    store.close()
    tmp.rename(path)


Prepared = Callable[[pathlib.Path], tuple[Callable[[], object], Callable[[], None]]]


def timed(path: pathlib.Path, prepare: Prepared, rounds: int) -> float:
    """Median seconds of the work ``prepare`` makes on a fresh copy of ``path`` (read once first, so the
    cache is warm), its connection opened before the clock starts and closed after it stops."""
    spent = []
    for _ in range(rounds):
        copy = path.with_name(f"copy-{path.name}")
        shutil.copyfile(path, copy)
        copy.read_bytes()
        work, done = prepare(copy)
        t0 = time.perf_counter()
        work()
        spent.append(time.perf_counter() - t0)
        done()
        copy.unlink()
    return statistics.median(spent)


def rows_read(*statements: str) -> Prepared:
    """The baseline: ``statements`` (with the run's id where they take one) on a plain connection."""

    def prepare(path: pathlib.Path) -> tuple[Callable[[], object], Callable[[], None]]:
        db = sqlite3.connect(path)
        return (lambda: [db.execute(q, (RUN,) if "?" in q else ()).fetchall() for q in statements]), db.close

    return prepare


def by_store(work: Callable[[Store], object]) -> Prepared:
    def prepare(path: pathlib.Path) -> tuple[Callable[[], object], Callable[[], None]]:
        store = Store(path)
        return (lambda: work(store)), store.close

    return prepare


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--windows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cache = bench_cache("sparkwatch-bench-run-reads")
    path = cache / f"run-{args.windows}.db"
    build(path, args.windows)
    size_mib = path.stat().st_size / 2**20
    rows = [
        (
            "delete (count + span, tombstone)",
            timed(path, rows_read(OLD_COUNT, OLD_BOUNDS), args.rounds),
            timed(path, by_store(lambda s: s.delete_run(RUN)), args.rounds),
        ),
        (
            "count (GET /v1/runs/ID)",
            timed(path, rows_read(OLD_COUNT), args.rounds),
            timed(path, by_store(lambda s: s.count_windows(RUN)), args.rounds),
        ),
        (
            "spans (GET /v1/runs: with the sizes)",
            timed(path, rows_read(OLD_SPANS), args.rounds),
            timed(path, by_store(lambda s: s.run_sizes()), args.rounds),
        ),
    ]
    print(f"one run of {args.windows:,} windows ({size_mib:.0f} MiB file); medians of {args.rounds} rounds")
    print(f"{'read':36} {'before (rows) ms':>17} {'now (indexes) ms':>17} {'ratio':>8}")
    for name, before, now in rows:
        print(f"{name:36} {before * 1e3:17.1f} {now * 1e3:17.2f} {before / now:7.1f}x")


if __name__ == "__main__":
    main()
