"""Per-GPU and per-node time series on the coordinator's clock, as numpy arrays.

Inside the core an unknown reading is NaN in a float array (it never leaves the core as a number: every
output goes through ``known`` and becomes ``None``). Samples may arrive in any order; tracks sort them.
Consecutive samples of different agent boots (``segment``) never form an interval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: A gap longer than this many sampling intervals is a gap: nothing is interpolated across it.
GAP_INTERVALS = 3


def _floats(values: list[float | None] | list[int | None]) -> F64:
    """Values as a float array, unknown (None) as NaN."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def in_time_order(t_ns: I64, segment: I64, interval_s: F64) -> tuple[I64 | slice, I64, I64, I64]:
    """The one sort of a track (by time, then boot, stably): the order (a whole slice when already in it:
    no copy), and time, segment and the per-sample gap limit (``GAP_INTERVALS`` × the nominal interval) in
    that order."""
    order = slice(None) if _in_order(t_ns, segment) else np.lexsort((segment, t_ns))
    if len(interval_s) and float(np.min(interval_s)) == float(np.max(interval_s)):  # one interval: one limit
        limit = np.round(GAP_INTERVALS * interval_s[:1] * 1e9).astype(np.int64)
        return order, t_ns[order], segment[order], repeated(limit[0], len(interval_s))
    max_gap = np.round(GAP_INTERVALS * interval_s[order] * 1e9).astype(np.int64)
    return order, t_ns[order], segment[order], max_gap


def repeated(value: np.int64, count: int) -> I64:
    """``value`` ``count`` times as a read-only view of one value (stride 0): a column that holds one value
    (a boot's segment number, the gap limit of a steady interval) costs 8 bytes, not 8 per sample."""
    out: I64 = np.broadcast_to(np.asarray(value, dtype=np.int64), (count,))
    return out


def _in_order(t_ns: I64, segment: I64) -> bool:
    """Already sorted by time, then boot (what a store's read of one boot gives): the sort is skipped."""
    dt = np.diff(t_ns)
    return bool(np.all(dt >= 0)) and bool(np.all(np.diff(segment)[dt == 0] >= 0))


def _times(points: list[GpuPoint] | list[MemPoint]) -> tuple[I64, I64, F64]:
    """Time, segment and nominal interval columns of points in any order (from_arrays sorts them)."""
    return (
        np.array([p.t_ns for p in points], dtype=np.int64),
        np.array([p.segment for p in points], dtype=np.int64),
        np.array([p.interval_s for p in points], dtype=np.float64),
    )


def known(value: float) -> float | None:
    """NaN (the core's unknown) back to ``None``; everything else to a plain float. (``math.isfinite``:
    an export calls this for every figure of every window, and numpy's ufunc on a scalar costs 20× more.)"""
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class GpuPoint:
    t_ns: int  # coordinator clock
    segment: int  # agent boot (increments on each new boot_id)
    interval_s: float  # the agent's nominal interval when it took the sample
    power_w: float | None
    energy_j: float | None
    util_ratio: float | None


@dataclass(frozen=True, slots=True)
class MemPoint:
    t_ns: int
    segment: int
    interval_s: float
    used_bytes: int | None
    page_cache_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GpuTrack:
    t_ns: I64
    segment: I64
    max_gap_ns: I64  # per sample: GAP_INTERVALS × its nominal interval
    power_w: F64
    energy_j: F64
    util_ratio: F64

    def __len__(self) -> int:
        return len(self.t_ns)

    @staticmethod
    def from_points(points: Iterable[GpuPoint]) -> GpuTrack:
        pts = list(points)
        return GpuTrack.from_arrays(
            *_times(pts),
            power_w=_floats([p.power_w for p in pts]),
            energy_j=_floats([p.energy_j for p in pts]),
            util_ratio=_floats([p.util_ratio for p in pts]),
        )

    @staticmethod
    def from_arrays(
        t_ns: I64, segment: I64, interval_s: F64, *, power_w: F64, energy_j: F64, util_ratio: F64
    ) -> GpuTrack:
        """Arrays already aligned (NaN = unknown); sorted here by time, stably."""
        order, t, seg, max_gap = in_time_order(t_ns, segment, interval_s)
        return GpuTrack(
            t_ns=t,
            segment=seg,
            max_gap_ns=max_gap,
            power_w=power_w[order],
            energy_j=energy_j[order],
            util_ratio=util_ratio[order],
        )


@dataclass(frozen=True, slots=True)
class MemTrack:
    t_ns: I64
    segment: I64
    max_gap_ns: I64
    used_bytes: F64
    page_cache_bytes: F64  # Cached + SReclaimable: reclaimable, not in use, but CUDA waits for it back

    @staticmethod
    def from_points(points: Iterable[MemPoint]) -> MemTrack:
        pts = list(points)
        return MemTrack.from_arrays(
            *_times(pts),
            _floats([p.used_bytes for p in pts]),
            _floats([p.page_cache_bytes for p in pts]),
        )

    @staticmethod
    def from_arrays(
        t_ns: I64, segment: I64, interval_s: F64, used_bytes: F64, page_cache_bytes: F64 | None = None
    ) -> MemTrack:
        """Arrays already aligned (NaN = unknown; no ``page_cache_bytes``: unknown throughout); sorted here
        by time, stably."""
        order, t, seg, max_gap = in_time_order(t_ns, segment, interval_s)
        cache = _unknown(len(t)) if page_cache_bytes is None else page_cache_bytes[order]
        return MemTrack(
            t_ns=t, segment=seg, max_gap_ns=max_gap, used_bytes=used_bytes[order], page_cache_bytes=cache
        )

    def used_only(self) -> MemTrack:
        """The track with its page cache let go (unknown): what the export keeps of each node past its
        figures, for the peak of the summed memory (an 8 h node's page cache is 2.3 MB)."""
        return dataclasses.replace(self, page_cache_bytes=_unknown(len(self.t_ns)))


def _unknown(n: int) -> F64:
    """``n`` unknowns that take no memory (one NaN seen ``n`` times; read-only, as tracks are)."""
    out: F64 = np.broadcast_to(np.float64(np.nan), (n,))
    return out
