"""A windows body's validation (``bodies.window_batch``: walked a window at a time, every object checked for
a key given twice, validated in slices) beside one ``json.loads`` of the same body, in the same run.

    python benchmarks/window_body.py [--windows 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from sparkwatch.coordinator.api.bodies import window_batch

S = 1_000_000_000
T0_NS = 1_800_000_000 * S


def body(count: int) -> bytes:
    """``count`` windows as a harness importer posts them: times, tokens, a finish reason, a source."""
    windows = [
        {
            "id": f"req-{i}",
            "phase": "timed",
            "t_start_ns": T0_NS + i * S,
            "t_end_ns": T0_NS + i * S + S // 2,
            "t_first_token_ns": T0_NS + i * S + S // 20,
            "prompt_tokens": 500,
            "completion_tokens": 100,
            "finish_reason": "stop",
            "source": {"harness": "bench", "line": i},
        }
        for i in range(count)
    ]
    return json.dumps({"windows": windows}).encode()


def timed(work: object, raw: bytes, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        work(raw)  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raw = body(args.windows)
    assert len(window_batch(raw).windows) == args.windows
    loads = timed(json.loads, raw, args.rounds)
    batch = timed(window_batch, raw, args.rounds)
    print(f"{args.windows:,} windows, {len(raw) / 2**20:.1f} MiB; medians of {args.rounds}")
    print(f"json.loads (baseline) {loads:6.3f} s")
    print(f"window_batch          {batch:6.3f} s  {batch / loads:.2f}x")


if __name__ == "__main__":
    main()
