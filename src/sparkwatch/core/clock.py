"""Putting every node's samples on the coordinator's clock.

A probe round asks the agent for its wall and monotonic clocks; with the coordinator's wall time just before
sending (``t_send_ns``) and just after the reply (``t_recv_ns``), and the agent assumed to answer at the
midpoint, ``midpoint − agent time`` is the offset that turns agent time into coordinator time. The true
answer moment lies somewhere in the round trip, so one probe's error is at most RTT/2: each round keeps the
probes with the smallest round trips (least queueing), takes the median of their offsets, and reports the
smallest RTT/2 as its uncertainty (Zeus' power_streaming does the same).

Samples are mapped from the agent's **monotonic** clock, per boot: a line (offset and rate) fitted to the
rounds' monotonic offsets, so a step of the agent's wall clock (NTP, a person with ``date -s``) moves no
sample, and drift is followed. Steps are still found — as jumps of wall − monotonic between consecutive
samples — and reported; a round that disagrees with the line beyond its uncertainty is left out of the fit
and reported too. Only stores written before monotonic offsets were kept fall back to the wall offsets.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sparkwatch.core.rounding import rounded

I64 = npt.NDArray[np.int64]

#: Below this, a round's uncertainty is scheduling noise rather than measurement (weights, limits).
NOISE_FLOOR_NS = 100_000
#: A jump of wall − monotonic larger than both of these is a step, not NTP slewing (at most 500 ppm).
STEP_MIN_NS = 10_000_000
STEP_RATE = 1e-3
#: Samples taken at a time by the column-long computations here (a slice's temporaries: a few MB at most).
SLICE_SAMPLES = 16_384
#: A disagreeing probe round puts the alignment in doubt for one probe period (links probe every 10 s).
DISAGREEMENT_REACH_NS = 10_000_000_000
#: How far apart two machines' clock rates are believed to be before the rounds say (one standard deviation:
#: crystals within ±100 ppm, NTP-disciplined ones far closer). The fitted rate is the most likely one given
#: this and the rounds: a drift that long or precise rounds measure is kept (18 ms an hour at 50 ppm is), a
#: "drift" two noisy rounds 10 s apart suggest is not (±25 ms of queueing read as 5000 ppm, every duration
#: of a short run scaled by 0.5 %).
RATE_PRIOR = 1e-4


@dataclass(frozen=True, slots=True)
class TimeProbe:
    t_send_ns: int
    t_agent_ns: int  # the agent's wall clock
    t_recv_ns: int
    t_agent_mono_ns: int | None = None  # its monotonic clock, read with the wall one

    @property
    def rtt_ns(self) -> int:
        return self.t_recv_ns - self.t_send_ns

    @property
    def midpoint_ns(self) -> int:
        return (self.t_send_ns + self.t_recv_ns) // 2

    @property
    def offset_ns(self) -> int:
        return self.midpoint_ns - self.t_agent_ns


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """Add ``offset_ns`` to an agent wall timestamp (``mono_offset_ns`` to a monotonic one) to get
    coordinator time; ± ``uncertainty_ns``."""

    offset_ns: int
    uncertainty_ns: int
    probes_used: int
    probes_total: int
    mono_offset_ns: int | None = None

    def to_coordinator_ns(self, t_wall_ns: int, t_mono_ns: int | None = None) -> int:
        """A sample's time on the coordinator's clock by this one estimate: from its monotonic stamp where
        the estimate has that clock's offset (a step of the agent's wall clock since the probe does not
        move it), else from its wall stamp. An export fits the whole history instead (``MonoFit``)."""
        if self.mono_offset_ns is not None and t_mono_ns is not None:
            return t_mono_ns + self.mono_offset_ns
        return t_wall_ns + self.offset_ns

    def to_json(self) -> dict[str, int | None]:
        return {
            "offset_ns": self.offset_ns,
            "uncertainty_ns": self.uncertainty_ns,
            "probes_used": self.probes_used,
            "probes_total": self.probes_total,
        }


def estimate_offset(
    probes: Sequence[TimeProbe], best_fraction: float = 0.5, min_best: int = 3
) -> ClockOffset:
    """Median offsets over the ``best_fraction`` of probes with the smallest RTTs (at least ``min_best``)."""
    valid = [p for p in probes if p.rtt_ns >= 0]
    if not valid:
        raise ValueError("no usable clock probe (every round trip was negative or none was taken)")
    ranked = sorted(valid, key=lambda p: p.rtt_ns)
    keep = max(min(min_best, len(ranked)), round(len(ranked) * best_fraction))
    best = ranked[:keep]
    monos = [p.midpoint_ns - p.t_agent_mono_ns for p in best if p.t_agent_mono_ns is not None]
    return ClockOffset(
        offset_ns=int(statistics.median_low([p.offset_ns for p in best])),
        uncertainty_ns=(ranked[0].rtt_ns + 1) // 2,
        probes_used=len(best),
        probes_total=len(probes),
        mono_offset_ns=int(statistics.median_low(monos)) if len(monos) == len(best) else None,
    )


@dataclass(frozen=True, slots=True)
class OffsetRound:
    """One stored probe round: at coordinator time ``t_ns`` the offsets of the agent's wall and (when the
    store kept it) monotonic clocks, ± ``uncertainty_ns``."""

    t_ns: int
    offset_ns: int
    uncertainty_ns: int
    mono_offset_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Disagreement:
    """A probe round that the fitted line misses by more than the round's uncertainty allows."""

    t_ns: int  # coordinator time of the round
    residual_ns: int
    allowed_ns: int

    def to_json(self) -> dict[str, int]:
        return {"t_ns": self.t_ns, "residual_ns": self.residual_ns, "allowed_ns": self.allowed_ns}


@dataclass(frozen=True, slots=True)
class MonoFit:
    """coordinator ns = agent monotonic ns + ``offset_ns`` + ``rate`` × (agent monotonic ns − anchor)."""

    anchor_mono_ns: int
    offset_ns: int
    rate: float  # drift of the agent's monotonic clock against ours (1e-6 = 1 ppm)
    uncertainty_ns: int
    rounds_used: int
    disagreements: tuple[Disagreement, ...] = ()

    def to_coordinator(self, mono_ns: I64) -> I64:
        """Each time, a slice at a time: a node's 8 h of samples take no five temporaries their length."""
        out = np.empty(len(mono_ns), np.int64)
        for lo in range(0, len(mono_ns), SLICE_SAMPLES):
            part = mono_ns[lo : lo + SLICE_SAMPLES]
            since = (part - self.anchor_mono_ns).astype(np.float64)
            out[lo : lo + SLICE_SAMPLES] = (
                part + np.int64(self.offset_ns) + np.round(self.rate * since).astype(np.int64)
            )
        return out

    def at(self, mono_ns: int) -> int:
        """``to_coordinator`` for one time, without numpy (a proxy stamps every chunk with it)."""
        return mono_ns + self.offset_ns + round(self.rate * (mono_ns - self.anchor_mono_ns))

    def to_mono(self, t_ns: int) -> int:
        """The agent's monotonic time at coordinator time ``t_ns`` (the inverse, to the nanosecond)."""
        since = t_ns - self.offset_ns - self.anchor_mono_ns  # = (mono − anchor) · (1 + rate)
        return self.anchor_mono_ns + round(since / (1.0 + self.rate))


def fit_monotonic(rounds: Sequence[OffsetRound]) -> MonoFit | None:
    """The line through one boot's rounds (``None`` when none has a monotonic offset). The round that misses
    it most, by more than its uncertainty plus the typical one, is dropped and the line refitted, until
    every round left agrees (or two are left); the dropped ones are reported."""
    usable = [r for r in rounds if r.mono_offset_ns is not None]
    if not usable:
        return None
    x = np.array([r.t_ns - (r.mono_offset_ns or 0) for r in usable], dtype=np.int64)  # agent mono
    y = np.array([r.mono_offset_ns or 0 for r in usable], dtype=np.int64)
    u = np.maximum(np.array([r.uncertainty_ns for r in usable], dtype=np.int64), NOISE_FLOOR_NS)
    anchor = int(x[len(x) // 2])
    base = int(y[len(y) // 2])  # fitted relative to one round: float64 cannot hold 1.8e18 to the ns
    dx, dy = x - anchor, y - base
    allowed = u + int(np.median(u))
    keep = np.ones(len(x), dtype=bool)
    while True:
        offset, rate = _weighted_line(dx, dy, u, keep)
        miss = np.abs(dy - (offset + rate * dx)) / allowed
        worst = int(np.argmax(np.where(keep, miss, -1.0)))
        if miss[worst] <= 1.0 or keep.sum() <= 2:
            break
        keep[worst] = False
    residual = dy - (offset + rate * dx)
    bad = np.flatnonzero(np.abs(residual) > allowed)
    return MonoFit(
        anchor_mono_ns=anchor,
        offset_ns=base + round(float(offset)),
        rate=float(rate),
        uncertainty_ns=int(np.max(u[keep])),
        rounds_used=int(keep.sum()),
        disagreements=tuple(
            Disagreement(int(usable[i].t_ns), round(float(residual[i])), int(allowed[i])) for i in bad
        ),
    )


def _weighted_line(dx: I64, y: I64, u: I64, keep: npt.NDArray[np.bool_]) -> tuple[float, float]:
    """Least squares of y = a + b·dx over ``keep``, weighted by 1/u², with the rate b drawn towards 0 by
    ``RATE_PRIOR`` (a ridge: the rounds' evidence outweighs it as they span more time more precisely; a flat
    line from one round)."""
    dxk, yk = dx[keep].astype(np.float64), y[keep].astype(np.float64)
    w = 1.0 / u[keep].astype(np.float64) ** 2
    if len(dxk) < 2 or np.ptp(dxk) == 0:
        return float(np.average(yk, weights=w)), 0.0
    mx, my = np.average(dxk, weights=w), np.average(yk, weights=w)
    spread = float(np.sum(w * (dxk - mx) ** 2))
    rate = float(np.sum(w * (dxk - mx) * (yk - my)) / (spread + 1.0 / RATE_PRIOR**2))
    return float(my - rate * mx), rate


@dataclass(frozen=True, slots=True)
class ClockStep:
    """The agent's wall clock jumped by ``size_ns`` (forward when positive) against its monotonic clock."""

    t_ns: int  # coordinator time of the first sample after the jump
    size_ns: int

    def to_json(self) -> dict[str, int]:
        return {"t_ns": self.t_ns, "size_ns": self.size_ns}


def wall_steps(t_wall_ns: I64, t_mono_ns: I64, t_coord_ns: I64) -> list[ClockStep]:
    """Steps of one boot's wall clock, from its samples in monotonic order: a change of wall − monotonic
    between consecutive samples beyond ``STEP_MIN_NS`` and beyond what slewing could do (``STEP_RATE``)
    that lasts. A sampler preempted between its two clock reads shows one sample off and the next back
    (a median of three takes such a sample out); a step stays."""
    steps: list[ClockStep] = []
    n = len(t_mono_ns)
    for a in range(0, n - 1, SLICE_SAMPLES):  # the intervals a..b-1 (sample i to i+1) of a slice
        b = min(a + SLICE_SAMPLES, n - 1)
        lo, hi = max(a - 1, 0), min(b + 2, n)  # their samples and a neighbour each side, for the medians
        apart = t_wall_ns[lo:hi] - t_mono_ns[lo:hi]
        smooth = _median3(apart)  # its ends are raw, and a slice's ends here are the boot's or neighbours
        lasting = np.diff(smooth[a - lo : b - lo + 1])
        limit = np.maximum(STEP_MIN_NS, (np.diff(t_mono_ns[a : b + 1]) * STEP_RATE).astype(np.int64))
        jump = np.diff(apart[a - lo : b - lo + 1])  # the size as the samples saw it
        found = np.flatnonzero(np.abs(lasting) > limit)
        steps += [ClockStep(int(t_coord_ns[a + i + 1]), int(jump[i])) for i in found.tolist()]
    return steps


def _median3(values: I64) -> I64:
    """Each value but the first and last replaced by the median of it and its neighbours (exact integers)."""
    if len(values) < 3:
        return values
    out = values.copy()
    out[1:-1] = np.sort(np.stack([values[:-2], values[1:-1], values[2:]]), axis=0)[1]
    return out


def to_coordinator_ns(t_agent_ns: I64, rounds: Sequence[OffsetRound]) -> I64:
    """Agent wall times to coordinator time with the wall offsets measured through the run (interpolated
    linearly between rounds, the nearest one outside them): for boots stored without monotonic offsets."""
    if not rounds:
        raise ValueError("no clock offset measured for this node")
    t = np.array([r.t_ns for r in rounds], dtype=np.float64)
    off = np.array([r.offset_ns for r in rounds], dtype=np.float64)
    approx = t_agent_ns + np.int64(int(np.median(off)))
    return t_agent_ns + np.round(np.interp(approx.astype(np.float64), t, off)).astype(np.int64)


def summarise(rounds: Sequence[OffsetRound], t_from_ns: int, t_to_ns: int) -> ClockOffset | None:
    """The wall offset reported for a run: median of the rounds inside it (all, if none fell inside), with
    the largest uncertainty among them — the join is only as good as its worst alignment."""
    inside = [r for r in rounds if t_from_ns <= r.t_ns <= t_to_ns] or list(rounds)
    if not inside:
        return None
    return ClockOffset(
        offset_ns=int(statistics.median_low([r.offset_ns for r in inside])),
        uncertainty_ns=max(r.uncertainty_ns for r in inside),
        probes_used=len(inside),
        probes_total=len(rounds),
    )


@dataclass(frozen=True, slots=True)
class NodeClock:
    """How a node's samples were put on the coordinator's clock, and what was seen on the way."""

    summary: ClockOffset | None  # the node's wall offset over the run
    method: str  # "monotonic" (every boot fitted), "wall" (none could be), "mixed"
    rate_ppm: float | None  # the latest fitted boot's drift
    steps: tuple[ClockStep, ...] = ()
    disagreements: tuple[Disagreement, ...] = field(default=())

    @property
    def uncertainty_ns(self) -> int | None:
        return self.summary.uncertainty_ns if self.summary else None

    def suspects(self, t_start_ns: int, t_end_ns: int) -> list[str]:
        """Why a window from ``t_start_ns`` to ``t_end_ns`` cannot be trusted to this clock: the steps
        inside it and the disagreeing probe rounds near it (one probe period either side)."""
        if not self.steps and not self.disagreements:  # the usual clock: asked once per window and node
            return []
        reasons = [
            f"wall clock stepped {s.size_ns / 1e9:+.3f} s inside the window"
            for s in self.steps
            if t_start_ns <= s.t_ns <= t_end_ns
        ]
        reasons += [
            f"clock probes disagree by {d.residual_ns / 1e6:+.2f} ms (allowed {d.allowed_ns / 1e6:.2f} ms)"
            for d in self.disagreements
            if t_start_ns - DISAGREEMENT_REACH_NS <= d.t_ns <= t_end_ns + DISAGREEMENT_REACH_NS
        ]
        return reasons

    def to_json(self) -> dict[str, object]:
        base: dict[str, object] = (
            dict(self.summary.to_json()) if self.summary else {"offset_ns": None, "uncertainty_ns": None}
        )
        return {
            **base,
            "method": self.method,
            "rate_ppm": rounded(self.rate_ppm),  # never -0.0
            "steps": [s.to_json() for s in self.steps],
            "disagreements": [d.to_json() for d in self.disagreements],
        }
