"""Bytes per sample on disk: the coordinator's sample blocks beside the old row-per-sample schema and
VictoriaMetrics, for the same GB10 samples (issue 19, "A database that stays small": ≤ 100 B a sample).

Frames (benchmarks/_agent_frames.py): "idle" — the agent's own sampler on the simulated GB10 at 10 Hz
(values repeat: the easy case for any compressor); "busy" — the synthetic run's shapes (requests, util
dips, thermal slowdown, a hole, an agent restart, memory climbing) in the agent's field layout, quantised
to the units the agent reads. Each is decoded as a link decodes it (``wire.decode_frame``) and stored
through ``Store.ingest`` in batches of 1 (a live 10 Hz link) and of 500 (a replay), 4 nodes in turn.

Figures per agent sample (all its fields): the store file (db + wal after ``PRAGMA
wal_checkpoint(TRUNCATE)``) and the blocks' ``SUM(length(data))``; in the same run, the same frames as
rows of schema 1's ``samples`` (raw frame included, 16 KiB pages, WAL; rows as benchmarks/ingest.py's
raw_insert_rate builds them, same batches and node order) and VictoriaMetrics' ``du -sb`` after a flush
and a forced merge (benchmarks/_victoria.py). Sizes are deterministic for a seed: no rounds.

    python benchmarks/store_size.py [--samples 36000] [--nodes 4] [--frames idle,busy] [--batches 1,500]
"""

from __future__ import annotations

import argparse
import pathlib
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _agent_frames import T0_NS, busy_run, decoded, interleaved, sim_frames
from _common import old_row
from _victoria import BenchError, Victoria, exposition
from sparkwatch.store import Store
from sparkwatch.store.schema import MIGRATIONS

S = 1_000_000_000
HZ = 10.0
WINDOWS_PER_HOUR = 10_000 / 8  # the 8 h run's request rate
END_BEFORE_NOW_NS = 120 * S  # the samples end this long before now (VictoriaMetrics refuses the future)
KEEP_ALL_NS = 100 * 365 * 86_400 * S  # retention that drops nothing: the pass only merges and vacuums


@dataclass(frozen=True, slots=True)
class Frames:
    """One kind of frames for every node: hellos, a reader of lines by range, counts."""

    kind: str
    hellos: dict[str, list[dict[str, Any]]]
    lines: dict[str, Callable[[int, int], list[str]]]
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def idle_frames(nodes: int, samples: int) -> Frames:
    t0 = time.time_ns() - END_BEFORE_NOW_NS - round(samples / HZ * S)
    hellos, lines, counts = {}, {}, {}
    for i in range(nodes):
        node = f"spark-{i + 1}"
        hello, raw = sim_frames(node, samples, t0, HZ)
        text = [r.decode() for r in raw]
        hellos[node], counts[node] = [hello], len(text)
        lines[node] = _slicer(text)
    return Frames("idle (sim)", hellos, lines, counts)


def _slicer(text: list[str]) -> Callable[[int, int], list[str]]:
    return lambda lo, hi: text[lo:hi]


def busy_frames(nodes: int, samples: int, seed: int) -> Frames:
    hours = samples / HZ / 3600
    windows = max(2, round(WINDOWS_PER_HOUR * hours))
    shift = time.time_ns() - END_BEFORE_NOW_NS - round(hours * 3600 * S) - T0_NS
    run = busy_run(hours, nodes, windows, hz=HZ, seed=seed, shift_ns=shift)
    return Frames(
        "busy (synthetic)",
        {n.node: n.hellos() for n in run.nodes},
        {n.node: n.lines for n in run.nodes},
        {n.node: len(n) for n in run.nodes},
    )


def old_schema(path: pathlib.Path) -> sqlite3.Connection:
    """Schema 1 as benchmarks/ingest.py's raw_insert_rate makes it."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA page_size=16384")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=2048")
    db.executescript(MIGRATIONS[0])
    return db


def file_bytes(path: pathlib.Path) -> tuple[int, int]:
    """db + wal after a TRUNCATE checkpoint (no connection left open), and the free pages inside."""
    db = sqlite3.connect(path, isolation_level=None)
    busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise BenchError(f"checkpoint of {path} was blocked")
    (free,) = db.execute("PRAGMA freelist_count").fetchone()
    (page,) = db.execute("PRAGMA page_size").fetchone()
    db.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0), int(free) * int(page)


@dataclass(frozen=True, slots=True)
class Sizes:
    samples: int
    store_file: int
    store_free: int
    blob: int
    kept_file: int  # after a housekeeping pass: small blocks merged, free pages handed back
    kept_blob: int
    old_file: int
    old_frames: int  # SUM(length(frame)): the raw frames the old rows kept


def sqlite_sizes(frames: Frames, batch: int, folder: pathlib.Path) -> Sizes:
    """The frames through ``Store.ingest`` and into schema 1's rows, in the same batches and order."""
    store_path, old_path = folder / f"store-{batch}.db", folder / f"old-{batch}.db"
    store, old = Store(store_path), old_schema(old_path)
    for node, hellos in frames.hellos.items():
        for hello in hellos:
            store.record_hello(node, hello)
    for node, lines in interleaved(frames.lines, frames.counts, batch):
        parts = decoded(lines)
        if store.ingest(node, parts[0].boot_id, parts) != len(parts):
            raise BenchError(f"{node}: the store took fewer samples than it was given")
        old.execute("BEGIN")
        old.executemany(
            "INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [old_row(node, f.raw) for f in parts],
        )
        old.execute("COMMIT")
    samples = store.count_samples()
    store.close()
    (old_count,) = old.execute("SELECT COUNT(*) FROM samples").fetchone()
    (old_frames,) = old.execute("SELECT SUM(length(frame)) FROM samples").fetchone()
    old.close()
    if samples != frames.total or old_count != frames.total:
        raise BenchError(f"stored {samples} (blocks) and {old_count} (rows) of {frames.total} samples")
    blob = blob_bytes(store_path)
    store_file, store_free = file_bytes(store_path)
    old_file, _ = file_bytes(old_path)
    store = Store(store_path)
    for _ in store.retention_steps(KEEP_ALL_NS):
        pass
    if store.count_samples() != samples:
        raise BenchError("the housekeeping pass dropped samples")
    store.close()
    kept_file, _ = file_bytes(store_path)
    return Sizes(
        samples, store_file, store_free, blob, kept_file, blob_bytes(store_path), old_file, int(old_frames)
    )


def blob_bytes(path: pathlib.Path) -> int:
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    (blob,) = ro.execute("SELECT SUM(length(data)) FROM sample_blocks").fetchone()
    ro.close()
    return int(blob)


def victoria_bytes(frames: Frames, folder: pathlib.Path) -> tuple[int, int, int]:
    """VictoriaMetrics' size for the frames (settled), its empty size, and the points sent."""
    with Victoria(folder / "victoria") as vm:
        empty = vm.settled_size()
        for node, lines in interleaved(frames.lines, frames.counts, 5000):
            vm.push(list(exposition(decoded(lines), node)))
        return vm.settled_size(), empty, vm.sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=36_000, help="per node (36 000: 1 h at 10 Hz)")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--frames", default="idle,busy")
    parser.add_argument("--batches", default="1,500")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    makers = {"idle": lambda: idle_frames(args.nodes, args.samples)}
    makers["busy"] = lambda: busy_frames(args.nodes, args.samples, args.seed)
    print(
        f"{args.nodes} nodes x {args.samples:,} samples at {HZ:g} Hz; bytes per agent sample (all its fields)"
    )
    print("blocks: file after ingest (db + wal, checkpointed) and SUM(length(data)); then the same after one")
    print("housekeeping pass (small blocks merged, free pages handed back; nothing dropped)")
    print(
        f"{'frames':<17} {'batch':>5} {'samples':>8} {'file':>7} {'blob':>6} {'kept':>7} {'blob':>6}"
        f" {'old rows':>9} {'Victoria':>9} {'old/file':>9} {'file/VM':>8}"
    )
    with tempfile.TemporaryDirectory(prefix="sparkwatch-bench-size-") as tmp:
        for kind in args.frames.split(","):
            frames = makers[kind]()
            folder = pathlib.Path(tmp) / kind
            folder.mkdir()
            vm, vm_empty, points = victoria_bytes(frames, folder)
            for batch in batches:
                print_sizes(frames.kind, batch, sqlite_sizes(frames, batch, folder), vm / frames.total)
            print(
                f"{'':<17} VictoriaMetrics: {points:,} points ({points / frames.total:.1f} a sample), "
                f"{vm:,} B on disk, of which {vm_empty:,} B an empty store's"
            )


def print_sizes(kind: str, batch: int, s: Sizes, vm: float) -> None:
    n = s.samples
    file, kept, old = s.store_file / n, s.kept_file / n, s.old_file / n
    blocks = f"{file:>7.1f} {s.blob / n:>6.1f} {kept:>7.1f} {s.kept_blob / n:>6.1f}"
    ratios = f"{old / file:>8.1f}x {file / vm:>7.2f}x"
    print(f"{kind:<17} {batch:>5} {n:>8,} {blocks} {old:>9.1f} {vm:>9.1f} {ratios}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"store_size: {exc}")
