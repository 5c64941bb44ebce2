"""Signals that make a window suspect: the GPU held below its clocks by heat or a power brake, or running at
a fraction of its maximum clock (a degraded USB-PD state runs a GB10 at 500–850 MHz). The window keeps its
numbers; it gets a reason and cannot be ``ok``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkwatch.core.tracks import F64, I64
from sparkwatch_agent.shared.protocol import CLOCK_EVENT_REASONS

#: NVML's clock event reason bits, by name (the agent's /metrics uses the same names).
REASON_NAMES = CLOCK_EVENT_REASONS
#: The slowdowns that make a window suspect: heat and the power brake (HW slowdown is their umbrella).
SLOWDOWN_BITS = 0x8 | 0x20 | 0x40 | 0x80
#: A window that spent more than this share of its samples in a slowdown is flagged.
MAX_SLOWDOWN_RATIO = 0.10
#: A window whose mean SM clock is under this share of the maximum is flagged.
MIN_CLOCK_RATIO = 0.6


@dataclass(frozen=True, slots=True)
class SignalTrack:
    """One GPU's clock signals on the coordinator's clock, sorted by time; -1 / NaN where unknown."""

    t_ns: I64
    sm_clock_hz: F64
    temperature_c: F64
    reasons: I64
    max_sm_clock_hz: float | None  # from the GPU's hello; None: no ratio
    uuid: str | None = None  # the GPU's, where the caller knows it (the series names it)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if mask & bit] + (
        [f"0x{mask & ~sum(REASON_NAMES):x}"] if mask & ~sum(REASON_NAMES) else []
    )


def window_signals(tracks: Sequence[SignalTrack], starts: I64, ends: I64) -> list[dict[str, Any]]:
    """Per window, a node's signals: SM clock mean and its ratio to the maximum, the hottest reading, the
    union of clock event reasons seen, and the flags (``throttled:<reason>``) that make it suspect."""
    return [_one(tracks, int(a), int(b)) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def _one(tracks: Sequence[SignalTrack], a: int, b: int) -> dict[str, Any]:
    clocks, ratios, temps, masks = [], [], [], []
    for track in tracks:
        lo, hi = np.searchsorted(track.t_ns, [a, b], side="left")
        clock = track.sm_clock_hz[lo:hi]
        clocks.append(clock[np.isfinite(clock)])
        if track.max_sm_clock_hz:
            ratios.append(clocks[-1] / track.max_sm_clock_hz)
        temps.append(track.temperature_c[lo:hi][np.isfinite(track.temperature_c[lo:hi])])
        masks.append(track.reasons[lo:hi][track.reasons[lo:hi] >= 0])
    clock_all, ratio_all = np.concatenate(clocks or [np.empty(0)]), np.concatenate(ratios or [np.empty(0)])
    temp_all, mask_all = (
        np.concatenate(temps or [np.empty(0)]),
        np.concatenate(masks or [np.empty(0, np.int64)]),
    )
    union = int(np.bitwise_or.reduce(mask_all)) if len(mask_all) else None
    flags = []
    if len(mask_all):
        for bit, name in REASON_NAMES.items():
            share = float(np.mean((mask_all & bit) != 0))
            if bit & SLOWDOWN_BITS and share > MAX_SLOWDOWN_RATIO:
                flags.append(f"throttled:{name} ({share:.0%} of the window's samples)")
    ratio = float(np.mean(ratio_all)) if len(ratio_all) else None
    if ratio is not None and ratio < MIN_CLOCK_RATIO:
        flags.append(f"throttled:sm_clock (mean {ratio:.2f} of the maximum, under {MIN_CLOCK_RATIO:g})")
    return {
        "sm_clock_hz_mean": round(float(np.mean(clock_all))) if len(clock_all) else None,
        "sm_clock_ratio": round(ratio, 3) if ratio is not None else None,
        "temperature_c_max": float(np.max(temp_all)) if len(temp_all) else None,
        "clock_event_reasons": reason_names(union) if union is not None else None,
        "throttle": flags,
    }
