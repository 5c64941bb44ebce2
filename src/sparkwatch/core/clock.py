"""Clock-offset estimation from round trips to an agent's /v1/time.

For each probe the coordinator records its wall time just before sending (``t_send_ns``) and just after the
reply (``t_recv_ns``); the agent reports its wall time ``t_agent_ns``. If the agent answered at the
midpoint, ``offset = midpoint − t_agent`` converts agent time to coordinator time (``t + offset``). The
true answer moment lies somewhere in the round trip, so one probe's error is at most RTT/2. We keep the
probes with the smallest round trips (least queueing), take the median of their offsets, and report the
smallest RTT/2 as the uncertainty (Zeus' power_streaming does the same).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class TimeProbe:
    t_send_ns: int
    t_agent_ns: int
    t_recv_ns: int

    @property
    def rtt_ns(self) -> int:
        return self.t_recv_ns - self.t_send_ns

    @property
    def offset_ns(self) -> int:
        return (self.t_send_ns + self.t_recv_ns) // 2 - self.t_agent_ns


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Add ``offset_ns`` to an agent timestamp to get coordinator time; ± ``uncertainty_ns``."""

    offset_ns: int
    uncertainty_ns: int
    probes_used: int
    probes_total: int

    def to_json(self) -> dict[str, int]:
        return {
            "offset_ns": self.offset_ns,
            "uncertainty_ns": self.uncertainty_ns,
            "probes_used": self.probes_used,
            "probes_total": self.probes_total,
        }


def estimate_offset(
    probes: Sequence[TimeProbe], best_fraction: float = 0.5, min_best: int = 3
) -> ClockOffset:
    """Median offset over the ``best_fraction`` of probes with the smallest RTTs (at least ``min_best``)."""
    valid = [p for p in probes if p.rtt_ns >= 0]
    if not valid:
        raise ValueError("no usable clock probe (every round trip was negative or none was taken)")
    ranked = sorted(valid, key=lambda p: p.rtt_ns)
    keep = max(min(min_best, len(ranked)), round(len(ranked) * best_fraction))
    best = ranked[:keep]
    offset = int(statistics.median_low([p.offset_ns for p in best]))
    return ClockOffset(
        offset_ns=offset,
        uncertainty_ns=(ranked[0].rtt_ns + 1) // 2,
        probes_used=len(best),
        probes_total=len(probes),
    )


def to_coordinator_ns(
    t_agent_ns: npt.NDArray[np.int64], measurements: Sequence[tuple[int, int, int]]
) -> npt.NDArray[np.int64]:
    """Convert agent wall times to coordinator time with offsets measured through the run.

    ``measurements`` are (coordinator t_ns, offset_ns, uncertainty_ns). Between measurements the offset is
    interpolated linearly (clocks drift slowly); outside them the nearest one holds.
    """
    if not measurements:
        raise ValueError("no clock offset measured for this node")
    t = np.array([m[0] for m in measurements], dtype=np.float64)
    off = np.array([m[1] for m in measurements], dtype=np.float64)
    approx = t_agent_ns + np.int64(int(np.median(off)))
    return t_agent_ns + np.round(np.interp(approx.astype(np.float64), t, off)).astype(np.int64)


def summarise(
    measurements: Sequence[tuple[int, int, int]], t_from_ns: int, t_to_ns: int
) -> ClockOffset | None:
    """The offset reported for a run: median of the measurements inside it (all, if none fell inside), with
    the largest uncertainty among them — the join is only as good as its worst alignment."""
    inside = [m for m in measurements if t_from_ns <= m[0] <= t_to_ns] or list(measurements)
    if not inside:
        return None
    return ClockOffset(
        offset_ns=int(statistics.median_low([m[1] for m in inside])),
        uncertainty_ns=max(m[2] for m in inside),
        probes_used=len(inside),
        probes_total=len(measurements),
    )
