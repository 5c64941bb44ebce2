"""An energy counter that stands still while the device draws, mended before intervals are integrated.

Two sources show it.

- A *coarse* counter moves far less often than it is sampled. dcgm-exporter reads the GPU every
  ``-c``/``DCGM_EXPORTER_INTERVAL`` ms (30 000 by default) and serves that collection — counter, power and
  utilisation alike — to every scrape until the next one, so a 1 s scrape reads one counter value 30 times
  and then the jump: taken as it reads, 0 W for 29 s and then a step no GPU draws (rejected, its energy
  lost); the readings are as old as the counter and say nothing of what the device drew since. A track is
  coarse when the median spacing of its counter's moves is ``COARSE_RATIO`` times its samples' or more
  (core/intervals.py). Its power between two moves seen in a row is the second move's advance over
  the time from the first: exact in sum, and as coarse as the counter. A sampling gap inside such a span,
  with the counter read on both sides and the same, hid no collection: the scrapes it lost would have
  read the one the samples on either side read, so it is known too, at the span's average. A move is
  *late* when the counter was last seen before it across a gap or longer ago than the gap limit (values
  missing in between): it fell somewhere in that time, so the spans it bounds are unknown, as is a span
  more than ``COARSE_SPAN_MOVES`` usual spacings long (it hid a move in a gap). Time before a boot's first
  move and after its last is unknown — a gap: the first advance also covers time before it, and a last
  value's advance is not seen. A counter value missing is no sample of the counter; a move across it is
  taken where the counter is next seen, when that is within the gap limit (the span's power is then off by
  as much as that time is of it: windows under two spacings are ``low_confidence`` for this too).
- A counter that gets *stuck* while the power sensor goes on (domain.md: older drivers' energy is unclear)
  on a track whose counter otherwise moves with its samples. A *stretch* is a run of joined intervals over
  which it did not move, ``HELD_COUNTER_S`` or longer (NVML's moves every 10-100 ms), while the readings
  average ``HELD_COUNTER_MIN_W`` or more (a rail at rest moves a millijoule counter too little to tell).
  The step that ends it is its *catch-up* when it advances by at least ``CATCH_UP_SHARE`` of what the
  readings say the stretch and the step drew (a counter that only resumes gives about one step's worth).
  Seen from its start, the stretch and its catch-up share the advance evenly; seen in part (the first of
  a track, or after a gap), the stretch and its catch-up take the trapezoid of the readings; with no
  catch-up the stretch takes the trapezoid and the step after keeps its own ΔE/Δt. A stretch whose
  readings never changed and whose end is not seen is a gap: such readings may be as stale as the counter.
  A stretch without readings is judged against what the counter's moving steps usually say: its catch-up
  is spread as above (seen in part: a gap); without one, nothing says what was drawn and it stays as read.

Intervals that take the trapezoid are no longer the counter's (``energy_method`` says ``mixed``); a reading
missing there makes its interval a gap, as anywhere. The gate reads utilisation as it comes: behind a
coarse counter it is as stale as the power, so a gated mean is only as fine as the collection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sparkwatch.core.intervals import counter_interval_s, counter_moves, seen_interval_s
from sparkwatch.core.tracks import F64, I64

#: A counter unmoved this long is not being updated (ten times NVML's slowest update).
HELD_COUNTER_S = 1.0
#: ... while the readings average at least this.
HELD_COUNTER_MIN_W = 1.0
#: The step after a stuck stretch is its catch-up when it advances by at least this share of what the
#: readings say the stretch and that step drew.
CATCH_UP_SHARE = 0.5
#: A coarse counter's span between two moves longer than this many of its usual spacings hid a move in a
#: sampling gap: where that move fell is not known, so neither is the span's power.
COARSE_SPAN_MOVES = 2.0
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Steps:
    """A track's steps as the counter sees them: the samples' times, boots and gap limits (for the coarse
    test), the counter, ΔE, Δt and the joined intervals (one boot, no gap)."""

    t_ns: I64
    segment: I64
    max_gap_ns: I64
    energy_j: F64
    d_energy: F64
    dt_s: F64
    joined: Mask

    def mend(self, power_w: F64, *, power: F64, counter: Mask) -> None:
        """In place on ``power`` (per interval), ``counter`` (interval power is the counter's) and ``joined``
        (a coarse span's sampling gap is known), as the module says; ``power_w``: the readings, per sample."""
        still = counter & self.joined
        still &= self.d_energy == 0
        if not still.any():
            return  # the counter moved at every step: nothing to mend (the common case, decided in O(n))
        seen_s = seen_interval_s(self.t_ns, self.segment)
        every_s = counter_interval_s(self.t_ns, self.segment, self.energy_j, seen_s)
        if every_s is not None:
            self._mend_coarse(every_s, power=power, counter=counter)
        else:
            self._mend_stuck(power_w, still, power=power, counter=counter)

    def _mend_coarse(self, every_s: float, *, power: F64, counter: Mask) -> None:
        """Each span between two moves of one boot takes the second's advance over its time, a sampling gap
        inside it over which the counter stood still included (it hid no collection); one bounded by a late
        move, or longer than ``COARSE_SPAN_MOVES`` usual spacings, has a move somewhere in a gap: unknown."""
        moved = counter_moves(self.energy_j, self.segment)
        power[:] = np.nan  # unknown but between two moves seen in a row
        counter[:] = False
        if len(moved) < 2:
            return
        a, b = moved[:-1], moved[1:]
        elapsed = np.concatenate(([0.0], np.cumsum(self.dt_s)))
        span_s = elapsed[b] - elapsed[a]
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = (self.energy_j[b] - self.energy_j[a]) / span_s
        lost = (self.segment[a] != self.segment[b]) | (span_s > COARSE_SPAN_MOVES * every_s)
        late = self._late(moved)
        lost |= late[:-1] | late[1:]
        rate[lost | ~(rate >= 0)] = np.nan  # across a boot or a lost move, or a counter that went back
        spans = np.repeat(rate, b - a)
        known = np.isfinite(spans)
        power[a[0] : b[-1]] = spans
        counter[a[0] : b[-1]] = known
        # a gap the counter stood still across: the scrapes it lost would have read the span's collection
        still = (self.d_energy[a[0] : b[-1]] == 0) & (self.dt_s[a[0] : b[-1]] > 0)
        self.joined[a[0] : b[-1]] |= known & still

    def _late(self, moved: I64) -> Mask:
        """Per move: the counter was last seen before it across a gap, or longer ago than the gap limit
        (values missing between), so when it moved in that time is not known."""
        seen = np.flatnonzero(np.isfinite(self.energy_j))
        before = seen[np.searchsorted(seen, moved) - 1]  # every move follows a value of the counter
        broken = np.concatenate(([0], np.cumsum(~self.joined)))  # unjoined intervals before each sample
        late: Mask = broken[moved] > broken[before]
        late |= self.t_ns[moved] - self.t_ns[before] > self.max_gap_ns[moved]
        return late

    def _mend_stuck(self, power_w: F64, flat: Mask, *, power: F64, counter: Mask) -> None:
        read = counter.copy()  # the counter as read, before any stretch is mended
        edges = np.diff(flat.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # stretches [start, end)
        elapsed = np.concatenate(([0.0], np.cumsum(self.dt_s)))
        long = elapsed[ends] - elapsed[starts] >= HELD_COUNTER_S
        usual_w: float | None = None
        for a, b in zip(starts[long].tolist(), ends[long].tolist(), strict=True):
            readings = power_w[a : b + 1]  # the stretch's samples, all on the one counter value
            live = bool(np.isfinite(readings).any())
            if not live and usual_w is None:
                usual_w = self._usual_w(read)
            level_w = float(np.nanmean(readings)) if live else usual_w
            if level_w is None or level_w < HELD_COUNTER_MIN_W:
                continue  # nothing to tell by, or a rail at rest: the counter may be right
            span_s = float(elapsed[b] - elapsed[a])
            end = b
            if not (b < len(self.d_energy) and self.joined[b] and read[b]):  # its end is not seen
                if not live or _unchanged(readings):  # readings that may be as stale as the counter
                    power[a:b] = np.nan
                    continue
            elif self.d_energy[b] >= CATCH_UP_SHARE * level_w * (span_s + self.dt_s[b]):
                if a > 0 and self.joined[a - 1] and read[a - 1] and self.d_energy[a - 1] > 0:  # seen whole
                    power[a : b + 1] = self.d_energy[b] / (span_s + self.dt_s[b])
                    continue
                end = b + 1  # seen in part: its catch-up covers time before it too
            elif not live:
                continue  # it resumed without catching up, and nothing says what was drawn meanwhile
            power[a:end] = 0.5 * (power_w[a:end] + power_w[a + 1 : end + 1])  # NaN without readings
            counter[a:end] = False

    def _usual_w(self, read: Mask) -> float | None:
        """What the counter says the device usually draws (the median of its moving steps): the level a
        stuck stretch's catch-up is judged against when the stretch has no power readings."""
        moving = read & self.joined & (self.d_energy > 0)
        return float(np.median(self.d_energy[moving] / self.dt_s[moving])) if moving.any() else None


def _unchanged(readings: F64) -> bool:
    known = readings[np.isfinite(readings)]
    return len(known) >= 2 and bool(np.all(known == known[0]))
