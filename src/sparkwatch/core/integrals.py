"""Interval power, the utilisation gate, and cumulative integrals that answer any window in O(log n).

Interval k is [t_k, t_{k+1}] between consecutive samples of one boot, at most ``GAP_INTERVALS`` nominal
intervals long. Its power is ΔE/Δt from the energy counter when both ends have it (and it did not go
backwards), else the trapezoid of the two power readings; without either it is a gap. A counter that stood
still while the readings say the device drew is mended first (core/held_counter.py). Power no GPU can
draw (above ``MAX_PLAUSIBLE_GPU_W``: a counter that jumped, samples squeezed together; or a trapezoid
over a reading below zero: a sensor or meter read wrong) is *implausible*: the interval is a gap too,
counted, never averaged. It is *gated in* when the utilisation reported at
its end is ≥ the threshold.

Power is constant over each interval, so the energy in [0, x] is a piecewise-linear function; we keep its
values at the sample times (a cumulative sum) and interpolate inside the interval that holds x. The same
goes for covered time, gated energy and gated time. A window's figure is then F(b) − F(a), and a scope's
the sum over its pieces: exact, additive in the scope, and independent of how many windows are asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from sparkwatch.core.held_counter import Steps
from sparkwatch.core.tracks import F64, I64, GpuTrack

EnergyMethod = Literal["counter", "trapezoid", "mixed", "none"]
#: A ceiling no single GPU reaches (the largest accelerators draw about 1.2-1.4 kW at full load).
MAX_PLAUSIBLE_GPU_W = 3000.0


@dataclass(frozen=True, slots=True)
class Integrals:
    t_ns: I64  # sample times, sorted
    dt_s: F64  # per interval
    power_w: F64  # per interval; NaN where the interval is a gap
    valid: npt.NDArray[np.bool_]
    gated: npt.NDArray[np.bool_]
    counter: npt.NDArray[np.bool_]  # power from the energy counter (else trapezoid)
    implausible: npt.NDArray[np.bool_]  # power below 0 or above the ceiling: rejected as a gap
    cum: tuple[F64, F64, F64, F64]  # at each sample time: energy J, covered s, gated J, gated s

    @staticmethod
    def build(
        track: GpuTrack, gate_threshold: float, max_plausible_w: float = MAX_PLAUSIBLE_GPU_W
    ) -> Integrals:
        """Vectorised over all samples; written with in-place operations because at 10 M samples the
        temporaries, not the arithmetic, are what costs. ``max_plausible_w``: the ceiling for what the track
        measures (a GPU by default; a whole node's domains have their own)."""
        t = track.t_ns
        n = len(t)
        if n < 2:
            none = np.zeros(0, dtype=bool)
            zero = np.zeros(max(n, 1))
            return Integrals(t, np.zeros(0), np.zeros(0), none, none, none, none, (zero, zero, zero, zero))
        dt_ns = np.diff(t)
        dt_s = dt_ns * 1e-9
        positive = dt_ns > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            d_energy = np.diff(track.energy_j)
            counter = d_energy >= 0  # False where either end is unknown (NaN)
            counter &= positive
            power = track.power_w[:-1] + track.power_w[1:]
            power *= 0.5  # trapezoid ...
            np.divide(d_energy, dt_s, out=power, where=counter)  # ... unless the counter answers
            valid = track.segment[1:] == track.segment[:-1]
            valid &= positive
            valid &= dt_ns <= np.maximum(track.max_gap_ns[1:], track.max_gap_ns[:-1])
            steps = Steps(t, track.segment, track.max_gap_ns, track.energy_j, d_energy, dt_s, valid)
            steps.mend(track.power_w, power=power, counter=counter)  # on ``valid`` too: a coarse span's gap
            valid &= np.isfinite(power)
            implausible = power > max_plausible_w
            # a trapezoid over a reading below zero (a counter's ΔE/Δt never is): no mean takes it
            below = np.minimum(track.power_w[:-1], track.power_w[1:]) < 0.0
            below &= ~counter
            implausible |= below
            implausible &= valid
            valid &= ~implausible
            gated = track.util_ratio[1:] >= gate_threshold
            gated &= valid
        energy = np.where(valid, power, 0.0)
        energy *= dt_s
        covered = np.where(valid, dt_s, 0.0)
        cum = (
            _cumulative(energy),
            _cumulative(covered),
            _cumulative(np.where(gated, energy, 0.0)),
            _cumulative(np.where(gated, dt_s, 0.0)),
        )
        power[~valid] = np.nan
        counter &= valid
        return Integrals(t, dt_s, power, valid, gated, counter, implausible, cum)

    def at(self, x_ns: I64) -> F64:
        """The four cumulative functions at times ``x_ns``: shape (4, len(x))."""
        x = np.asarray(x_ns, dtype=np.int64)
        n = len(self.t_ns)
        out = np.zeros((4, len(x)))
        if n < 2:
            return out
        i = np.clip(np.searchsorted(self.t_ns, x, side="right") - 1, 0, n - 2)
        inside = np.clip((x - self.t_ns[i]) * 1e-9, 0.0, self.dt_s[i])  # seconds into interval i
        valid, gated = self.valid[i], self.gated[i]
        power = np.where(valid, self.power_w[i], 0.0)
        out[0] = self.cum[0][i] + power * inside
        out[1] = self.cum[1][i] + np.where(valid, inside, 0.0)
        out[2] = self.cum[2][i] + np.where(gated, power * inside, 0.0)
        out[3] = self.cum[3][i] + np.where(gated, inside, 0.0)
        return out

    def between(self, a_ns: I64, b_ns: I64) -> F64:
        """F(b) − F(a) for each pair: shape (4, len(a)) — energy J, covered s, gated J, gated s."""
        return self.at(b_ns) - self.at(a_ns)

    def overlapping(self, starts: I64, ends: I64) -> npt.NDArray[np.bool_]:
        """Which intervals overlap the union of [starts, ends) (pieces sorted and disjoint)."""
        mask = np.zeros(len(self.dt_s), dtype=bool)
        if len(self.dt_s) == 0 or len(starts) == 0:
            return mask
        first = np.clip(np.searchsorted(self.t_ns, starts, side="right") - 1, 0, None)
        last = np.searchsorted(self.t_ns, ends, side="left")  # intervals [first, last) overlap the piece
        delta = np.zeros(len(self.dt_s) + 1, dtype=np.int64)
        np.add.at(delta, np.minimum(first, len(self.dt_s)), 1)
        np.add.at(delta, np.minimum(last, len(self.dt_s)), -1)
        mask = np.cumsum(delta[:-1]) > 0
        return mask

    def method(self, mask: npt.NDArray[np.bool_]) -> EnergyMethod:
        used = self.valid & mask
        if not used.any():
            return "none"
        by_counter = self.counter[used]
        if by_counter.all():
            return "counter"
        return "trapezoid" if not by_counter.any() else "mixed"


def _cumulative(per_interval: F64) -> F64:
    """Running sum with a leading 0, so index i is the integral up to sample i."""
    out = np.empty(len(per_interval) + 1)
    out[0] = 0.0
    np.cumsum(per_interval, out=out[1:])
    return out
