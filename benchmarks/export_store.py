"""A run's export from the coordinator's SQLite store beside the "SELECT-into-numpy + searchsorted" floor
(issue 19: the 8 h × 4 node × 10 Hz run with 10 000 windows in ≤ 3 s, ≤ 1.5× the floor, peak RSS ≤ 150 MiB;
a 1 h run ≤ 0.5 s).

The store is built once per size and cached in the temp dir (``--rebuild`` makes it again): the synthetic
run's shapes as agent frames (benchmarks/_agent_frames.py: busy GB10s, a hole, an agent restart, a thermal
slowdown), each decoded by ``wire.decode_frame`` and stored through ``Store.ingest`` in batches of 1000;
a clock-probe round every 10 s per node and boot (``Store.add_offset``, monotonic offsets as a link stores
them), a hello per boot, the run and its windows (``create_run``, ``add_windows``, ``end_run``). The 1 h
run keeps the 8 h run's request rate (1 250 windows).

Each round runs in a fresh subprocess, so imports and caches are paid as a `sparkwatch export` pays them:
the export is ``export_run(store, run_id, nodes, now_ns)`` over ``Store.read_only``; "export -o" is what
`sparkwatch export --db F -o OUT` does: that, the export written to a file by ``outputs.write_export`` and
judged for the quality line (``commands.quality.judge``), the windows spooled as they are first made where
the tree has ``window_spool`` (before it, they were made three times: digest, file, judge);
the floor, one SELECT of the span's blocks per node decoded into numpy (``sample_block.decode_blob``,
concatenate) and a join of every window's [start, end] against the node's GPU sample times
(np.searchsorted, power summed per window by cumsum); "windows", what the coordinator makes for
``GET /v1/runs/{id}/windows`` (``run_windows`` encoded): what `export --prometheus URL RUN` asks of it
(beside the run's row, ``GET /v1/runs/{id}``); "answer", what it makes for ``GET /v1/runs/{id}/export``:
the export and its compact JSON pieces (counted, not held), the windows spooled in the API's form as the
digest's pass makes them where the tree has that (``piece_stream.computed_export``; before, made twice).
Each reports wall and CPU seconds of that work, the child's peak RSS after its imports and at the end
(VmHWM: ``ru_maxrss`` would carry this parent's own peak into the child, see ``_rss_mib``). Medians over
--rounds, the kinds interleaved.

    python benchmarks/export_store.py [--rounds 5] [--sizes 1,8] [--rebuild]
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import pathlib
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import bench_cache

S = 1_000_000_000
NODES = 4
WINDOWS_PER_HOUR = 10_000 / 8
RUN_ID = "bench"
#: The export reads this much before the run (core.baseline.BASELINE_S + 5 s, sparkwatch.sources.LEAD_NS).
LEAD_NS = 15 * S
#: What each round measures, in this order (the floor first: the ratios' baseline).
KINDS = ("floor", "export", "export -o", "windows", "answer")
#: Where export_run has lived (it moved from the coordinator to the sources package).
EXPORT_MODULES = ("sparkwatch.sources.store", "sparkwatch.coordinator.export_inputs")


# ---- the children: one export or one floor, timed ------------------------------------------------------


def _rss_mib() -> float:
    """The process's peak RSS so far. Not ``ru_maxrss``: Linux carries a parent's high-water mark across
    fork and exec into it (a child of a 300 MiB parent reports ≥ 300 MiB), while VmHWM is this image's."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB; no /proc: the fallback


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_export(path: pathlib.Path, *, written: bool = False) -> dict[str, Any]:
    """``export_run``; ``written``: and what `sparkwatch export -o` does with it (commands/export_cmd.py):
    the export written to a file, and judged for the quality line; where the tree has a window spool, the
    windows tapped into it as the digest's pass makes them, and the file and the judge read it."""
    export_run = _export_run()
    spool = _spool(keep=_judged_fields()) if written else None
    base = _rss_mib()
    t0, c0 = time.perf_counter(), _cpu_s()
    export = _exported(path, export_run, spool)
    if written:
        from sparkwatch.commands.quality import judge
        from sparkwatch.outputs import write_export

        with tempfile.TemporaryDirectory() as folder:
            if spool is None:
                write_export(pathlib.Path(folder) / "export.json", export)
                judge(export)
            else:
                write_export(pathlib.Path(folder) / "export.json", export, spool)
                judge(export, windows=spool.kept(len(export["windows"])))
                spool.close()
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    gated = [n["power_w"]["gated_mean"] for n in export["nodes"]]
    return {"wall_s": wall, "cpu_s": cpu, "rss_base_mib": base, "rss_peak_mib": _rss_mib(), "check": gated}


def _exported(path: pathlib.Path, export_run: Any, spool: Any) -> dict[str, Any]:
    """``export_run`` over a read-only store, the windows tapped into ``spool`` where there is one (both
    found, imports and all, before the caller's clock starts)."""
    from sparkwatch.store import Store  # imported with export_run's module already

    store = Store.read_only(path)
    tapped = {} if spool is None else {"windows_tap": spool}
    export: dict[str, Any] = export_run(store, RUN_ID, store.node_names(), time.time_ns, **tapped)
    store.close()
    return export


def _spool(**options: Any) -> Any:
    """A window spool (``options``: its own), or None in a tree from before it or its form."""
    try:
        from sparkwatch.window_spool import WindowSpool

        return WindowSpool(**options)
    except (ImportError, TypeError):
        return None


def _judged_fields() -> tuple[str, ...]:
    try:
        from sparkwatch.commands.quality import JUDGED_FIELDS
    except ImportError:
        return ()
    return tuple(JUDGED_FIELDS)


def child_answer(path: pathlib.Path) -> dict[str, Any]:
    """What the coordinator makes for ``GET /v1/runs/{id}/export`` (see the module docstring)."""
    from sparkwatch.core.json_pieces import json_pieces

    export_run = _export_run()
    spool = _spool(wire_form=True)
    base = _rss_mib()
    t0, c0 = time.perf_counter(), _cpu_s()
    export = _exported(path, export_run, spool)
    if spool is None:
        size = sum(len(piece) for piece in json_pieces(export))
    else:
        from sparkwatch.window_spool import wire_pieces

        size = sum(len(piece) for piece in wire_pieces(export, spool))
        spool.close()
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    return {"wall_s": wall, "cpu_s": cpu, "rss_base_mib": base, "rss_peak_mib": _rss_mib(), "check": size}


def child_windows(path: pathlib.Path) -> dict[str, Any]:
    """What the coordinator makes for ``GET /v1/runs/{id}/windows`` (the run and its windows as stored: what
    `export --prometheus RUN` asks of it besides the run's row): ``run_windows`` encoded by ``json_pieces``,
    as the route encodes it; before that route, the command had the coordinator compute the export."""
    from sparkwatch.core.json_pieces import json_pieces
    from sparkwatch.sources.store import run_windows
    from sparkwatch.store import Store

    base = _rss_mib()
    t0, c0 = time.perf_counter(), _cpu_s()
    store = Store.read_only(path)
    answer = run_windows(store, RUN_ID)
    store.close()
    size = sum(len(piece) for piece in json_pieces(answer))
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    check = [len(answer["windows"]), size]
    return {"wall_s": wall, "cpu_s": cpu, "rss_base_mib": base, "rss_peak_mib": _rss_mib(), "check": check}


def _export_run() -> Any:
    for name in EXPORT_MODULES:
        try:
            return importlib.import_module(name).export_run
        except (ImportError, AttributeError):
            continue
    raise SystemExit(f"export_run is in none of {', '.join(EXPORT_MODULES)}: grep for it and add its home")


def child_floor(path: pathlib.Path) -> dict[str, Any]:
    import numpy as np

    from sparkwatch.store.sample_block import decode_blob

    base = _rss_mib()
    t0, c0 = time.perf_counter(), _cpu_s()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    start, end = db.execute("SELECT t_start_ns, t_end_ns FROM runs WHERE id = ?", (RUN_ID,)).fetchone()
    spans = np.array(
        db.execute(
            "SELECT t_start_ns, t_end_ns FROM windows WHERE run_id = ? ORDER BY t_start_ns", (RUN_ID,)
        ).fetchall(),
        dtype=np.int64,
    )
    means = []
    for (node,) in db.execute("SELECT name FROM nodes ORDER BY position").fetchall():
        (offset,) = db.execute(
            "SELECT offset_ns FROM clock_offsets WHERE node = ? LIMIT 1", (node,)
        ).fetchone()
        rows = db.execute(
            "SELECT data FROM sample_blocks WHERE node = ? AND wall_last_ns >= ? AND wall_first_ns <= ?"
            " ORDER BY boot_id, seq_first",
            (node, start - LEAD_NS - offset, end - offset),
        ).fetchall()
        blocks = [decode_blob(data).columns for (data,) in rows]
        t = np.concatenate([np.repeat(c["t_wall_ns"], c["gpu_n"]) for c in blocks]) + offset
        power = np.concatenate([c["gpu_power_w"] for c in blocks])
        order = np.argsort(t, kind="stable")
        t, power = t[order], np.nan_to_num(power[order])
        total = np.concatenate(([0.0], np.cumsum(power)))
        lo = np.searchsorted(t, spans[:, 0], side="left")
        hi = np.searchsorted(t, spans[:, 1], side="right")
        per_window = (total[hi] - total[lo]) / np.maximum(hi - lo, 1)
        means.append(float(np.mean(per_window[hi > lo])))
    db.close()
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    return {"wall_s": wall, "cpu_s": cpu, "rss_base_mib": base, "rss_peak_mib": _rss_mib(), "check": means}


# ---- the parent: build once, time in children ---------------------------------------------------------


def build_store(path: pathlib.Path, hours: float, seed: int) -> None:
    """The run as a coordinator would have stored it (see the module docstring); written beside ``path``
    and renamed onto it once whole."""
    from _agent_frames import busy_run, decoded, interleaved
    from sparkwatch.store import Store
    from sparkwatch.store.run_rows import RunRow

    windows = round(WINDOWS_PER_HOUR * hours)
    run = busy_run(hours, NODES, windows, seed=seed)
    part = path.with_suffix(".part")
    for leftover in (part, part.with_name(part.name + "-wal"), part.with_name(part.name + "-shm")):
        leftover.unlink(missing_ok=True)
    ticks = itertools.count(run.t_end_ns)
    store = Store(part, now_ns=lambda: next(ticks))
    store.set_nodes([n.node for n in run.nodes])
    for n in run.nodes:
        for hello in n.hellos():
            store.record_hello(n.node, hello)
        for boot, offset, t_ns in n.rounds():
            store.add_offset(n.node, boot, offset, t_ns=t_ns)
    nodes = {n.node: n for n in run.nodes}
    for node, lines in interleaved(
        {k: v.lines for k, v in nodes.items()}, {k: len(v) for k, v in nodes.items()}, 1000
    ):
        frames = decoded(lines)
        store.ingest(node, frames[0].boot_id, frames)
    name = f"synthetic {hours:g} h, {NODES} nodes, {windows} windows"
    store.create_run(RunRow(RUN_ID, name, run.t_start_ns, None, 1 / run.hz, 0.5, "request"))
    store.add_windows(RUN_ID, run.windows)
    store.end_run(RUN_ID, run.t_end_ns)
    samples = store.count_samples()
    store.close()
    db = sqlite3.connect(part, isolation_level=None)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    os.replace(part, path)
    print(f"built {path} ({path.stat().st_size / 2**20:.1f} MiB, {samples:,} samples)", flush=True)


def in_child(kind: str, path: pathlib.Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        raise SystemExit(f"export_store: the {kind} child failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def measure(path: pathlib.Path, rounds: int) -> dict[str, dict[str, Any]]:
    """Medians per kind over ``rounds`` (the kinds interleaved); the last round's check values."""
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for _ in range(rounds):
        for kind, results in runs.items():
            results.append(in_child(kind, path))
    out = {}
    for kind, results in runs.items():
        out[kind] = {
            key: statistics.median(r[key] for r in results)
            for key in ("wall_s", "cpu_s", "rss_base_mib", "rss_peak_mib")
        }
        out[kind]["check"] = results[-1]["check"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="1,8", help="run lengths in hours")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path = args.child
        children = {
            "export": child_export,
            "export -o": lambda p: child_export(p, written=True),
            "floor": child_floor,
            "windows": child_windows,
            "answer": child_answer,
        }
        print(json.dumps(children[kind](pathlib.Path(path))))
        return
    cache = bench_cache("sparkwatch-bench-export")
    results = {}
    for hours in (float(h) for h in args.sizes.split(",")):
        path = cache / f"run-{hours:g}h-{NODES}n-s{args.seed}.db"
        if args.rebuild or not path.exists():
            build_store(path, hours, args.seed)
        results[hours] = (path, measure(path, args.rounds))
    print(f"export_run from SQLite vs the floor; {NODES} nodes, 10 Hz; medians of {args.rounds} rounds")
    print(
        f"{'run':<22} {'':<9} {'wall s':>7} {'cpu s':>6} {'RSS base':>9} {'RSS peak':>9} {'wall/floor':>11}"
    )
    for hours, (path, m) in results.items():
        label = f"{hours:g} h, {round(WINDOWS_PER_HOUR * hours):,} windows"
        for kind in KINDS:
            r = m[kind]
            ratio = f"{r['wall_s'] / m['floor']['wall_s']:>10.2f}x"
            print(
                f"{label:<22} {kind:<9} {r['wall_s']:>7.2f} {r['cpu_s']:>6.2f} {r['rss_base_mib']:>6.0f} MiB"
                f" {r['rss_peak_mib']:>5.0f} MiB {ratio}"
            )
            label = f"({path.stat().st_size / 2**20:.0f} MiB file)" if kind == "floor" else ""
        gated, floor = _rounded(m["export"]["check"]), _rounded(m["floor"]["check"])
        print(f"{'':<22} check: export gated mean W {gated}; floor mean of window means W {floor}")
        count, size = m["windows"]["check"]
        print(
            f"{'':<22} windows: {count:,} windows, {size / 2**20:.1f} MiB of JSON (GET /v1/runs/ID/windows)"
        )
        print(f"{'':<22} answer: {m['answer']['check']:,} bytes of JSON (GET /v1/runs/ID/export)")


def _rounded(values: list[float | None]) -> list[float | None]:
    return [None if v is None else round(v, 1) for v in values]


if __name__ == "__main__":
    main()
