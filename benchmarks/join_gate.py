"""Join + gate of 10 M samples × 100 k windows, against a bare numpy searchsorted/cumsum baseline.

The baseline computes, for the same windows, only trapezoid energy via a cumulative sum and searchsorted
at the window edges — the least work that answers "energy per window". The core additionally takes the
energy counter, validity (gaps, boots), the utilisation gate, coverage and the scope union.

    python benchmarks/join_gate.py [--samples 10000000] [--windows 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import median
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.join import scope_stats, window_stats
from sparkwatch.core.tracks import GpuTrack
from sparkwatch.core.windows import union

S = 1_000_000_000
T0 = 1_800_000_000 * S


def data(n: int, w: int, seed: int = 7) -> tuple[GpuTrack, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = T0 + np.arange(n, dtype=np.int64) * (S // 10)
    power = rng.uniform(5, 60, n)
    energy = np.concatenate(([0.0], np.cumsum((power[1:] + power[:-1]) / 2 * 0.1)))
    util = rng.uniform(0, 1, n)
    track = GpuTrack.from_arrays(
        t, np.zeros(n, np.int64), np.full(n, 0.1), power_w=power, energy_j=energy, util_ratio=util
    )
    starts = np.sort(rng.integers(T0, int(t[-1]) - 10 * S, w)).astype(np.int64)
    ends = starts + rng.integers(S, 10 * S, w)
    return track, starts, ends


def baseline(track: GpuTrack, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    t = track.t_ns
    p = track.power_w
    seg = (p[1:] + p[:-1]) / 2 * (np.diff(t) / 1e9)
    cum = np.concatenate(([0.0], np.cumsum(seg)))

    def at(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 2)
        return cum[i] + (p[i] + p[i + 1]) / 2 * ((x - t[i]) / 1e9)

    out: np.ndarray = at(ends) - at(starts)
    return out


def core(track: GpuTrack, starts: np.ndarray, ends: np.ndarray) -> None:
    integrals = Integrals.build(track, 0.5)
    window_stats(integrals, starts, ends)
    scope_stats(integrals, union(zip(starts.tolist(), ends.tolist(), strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    track, starts, ends = data(args.samples, args.windows)
    times: dict[str, list[float]] = {"baseline": [], "core": []}
    for _ in range(args.repeat):
        for name, fn in (("baseline", baseline), ("core", core)):
            t0 = time.perf_counter()
            fn(track, starts, ends)
            times[name].append(time.perf_counter() - t0)
    b, c = median(times["baseline"]), median(times["core"])
    print(f"{args.samples:,} samples x {args.windows:,} windows, median of {args.repeat}")
    print(f"baseline numpy searchsorted/cumsum (trapezoid energy only): {b:6.3f} s")
    print(f"core: Integrals.build + window_stats + scope_stats         : {c:6.3f} s   ratio {c / b:.2f}x")


if __name__ == "__main__":
    main()
