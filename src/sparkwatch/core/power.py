"""Joins a GPU's integrals to a scope and to each request window: energy, gated mean power, coverage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from sparkwatch.core.integrals import EnergyMethod, Integrals
from sparkwatch.core.rounding import NOISE
from sparkwatch.core.tracks import F64, I64
from sparkwatch.core.windows import Scope

#: A figure covering less of its time than this is not the whole: a window is ``incomplete`` when a node's
#: GPUs cover less of it, and a run's energy total is not summed over a node that covers less of the scope.
INCOMPLETE_COVERAGE = 0.95


@overload
def falls_short(coverage: float) -> bool: ...


@overload
def falls_short(coverage: npt.ArrayLike) -> npt.NDArray[np.bool_]: ...


def falls_short(coverage: float | npt.ArrayLike) -> npt.NDArray[np.bool_] | bool:
    """Which coverages are below :data:`INCOMPLETE_COVERAGE` (NaN: nothing covered, so short), float noise
    under it not counted: judged as the export writes them (``rounding.floored``), so that a reader who
    compares a written 0.95 with the threshold judges as the export did. One figure (a ``float``, as each
    window's node entries hold: 40 000 in an 8 h run) is judged without numpy's per-call cost."""
    if isinstance(coverage, float | int):
        return not coverage + NOISE >= INCOMPLETE_COVERAGE  # the same test: NaN compares false
    with np.errstate(invalid="ignore"):
        return ~(np.asarray(coverage, dtype=np.float64) + NOISE >= INCOMPLETE_COVERAGE)


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
    """Longest stretch of scope time with no valid interval (scope edges and boot changes included):
    over every scope piece at once (an 8 h run's scope has ~10 000 pieces)."""
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
    a, b = scope.starts, scope.ends
    m = len(run_starts)
    if m == 0:
        return max(0, int(np.max(b - a))) / 1e9
    first = np.searchsorted(run_ends, a, side="right")  # the runs [first, stop) overlap piece [a, b)
    stop = np.searchsorted(run_starts, b, side="left")
    some = first < stop
    lead = np.where(some, run_starts[np.minimum(first, m - 1)] - a, b - a)  # before the first run
    tail = np.where(some, b - run_ends[np.clip(stop - 1, 0, m - 1)], 0)  # after the last
    longest = max(int(np.max(lead)), int(np.max(tail)))
    between = np.concatenate(([0], run_starts[1:] - run_ends[:-1], [0]))  # [k]: the gap before run k
    inner = some & (stop - first >= 2)  # pieces with gaps between their runs: max over [first+1, stop)
    if inner.any():
        bounds = np.empty(2 * int(inner.sum()), np.int64)
        bounds[0::2], bounds[1::2] = first[inner] + 1, stop[inner]
        longest = max(longest, int(np.max(np.maximum.reduceat(between, bounds)[0::2])))
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
        mean_w=float(energy / covered) if covered > 0 else None,  # plain floats: no numpy scalar leaves
        gated_mean_w=float(gated_energy / gated) if gated > 0 else None,
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


def summed_max_w(integrals: Sequence[Integrals], scope: Scope) -> float | None:
    """The most the GPUs drew together in the scope: their interval powers summed wherever one of them
    changes (power is constant inside an interval, so the sum's maximum is at one of those times), counted
    only where every GPU's is known. The sum of each GPU's own maximum overstates it when they peak at
    different times. (One GPU: its own maximum, which ``scope_stats`` has already.)"""
    if scope.empty or not integrals:
        return None
    points = np.unique(np.concatenate([scope.starts, *(i.t_ns for i in integrals)]))
    points = points[scope.contains(points)]
    total, known = np.zeros(len(points)), np.ones(len(points), dtype=bool)
    for each in integrals:
        if not len(each.dt_s):
            return None  # a GPU with no interval is never known
        at = np.searchsorted(each.t_ns, points, side="right") - 1
        inside = (at >= 0) & (at < len(each.dt_s))
        at = np.clip(at, 0, len(each.dt_s) - 1)
        inside &= each.valid[at]
        total += np.where(inside, each.power_w[at], 0.0)
        known &= inside
    return float(np.max(total[known])) if known.any() else None


@dataclass(frozen=True, slots=True)
class WindowPower:
    """Per window, vectorised over all windows of a run: arrays aligned with the windows (NaN: unknown)."""

    energy_j: F64
    gated_mean_w: F64
    coverage_ratio: F64
    implausible: I64  # intervals overlapping the window rejected for power no GPU draws


def window_stats(integrals: Integrals, starts: I64, ends: I64) -> WindowPower:
    energy, covered, gated_energy, gated = integrals.between(starts, ends)
    length_s = (ends - starts) / 1e9
    with np.errstate(invalid="ignore", divide="ignore"):
        gated_mean = np.where(gated > 0, gated_energy / gated, np.nan)
        coverage = np.where(length_s > 0, covered / length_s, np.nan)
        energy = np.where(covered > 0, energy, np.nan)
    return WindowPower(
        energy_j=energy,
        gated_mean_w=gated_mean,
        coverage_ratio=coverage,
        implausible=_implausible_per_window(integrals, starts, ends),
    )


def _implausible_per_window(integrals: Integrals, starts: I64, ends: I64) -> I64:
    """How many rejected intervals overlap each [start, end): a difference of cumulative counts."""
    if not integrals.implausible.any():  # nearly always: no count to take
        return np.zeros(len(starts), dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(integrals.implausible, dtype=np.int64)))
    n = len(integrals.implausible)
    first = np.clip(np.searchsorted(integrals.t_ns, starts, side="right") - 1, 0, n)
    last = np.clip(np.searchsorted(integrals.t_ns, ends, side="left"), 0, n)
    counts: I64 = np.maximum(cum[last] - cum[first], 0)
    return counts
