"""Weeks of idle ingest with retention on, in simulated time: the database file should stop growing once the
retention age has passed (issue 19: "file size flat after the first week").

Four idle GB10 nodes at 1 Hz (the agent's default outside a run), each second's samples stored as a live
link stores them in 10-minute batches (a replay-sized batch: the same blocks a merged live stream ends up
with), a clock-probe round every 10 s per node, and a retention pass (`Store.retention_steps`, what the
coordinator runs every 10 minutes) every simulated 6 hours. The store's clock is injected; samples are
decoded by the coordinator's own decoder. The baseline in the same run is the same ingest with retention
off (`--retain-idle forever`): the file the coordinator kept before this issue, in blocks.

    python benchmarks/retention_week.py [--days 10] [--retain-days 7] [--nodes 4]
"""

from __future__ import annotations

import argparse
import pathlib
import random
import tempfile
import time

import orjson

from sparkwatch.core.clock import ClockOffset
from sparkwatch.store import Store
from sparkwatch.wire import SampleFrame, decode_lines

S = 1_000_000_000
T0 = 1_800_000_000 * S
DAY_S = 86_400
BATCH_S = 600
PASS_S = 6 * 3600


def batch(node: int, first_s: int, rng: random.Random) -> list[SampleFrame]:
    """BATCH_S idle samples of one node from second ``first_s``, as agent lines through the wire."""
    lines = []
    for k in range(first_s, first_s + BATCH_S):
        power = round(4.5 + rng.random(), 3)
        frame = {
            "type": "sample",
            "seq": k + 1,
            "boot_id": f"boot-{node}",
            "t_wall_ns": T0 + k * S + rng.randrange(200_000),
            "t_mono_ns": k * S,
            "interval_s": 1.0,
            "gpus": [
                {
                    "index": 0,
                    "uuid": f"GPU-{node:08x}",
                    "power_w": power,
                    "energy_j": round(k * 5.0, 3),
                    "util_ratio": 0.0,
                    "sm_clock_hz": 208e6,
                    "temperature_c": float(38 + rng.randrange(3)),
                    "clock_event_reasons": 1,
                }
            ],
            "memory": {"used_bytes": 6_442_450_944 + rng.randrange(1 << 20)},
            "sensors": [
                {"sensor": "sys_total", "kind": "system", "source": "hwmon:spbm", "power_w": power + 20.0},
                {"sensor": "gpu", "kind": "gpu", "source": "hwmon:spbm", "power_w": power},
            ],
        }
        lines.append(orjson.dumps(frame).decode())
    frames, rejected = decode_lines("\n".join(lines))
    assert not rejected
    return [f for f in frames if isinstance(f, SampleFrame)]


def simulate(path: pathlib.Path, days: int, nodes: int, retain_s: float | None) -> list[tuple[int, int, int]]:
    """(day, file bytes, samples kept) at the end of each simulated day."""
    clock = [T0]
    store = Store(path, now_ns=lambda: clock[0])
    rng = random.Random(1)
    sizes = []
    for first_s in range(0, days * DAY_S, BATCH_S):
        clock[0] = T0 + (first_s + BATCH_S) * S
        for node in range(nodes):
            store.ingest(f"n{node}", f"boot-{node}", batch(node, first_s, rng))
            for k in range(first_s, first_s + BATCH_S, 10):
                offset = ClockOffset(0, 100_000, 5, 8, mono_offset_ns=T0)
                store.add_offset(f"n{node}", f"boot-{node}", offset, t_ns=T0 + k * S)
        if retain_s is not None and (first_s + BATCH_S) % PASS_S == 0:
            for _ in store.retention_steps(int(retain_s * S)):
                pass
        if (first_s + BATCH_S) % DAY_S == 0:
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the file as it would be at rest
            sizes.append(((first_s + BATCH_S) // DAY_S, path.stat().st_size, store.count_samples()))
    store.close()
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--retain-days", type=float, default=7.0)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        kept = simulate(pathlib.Path(tmp) / "kept.db", args.days, args.nodes, args.retain_days * DAY_S)
        forever = simulate(pathlib.Path(tmp) / "forever.db", args.days, args.nodes, None)
        took = time.perf_counter() - t0
    print(f"{args.nodes} idle nodes at 1 Hz, {args.days} simulated days, a pass every 6 h ({took:.0f} s)")
    print(
        f"{'day':>4} {'retain ' + format(args.retain_days, 'g') + ' d':>16} {'samples':>10} {'forever':>14}"
    )
    for (day, size, count), (_, size_forever, _) in zip(kept, forever, strict=True):
        print(f"{day:>4} {size / 1e6:>13.1f} MB {count:>10,} {size_forever / 1e6:>11.1f} MB")
    per_day = (forever[-1][1] - forever[0][1]) / max(1, len(forever) - 1)
    print(
        f"growth without retention: {per_day / 1e6:.1f} MB/day; with it, days {int(args.retain_days) + 1}"
        f"..{args.days}: {(kept[-1][1] - kept[int(args.retain_days)][1]) / 1e6:+.1f} MB"
    )


if __name__ == "__main__":
    main()
