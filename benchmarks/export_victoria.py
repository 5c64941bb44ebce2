"""A run's export from VictoriaMetrics beside the same run's export from the coordinator's SQLite, each as a
user runs it: a fresh `sparkwatch export` process (`--prometheus URL --windows FILE --start --end`, which
reads VictoriaMetrics' ``/api/v1/export``, against `--db FILE RUN`), wall seconds and peak RSS from GNU time
(``%e``, ``%M``: start-up and imports included, for both). Medians over --rounds, the two interleaved.

The store is export_store.py's (the 8 h × 4 node × 10 Hz synthetic run with 10 000 windows, built there and
cached). VictoriaMetrics (Debian's ``victoria-metrics``, loopback, its own temp directory) is given exactly
the samples the SQLite export measures the GPU rail and memory from: each node's GPU tracks and memory track
as ``sources.store.node_input`` reads them (on the coordinator's clock), under the agent's /metrics names
and labels (what ``--remote-write`` sends), as Prometheus exposition with millisecond stamps on
``/api/v1/import/prometheus``, then ``/internal/force_flush``. The synthetic run is dated 2027 and
VictoriaMetrics refuses samples from the future, so samples, windows (a ``plain`` CSV) and the run's span
are all moved back by one whole number of hours. Only GPU and memory series are imported (no power
channels, no clock signals: the TSDB export asks for them and finds none), so it does less than the SQLite
one; the gated means of both are printed as the check.

    python benchmarks/export_victoria.py [--rounds 3] [--hours 8]
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from _common import bench_cache
from _victoria import BenchError, Victoria
from export_store import NODES, RUN_ID, build_store
from sparkwatch.sources import LEAD_NS
from sparkwatch.sources.store import node_input
from sparkwatch.store import Store

HOUR_NS = 3600 * 1_000_000_000
GNU_TIME = "/usr/bin/time"
LINES_PER_PUSH = 200_000


def shift_ns(t_end_ns: int) -> int:
    """Whole hours that put the run's end an hour before now."""
    behind = t_end_ns - (time.time_ns() - HOUR_NS)
    return -(-behind // HOUR_NS) * HOUR_NS


def series_lines(store: Store, node: str, span: tuple[int, int], shift: int) -> list[str]:
    """The node's GPU and memory samples the SQLite export reads, as exposition lines (unknown = no point)."""
    got = node_input(store, node, *span)
    lines: list[str] = []
    for gpu_index, (uuid, track) in enumerate(zip(got.gpu_uuids, got.gpus, strict=True)):
        labels = f'node="{node}",gpu="{gpu_index}",uuid="{uuid}"'
        ms = ((track.t_ns - shift) // 1_000_000).tolist()
        for name, values in (
            ("sparkwatch_gpu_power_watts", track.power_w),
            ("sparkwatch_gpu_energy_joules_total", track.energy_j),
            ("sparkwatch_gpu_utilization_ratio", track.util_ratio),
        ):
            known = np.isfinite(values).tolist()
            lines += [
                f"{name}{{{labels}}} {v!r} {t}"
                for v, t, ok in zip(values.tolist(), ms, known, strict=True)
                if ok
            ]
    memory = got.memory
    ms = ((memory.t_ns - shift) // 1_000_000).tolist()
    known = np.isfinite(memory.used_bytes).tolist()
    lines += [
        f'sparkwatch_memory_used_bytes{{node="{node}"}} {int(v)} {t}'
        for v, t, ok in zip(memory.used_bytes.tolist(), ms, known, strict=True)
        if ok
    ]
    return lines


def windows_csv(store: Store, path: pathlib.Path, shift: int) -> None:
    keys = ("t_start_ns", "t_end_ns", "t_first_token_ns", "t_last_token_ns")
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "phase", *keys, "completion_tokens", "http_status"])
        for w in store.windows(RUN_ID):
            stamps = [getattr(w, k) for k in keys]
            tokens, status = w.completion_tokens, w.http_status
            out.writerow(
                [
                    w.id,
                    w.phase,
                    *("" if t is None else t - shift for t in stamps),
                    "" if tokens is None else tokens,
                    "" if status is None else status,
                ]
            )


def timed(argv: list[str], out: pathlib.Path) -> dict[str, object]:
    done = subprocess.run([GNU_TIME, "-f", "%e %M", *argv], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[:4])}… failed: {done.stderr[-800:]}")
    wall, kib = done.stderr.strip().splitlines()[-1].split()
    export = json.loads(out.read_text())
    gated = [n["power_w"]["gated_mean"] for n in export["nodes"]]
    return {
        "wall_s": float(wall),
        "rss_mib": int(kib) / 1024,
        "check": gated,
        "windows": len(export["windows"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hours", type=float, default=8.0)
    args = parser.parse_args()
    cache = bench_cache("sparkwatch-bench-export")
    db = cache / f"run-{args.hours:g}h-{NODES}n-s0.db"
    if not db.exists():
        build_store(db, args.hours, 0)
    store = Store.read_only(db)
    run = store.run(RUN_ID)
    assert run.t_end_ns is not None
    shift = shift_ns(run.t_end_ns)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        windows = tmp / "windows.csv"
        windows_csv(store, windows, shift)
        with Victoria(tmp / "victoria") as vm:
            t0 = time.perf_counter()
            for node in store.node_names():
                lines = series_lines(store, node, (run.t_start_ns - LEAD_NS, run.t_end_ns), shift)
                for at in range(0, len(lines), LINES_PER_PUSH):
                    vm.push(lines[at : at + LINES_PER_PUSH])
            vm._get("/internal/force_flush")
            print(f"VictoriaMetrics: {vm.sent:,} points imported in {time.perf_counter() - t0:.1f} s")
            span = [f"{(run.t_start_ns - shift) / 1e9:.9f}", f"{(run.t_end_ns - shift) / 1e9:.9f}"]
            cli = [sys.executable, "-m", "sparkwatch", "export"]
            results: dict[str, list[dict[str, object]]] = {"sqlite": [], "victoria": []}
            for k in range(args.rounds):
                for kind in ("sqlite", "victoria") if k % 2 == 0 else ("victoria", "sqlite"):
                    out = tmp / f"{kind}-{k}.json"
                    tsdb = ["--prometheus", vm.url, "--windows", str(windows), "--start", span[0]]
                    where = ["--db", str(db), RUN_ID] if kind == "sqlite" else [*tsdb, "--end", span[1]]
                    results[kind].append(timed([*cli, *where, "-o", str(out)], out))
    store.close()
    report(results, args)


def report(results: dict[str, list[dict[str, object]]], args: argparse.Namespace) -> None:
    print(f"`sparkwatch export`, {args.hours:g} h run, {NODES} nodes, 10 Hz; medians of {args.rounds} rounds")
    print(f"{'source':10s} {'wall s':>7s} {'RSS peak':>9s}  windows  gated mean W per node")
    base = statistics.median(float(r["wall_s"]) for r in results["sqlite"])  # type: ignore[arg-type]
    for kind, rows in results.items():
        wall = statistics.median(float(r["wall_s"]) for r in rows)  # type: ignore[arg-type]
        rss = statistics.median(float(r["rss_mib"]) for r in rows)  # type: ignore[arg-type]
        print(
            f"{kind:10s} {wall:7.2f} {rss:6.0f} MiB  {rows[0]['windows']:>7}  {rows[0]['check']}"
            f"  ({wall / base:.2f}x the SQLite export)"
        )


if __name__ == "__main__":
    main()
