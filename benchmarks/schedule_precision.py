"""Schedule precision of the sampler at 10 Hz: lateness of each tick against its absolute deadline, and drift.

The agent's sampler (sim backend, full tick) runs in this process. In the same run, a child process runs
the floor — a bare absolute-deadline loop doing nothing (what the OS and Python timers give) — and a naive
``work(); sleep(interval)`` loop, whose drift shows what absolute deadlines avoid.

    python benchmarks/schedule_precision.py [--seconds 600] [--interval 0.1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _common import percentile

CHILD = """
import json, sys, threading, time
interval, seconds = float(sys.argv[1]), float(sys.argv[2])
late, ticks, naive = [], [], []
def floor():
    deadline = time.monotonic_ns()
    end = deadline + int(seconds * 1e9)
    while deadline < end:
        now = time.monotonic_ns()
        if now < deadline:
            time.sleep((deadline - now) / 1e9)  # the cheapest wait (the sampler's is a lock)
            continue
        late.append(now - deadline)
        ticks.append(now)
        deadline += int(interval * 1e9)
def naive_loop():
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        naive.append(time.monotonic_ns())
        sum(range(2000))  # a little work, like a sample read
        time.sleep(interval)
threads = [threading.Thread(target=floor), threading.Thread(target=naive_loop)]
[t.start() for t in threads]; [t.join() for t in threads]
print(json.dumps({"late": late, "ticks": ticks, "naive": naive}))
"""


def drift_ms(ticks_ns: list[int], interval_s: float) -> float:
    return ((ticks_ns[-1] - ticks_ns[0]) - (len(ticks_ns) - 1) * interval_s * 1e9) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()

    from sparkwatch_agent.assemble import assemble
    from sparkwatch_agent.config import build_config

    ticks: list[int] = []
    node = assemble(
        build_config({"node": "bench", "backend": "sim", "interval": args.interval}, {}),
        on_sample=lambda s: ticks.append(s.t_mono_ns),
    )
    sampler = node.sampler
    sampler.record_lateness = True
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(args.interval), str(args.seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    sampler.start()
    time.sleep(args.seconds)
    sampler.stop()
    sampler.settle()  # the last second's captures reach on_sample too
    out, _ = child.communicate(timeout=60)
    floor = json.loads(out)

    late_ms = [x / 1e6 for x in sampler.lateness_ns]
    floor_ms = [x / 1e6 for x in floor["late"]]
    print(
        f"{args.seconds:.0f} s at {1 / args.interval:.0f} Hz; lateness = tick start - its absolute deadline"
    )
    print(
        f"agent sampler : n={len(late_ms)} p50 {percentile(late_ms, 50):.3f} ms"
        f"  p99 {percentile(late_ms, 99):.3f} ms"
        f"  max {max(late_ms):.3f} ms  skipped {sampler.snapshot.counters.late_ticks_total}"
        f"  drift {drift_ms(ticks, args.interval):+.3f} ms"
    )
    print(
        f"floor (bare)  : n={len(floor_ms)} p50 {percentile(floor_ms, 50):.3f} ms"
        f"  p99 {percentile(floor_ms, 99):.3f} ms"
        f"  max {max(floor_ms):.3f} ms  drift {drift_ms(floor['ticks'], args.interval):+.3f} ms"
    )
    print(f"naive sleep   : n={len(floor['naive'])} drift {drift_ms(floor['naive'], args.interval):+.3f} ms")


if __name__ == "__main__":
    main()
