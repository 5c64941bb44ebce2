"""Signals that make a window suspect: the GPU held below its clocks by heat or a power brake, or running at
a fraction of its maximum clock (a degraded USB-PD state runs a GB10 at 500–850 MHz). The window keeps its
numbers; it gets a reason and cannot be ``ok``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import isnan
from typing import Any

import numpy as np
import numpy.typing as npt

from sparkwatch.core.rounding import rounded_list
from sparkwatch.core.tracks import F64, I64
from sparkwatch.core.window_rows import WindowRows
from sparkwatch_agent.shared.protocol import CLOCK_EVENT_REASONS

#: NVML's clock event reason bits, by name (the agent's /metrics uses the same names).
REASON_NAMES = CLOCK_EVENT_REASONS
#: The slowdowns that make a window suspect: heat and the power brake (HW slowdown is their umbrella).
SLOWDOWN_BITS = 0x8 | 0x20 | 0x40 | 0x80
#: A window that spent more than this share of its samples in a slowdown is flagged.
MAX_SLOWDOWN_RATIO = 0.10
#: A window whose mean SM clock is under this share of the maximum is flagged (over its samples not marked
#: idle: a resting GPU drops its clocks, which is not a slowdown).
MIN_CLOCK_RATIO = 0.6
#: NVML's ``gpu_idle`` clock event reason: nothing runs and the clocks drop to idle, which is no slowdown.
GPU_IDLE_BIT = 0x1


@dataclass(frozen=True, slots=True)
class SignalTrack:
    """One GPU's clock signals on the export's clock (the coordinator's, or a TSDB's timestamps), sorted by
    time; -1 / NaN where unknown."""

    t_ns: I64
    sm_clock_hz: F64
    temperature_c: F64
    reasons: I64
    max_sm_clock_hz: float | None  # the GPU's hello's, or a TSDB's maximum-clock series; None: no ratio
    uuid: str | None = None  # the GPU's, where the caller knows it (the series names it)


def not_idle(reasons: I64) -> npt.NDArray[np.bool_]:
    """The samples whose clock event reasons do not say the GPU was idle (unknown ones included): those a
    low SM clock counts against, in the window flags and the series' throttle episodes alike."""
    awake: npt.NDArray[np.bool_] = (reasons < 0) | (reasons & GPU_IDLE_BIT == 0)
    return awake


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if mask & bit] + (
        [f"0x{mask & ~sum(REASON_NAMES):x}"] if mask & ~sum(REASON_NAMES) else []
    )


def window_signals(tracks: Sequence[SignalTrack], starts: I64, ends: I64) -> WindowRows[dict[str, Any]]:
    """Per window [a, b), a node's signals: SM clock mean and its ratio to the maximum, the hottest reading,
    the union of clock event reasons seen, and the flags (``throttled:<reason>``) that make it suspect. The
    low-clock flag reads the samples whose reasons do not say the GPU was idle (where none are known, all):
    an idle window's clocks are low by design.

    Vectorised over windows (prefix sums and counts per track, ``maximum.reduceat`` for the hottest
    reading): an 8 h run's 10 000 windows on 4 nodes took 6 s as a loop over windows."""
    n = len(starts)
    sums = _Sums(n)
    for track in tracks:
        sums.add(track, np.asarray(starts, np.int64), np.asarray(ends, np.int64))
    return sums.windows()


class _Sums:
    """Per window, the totals over the node's GPUs that the figures are made of."""

    def __init__(self, n: int) -> None:
        self.clock_sum, self.clock_count = np.zeros(n), np.zeros(n, np.int64)
        self.ratio_sum, self.ratio_count = np.zeros(n), np.zeros(n, np.int64)
        self.working_sum, self.working_count = np.zeros(n), np.zeros(n, np.int64)  # not marked idle
        self.hottest = np.full(n, -np.inf)
        self.masks = np.zeros(n, np.int64)  # samples with known reasons
        self.bits: dict[int, npt.NDArray[np.int64]] = {}  # per reason bit seen: samples with it set

    def add(self, track: SignalTrack, starts: I64, ends: I64) -> None:
        lo = np.searchsorted(track.t_ns, starts, side="left")
        hi = np.searchsorted(track.t_ns, ends, side="left")
        finite = np.isfinite(track.sm_clock_hz)
        clock_sum = _ranged(np.where(finite, track.sm_clock_hz, 0.0), lo, hi)
        clock_count = _ranged(finite.astype(np.int64), lo, hi)
        self.clock_sum += clock_sum
        self.clock_count += clock_count
        if track.max_sm_clock_hz:
            self.ratio_sum += clock_sum / track.max_sm_clock_hz
            self.ratio_count += clock_count
            awake = not_idle(track.reasons)
            if not awake.all():
                working = finite & awake
                self.working_sum += (
                    _ranged(np.where(working, track.sm_clock_hz, 0.0), lo, hi) / track.max_sm_clock_hz
                )
                self.working_count += _ranged(working.astype(np.int64), lo, hi)
            else:
                self.working_sum += clock_sum / track.max_sm_clock_hz
                self.working_count += clock_count
        temps = np.append(np.where(np.isfinite(track.temperature_c), track.temperature_c, -np.inf), -np.inf)
        if len(lo):
            pairs = np.minimum(np.column_stack((lo, hi)).ravel(), len(temps) - 1)
            hottest = np.maximum.reduceat(temps, pairs)[::2]
            self.hottest = np.maximum(self.hottest, np.where(hi > lo, hottest, -np.inf))
        known = track.reasons >= 0
        self.masks += _ranged(known.astype(np.int64), lo, hi)
        seen = int(np.bitwise_or.reduce(track.reasons[known])) if known.any() else 0
        for bit in (1 << k for k in range(63) if seen >> k & 1):
            count = _ranged((known & (track.reasons & bit != 0)).astype(np.int64), lo, hi)
            self.bits[bit] = self.bits.get(bit, 0) + count

    def windows(self) -> WindowRows[dict[str, Any]]:
        """Every window's figures, from whole columns, made a slice of windows at a time when read."""
        masks = self.masks
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.ratio_count > 0, self.ratio_sum / self.ratio_count, np.nan)
            working = np.where(self.working_count > 0, self.working_sum / self.working_count, np.nan)
            clock = np.where(self.clock_count > 0, np.round(self.clock_sum / self.clock_count), np.nan)
            shares = {bit: self.bits[bit] / masks for bit in REASON_NAMES if bit in self.bits}
        unions = np.zeros(len(masks), np.int64)
        for bit, count in self.bits.items():
            unions |= np.where(count > 0, bit, 0)
        flags: dict[int, list[str]] = {}  # the few windows flagged
        for bit, share in shares.items():
            if bit & SLOWDOWN_BITS:
                for k in np.flatnonzero((masks > 0) & (share > MAX_SLOWDOWN_RATIO)).tolist():
                    flags.setdefault(k, []).append(
                        f"throttled:{REASON_NAMES[bit]} ({share[k]:.0%} of the window's samples)"
                    )
        for k in np.flatnonzero(working < MIN_CLOCK_RATIO).tolist():
            awake = " while not idle" if self.working_count[k] < self.ratio_count[k] else ""
            flags.setdefault(k, []).append(
                f"throttled:sm_clock (mean {working[k]:.2f} of the maximum{awake}, under {MIN_CLOCK_RATIO:g})"
            )
        hottest = np.where(np.isfinite(self.hottest), self.hottest, np.nan)
        names = {u: reason_names(u) for u in set(unions.tolist())}  # a few distinct unions in 10 000 windows

        def make(lo: int, hi: int) -> list[dict[str, Any]]:
            return [
                {
                    "sm_clock_hz_mean": None if isnan(c) else int(c),
                    "sm_clock_ratio": r,
                    "temperature_c_max": None if isnan(h) else h,
                    "clock_event_reasons": list(names[u]) if m else None,
                    "throttle": list(flags.get(k, ())),
                }
                for k, c, r, h, u, m in zip(
                    range(lo, hi),
                    clock[lo:hi].tolist(),
                    rounded_list(ratio[lo:hi]),  # round(r, 3) each, None where unknown
                    hottest[lo:hi].tolist(),
                    unions[lo:hi].tolist(),
                    masks[lo:hi].tolist(),
                    strict=True,
                )
            ]

        return WindowRows(len(masks), make)


def _ranged(values: npt.NDArray[Any], lo: I64, hi: I64) -> npt.NDArray[Any]:
    """The sum of ``values[lo:hi]`` for each pair, from one prefix sum."""
    prefix = np.concatenate(([0], np.cumsum(values)))
    return prefix[hi] - prefix[lo]
