"""Join + gate of 10 M samples × 100 k windows, against a bare numpy searchsorted/cumsum baseline.

The baseline computes the same per-window figures (energy, covered time, gated energy, gated time) in the
shortest plain numpy we could write. The core does that through its API and also the scope union, the
node's scope figures (mean, max, coverage, longest gap, sample count) and per-window Python results.

    python benchmarks/join_gate.py [--samples 10000000] [--windows 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import median
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.power import scope_stats, window_stats
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
    """The shortest plain numpy we could write for the same per-window figures: interval power (counter,
    else trapezoid), validity (same boot, no long gap), the gate, four cumulative sums, searchsorted."""
    t, seg, gap = track.t_ns, track.segment, track.max_gap_ns
    dt_ns = np.diff(t)
    dt = dt_ns / 1e9
    de = np.diff(track.energy_j)
    with np.errstate(invalid="ignore", divide="ignore"):
        pw = np.where(de >= 0, de / dt, (track.power_w[1:] + track.power_w[:-1]) / 2)
    valid = (seg[1:] == seg[:-1]) & (dt_ns > 0) & (dt_ns <= np.maximum(gap[1:], gap[:-1])) & np.isfinite(pw)
    gated = valid & (track.util_ratio[1:] >= 0.5)
    e_int = np.where(valid, pw * dt, 0.0)
    rates = [np.where(valid, pw, 0.0), valid * 1.0, np.where(gated, pw, 0.0), gated * 1.0]
    cums = [
        np.concatenate(([0.0], np.cumsum(x)))
        for x in (e_int, valid * dt, np.where(gated, e_int, 0.0), gated * dt)
    ]

    def at(x: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 2)
        inside = np.clip((x - t[i]) / 1e9, 0, dt[i])
        return np.stack([c[i] + r[i] * inside for c, r in zip(cums, rates, strict=True)])

    out: np.ndarray = at(ends) - at(starts)
    return out


def core(track: GpuTrack, starts: np.ndarray, ends: np.ndarray) -> list[float | None]:
    integrals = Integrals.build(track, 0.5)
    per_window = window_stats(integrals, starts, ends)
    scope_stats(integrals, union(zip(starts.tolist(), ends.tolist(), strict=True)))
    return per_window.energy_j


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    track, starts, ends = data(args.samples, args.windows)
    times: dict[str, list[float]] = {"baseline": [], "core": []}
    results: dict[str, object] = {}
    for _ in range(args.repeat):
        for name, fn in (("baseline", baseline), ("core", core)):
            t0 = time.perf_counter()
            results[name] = fn(track, starts, ends)
            times[name].append(time.perf_counter() - t0)
    base_energy = np.asarray(results["baseline"])[0]
    core_energy = np.array([np.nan if v is None else v for v in results["core"]])  # type: ignore[union-attr]
    assert np.allclose(core_energy, base_energy, rtol=1e-9, atol=1e-6), "core and baseline disagree"
    b, c = median(times["baseline"]), median(times["core"])
    print(f"{args.samples:,} samples x {args.windows:,} windows, median of {args.repeat}")
    print(f"baseline plain numpy searchsorted/cumsum, same figures   : {b:6.3f} s")
    print(f"core: Integrals.build + window_stats + scope_stats         : {c:6.3f} s   ratio {c / b:.2f}x")


if __name__ == "__main__":
    main()
