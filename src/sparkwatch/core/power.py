"""Joins a GPU's integrals to a scope and to each request window: energy, gated mean power, coverage."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparkwatch.core.integrals import EnergyMethod, Integrals
from sparkwatch.core.tracks import I64, known
from sparkwatch.core.windows import Scope


@dataclass(frozen=True, slots=True)
class PowerStats:
    """One GPU over one scope. Times are seconds inside the scope; ``None`` = cannot be known."""

    energy_j: float | None
    mean_w: float | None
    gated_mean_w: float | None
    max_w: float | None
    covered_s: float
    gated_s: float
    excluded_s: float
    coverage_ratio: float | None
    max_gap_s: float | None
    samples: int
    method: EnergyMethod
    implausible: int = 0  # intervals inside the scope rejected for power no GPU draws


def max_uncovered_s(integrals: Integrals, scope: Scope) -> float | None:
    """Longest stretch of scope time with no valid interval (scope edges and boot changes included)."""
    if scope.empty:
        return None
    valid = integrals.valid
    t = integrals.t_ns
    # covered runs: maximal chains of consecutive valid intervals
    if len(valid):
        edges = np.diff(np.concatenate(([0], valid.astype(np.int8), [0])))
        run_starts = t[np.flatnonzero(edges == 1)]
        run_ends = t[np.flatnonzero(edges == -1)]
    else:
        run_starts = run_ends = np.empty(0, np.int64)
    longest = 0
    j = 0
    for a, b in zip(scope.starts.tolist(), scope.ends.tolist(), strict=True):
        cursor = a
        while j < len(run_starts) and run_ends[j] <= a:
            j += 1
        k = j
        while k < len(run_starts) and run_starts[k] < b:
            longest = max(longest, int(run_starts[k]) - cursor)
            cursor = max(cursor, int(run_ends[k]))
            k += 1
        longest = max(longest, b - cursor)
    return max(0, longest) / 1e9


def scope_stats(integrals: Integrals, scope: Scope) -> PowerStats:
    if scope.empty:
        return PowerStats(None, None, None, None, 0.0, 0.0, 0.0, None, None, 0, "none")
    energy, covered, gated_energy, gated = integrals.between(scope.starts, scope.ends).sum(axis=1)
    overlap = integrals.overlapping(scope.starts, scope.ends)
    mask = overlap & integrals.valid
    max_w = float(np.max(integrals.power_w[mask])) if mask.any() else None
    samples = int(
        np.sum(np.searchsorted(integrals.t_ns, scope.ends) - np.searchsorted(integrals.t_ns, scope.starts))
    )
    return PowerStats(
        energy_j=float(energy) if covered > 0 else None,
        mean_w=energy / covered if covered > 0 else None,
        gated_mean_w=gated_energy / gated if gated > 0 else None,
        max_w=max_w,
        covered_s=float(covered),
        gated_s=float(gated),
        excluded_s=float(covered - gated),
        coverage_ratio=float(covered / scope.seconds) if scope.seconds > 0 else None,
        max_gap_s=max_uncovered_s(integrals, scope),
        samples=samples,
        method=integrals.method(mask),
        implausible=int(np.sum(overlap & integrals.implausible)),
    )


@dataclass(frozen=True, slots=True)
class WindowPower:
    """Per window, vectorised over all windows of a run: arrays aligned with the windows."""

    energy_j: list[float | None]
    gated_mean_w: list[float | None]
    coverage_ratio: list[float | None]
    implausible: list[int]  # intervals overlapping the window rejected for power no GPU draws


def window_stats(integrals: Integrals, starts: I64, ends: I64) -> WindowPower:
    energy, covered, gated_energy, gated = integrals.between(starts, ends)
    length_s = (ends - starts) / 1e9
    with np.errstate(invalid="ignore", divide="ignore"):
        gated_mean = np.where(gated > 0, gated_energy / gated, np.nan)
        coverage = np.where(length_s > 0, covered / length_s, np.nan)
        energy = np.where(covered > 0, energy, np.nan)
    return WindowPower(
        energy_j=[known(v) for v in energy.tolist()],
        gated_mean_w=[known(v) for v in gated_mean.tolist()],
        coverage_ratio=[known(v) for v in coverage.tolist()],
        implausible=_implausible_per_window(integrals, starts, ends),
    )


def _implausible_per_window(integrals: Integrals, starts: I64, ends: I64) -> list[int]:
    """How many rejected intervals overlap each [start, end): a difference of cumulative counts."""
    cum = np.concatenate(([0], np.cumsum(integrals.implausible, dtype=np.int64)))
    n = len(integrals.implausible)
    first = np.clip(np.searchsorted(integrals.t_ns, starts, side="right") - 1, 0, n)
    last = np.clip(np.searchsorted(integrals.t_ns, ends, side="left"), 0, n)
    return [int(c) for c in np.maximum(cum[last] - cum[first], 0)]
