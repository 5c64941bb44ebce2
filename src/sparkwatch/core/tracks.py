"""Per-GPU and per-node time series on the coordinator's clock, as numpy arrays.

Inside the core an unknown reading is NaN in a float array (it never leaves the core as a number: every
output goes through ``known`` and becomes ``None``). Samples may arrive in any order; tracks sort them.
Consecutive samples of different agent boots (``segment``) never form an interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: A gap longer than this many sampling intervals is a gap: nothing is interpolated across it.
GAP_INTERVALS = 3


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def known(value: float) -> float | None:
    """NaN (the core's unknown) back to ``None``; everything else to a plain float."""
    return None if not np.isfinite(value) else float(value)


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
        pts = sorted(points, key=lambda p: (p.t_ns, p.segment))
        return GpuTrack(
            t_ns=np.array([p.t_ns for p in pts], dtype=np.int64),
            segment=np.array([p.segment for p in pts], dtype=np.int64),
            max_gap_ns=np.array([round(GAP_INTERVALS * p.interval_s * 1e9) for p in pts], dtype=np.int64),
            power_w=np.array([_nan(p.power_w) for p in pts], dtype=np.float64),
            energy_j=np.array([_nan(p.energy_j) for p in pts], dtype=np.float64),
            util_ratio=np.array([_nan(p.util_ratio) for p in pts], dtype=np.float64),
        )

    @staticmethod
    def from_arrays(
        t_ns: I64, segment: I64, interval_s: F64, *, power_w: F64, energy_j: F64, util_ratio: F64
    ) -> GpuTrack:
        """Arrays already aligned (NaN = unknown); sorted here by time, stably."""
        order = np.lexsort((segment, t_ns))
        return GpuTrack(
            t_ns=t_ns[order],
            segment=segment[order],
            max_gap_ns=np.round(GAP_INTERVALS * interval_s[order] * 1e9).astype(np.int64),
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

    @staticmethod
    def from_points(points: Iterable[MemPoint]) -> MemTrack:
        pts = sorted(points, key=lambda p: (p.t_ns, p.segment))
        return MemTrack(
            t_ns=np.array([p.t_ns for p in pts], dtype=np.int64),
            segment=np.array([p.segment for p in pts], dtype=np.int64),
            max_gap_ns=np.array([round(GAP_INTERVALS * p.interval_s * 1e9) for p in pts], dtype=np.int64),
            used_bytes=np.array([_nan(p.used_bytes) for p in pts], dtype=np.float64),
        )

    @staticmethod
    def from_arrays(t_ns: I64, segment: I64, interval_s: F64, used_bytes: F64) -> MemTrack:
        """Arrays already aligned (NaN = unknown); sorted here by time, stably."""
        order = np.lexsort((segment, t_ns))
        return MemTrack(
            t_ns=t_ns[order],
            segment=segment[order],
            max_gap_ns=np.round(GAP_INTERVALS * interval_s[order] * 1e9).astype(np.int64),
            used_bytes=used_bytes[order],
        )
