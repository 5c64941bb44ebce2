"""The baseline period: the ``BASELINE_S`` before the first measured window, when a node shows what it holds
and draws at rest. Memory's baseline and every idle power are medians over this one period.

A sample belongs to it when its time is in [first − BASELINE_S, first). An interval between two samples
belongs to it when both its samples do, so an idle power is a median of the same interval powers the
energy is integrated from (counter ΔE/Δt, else the trapezoid; gaps and implausible intervals left out).
Only the intervals the gate leaves out count as idle: a warm-up request usually runs right before the
timed ones and can fill most of the period, and its power is not what the machine draws at rest. Nor do
the intervals that share time with any request (a warm-up's, a failed one's): at a TSDB's 5 s scrapes the
interval in which a warm-up ended is mostly busy, yet gated out when the utilisation scraped at its end is
low (a trial read 35 W of idle for a GPU that rests at 5 W).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sparkwatch.core.integrals import Integrals
from sparkwatch.core.tracks import I64
from sparkwatch.core.windows import Scope

BASELINE_S = 10.0


def baseline_mask(t_ns: I64, before_ns: int | None) -> npt.NDArray[np.bool_]:
    """Which sample times fall in the baseline period before ``before_ns`` (none when it is unknown)."""
    if before_ns is None:
        return np.zeros(len(t_ns), dtype=bool)
    return (t_ns >= before_ns - int(BASELINE_S * 1e9)) & (t_ns < before_ns)


def no_baseline(what: str, before_ns: int | None) -> str:
    """Why a baseline of ``what`` is unknown: no measured window to precede, or nothing in the period."""
    if before_ns is None:
        return "no measured window, so no baseline period before the first one"
    return f"no {what} in the {BASELINE_S:g} s before the first window"


def idle_power_w(
    integrals: Integrals, before_ns: int | None, requests: Scope | None = None
) -> tuple[float | None, str | None]:
    """The median power of the valid, ungated intervals in the baseline period that share no time with
    ``requests`` (every request's span); else ``None`` and why."""
    t = integrals.t_ns
    inside = baseline_mask(t, before_ns)
    intervals = inside[:-1] & inside[1:] & integrals.valid if len(inside) >= 2 else inside[:0]
    if not intervals.any():
        return None, no_baseline("valid sample interval", before_ns)
    resting = intervals & ~integrals.gated
    if requests is not None and not requests.empty and resting.any():
        resting &= ~requests.overlaps(t[:-1], t[1:])
    if not resting.any():
        return None, (
            f"every interval in the {BASELINE_S:g} s before the first window is gated in or shares time with"
            " a request (busy: a warm-up?)"
        )
    return float(np.median(integrals.power_w[resting])), None


def above_idle_j(energy_j: float | None, idle_w: float | None, covered_s: float) -> float | None:
    """Energy beyond what the idle power would have drawn over the covered time (may be negative: a node
    that drew less than at rest); ``None`` when either is unknown."""
    if energy_j is None or idle_w is None:
        return None
    return energy_j - idle_w * covered_s
