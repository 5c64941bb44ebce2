"""An energy counter that stands still while the device draws, mended before intervals are integrated.

Two sources show it. dcgm-exporter reads the GPU every ``-c``/``DCGM_EXPORTER_INTERVAL`` ms (30 000 by
default) and serves that collection — counter, power and utilisation alike — to every scrape until the next
one, so a 1 s scrape reads one counter value 30 times and then the jump: taken as it reads, 0 W for 29 s
and then a step no GPU draws (rejected, its energy lost). And a counter that stops counting while the power
sensor goes on (domain.md: older drivers' energy is unclear) reads 0 W for as long as it is stuck.

A *stretch* is a run of joined intervals over which the counter did not move, ``HELD_COUNTER_S`` or longer
(NVML's moves every 10-100 ms), while the power readings average ``HELD_COUNTER_MIN_W`` or more (a rail at
rest moves a millijoule counter too little to tell). The readings are *stale* when those there are never
changed over it (a collection re-served: they say nothing of what the device drew since). The step that
ends the stretch is its *catch-up* when, with stale readings, it advances by ``COLLECTION_STEPS`` or more
steps' worth at their power (a collection's advance covers every scrape of it, whatever the load did after
the reading), or else by at least ``CATCH_UP_SHARE`` of what the readings say the stretch and the step
drew (a counter that only resumes gives about one step's worth). Then:

- a stretch seen from its start (the counter moved into its value at the step before it) and its catch-up
  share the catch-up's advance evenly: exact in sum, and as coarse as the counter;
- a stretch seen only in part cannot take an advance that also covers time before it: a collection's
  (the first of a track, or the first after a gap) is unknown — a gap: its readings are as old as its
  counter, and a load that changed after the collection would be read at the old power — and a stuck
  counter's and its catch-up take the trapezoid of the live readings;
- a stretch whose end is not seen (the track's end, a gap, a counter value missing) is a gap when its
  readings are stale, as above, and takes the trapezoid when they are live;
- a stretch after which the counter moves again without catching up (it stopped counting) takes the
  trapezoid; the step after keeps the counter's own ΔE/Δt.

Intervals that take the trapezoid are no longer the counter's (``energy_method`` says ``mixed``); a reading
missing there makes its interval a gap, as anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from sparkwatch.core.tracks import F64

#: A counter unmoved this long is not being updated (ten times NVML's slowest update).
HELD_COUNTER_S = 1.0
#: ... while the readings average at least this.
HELD_COUNTER_MIN_W = 1.0
#: With live readings, the step after a stretch is its catch-up when it advances by at least this share of
#: what the readings say the stretch and that step drew.
CATCH_UP_SHARE = 0.5
#: With stale readings, it is a collection's catch-up when it advances by at least this many steps' worth
#: at the readings' power (a counter that only resumes gives about one; a collection's, one per scrape it
#: covered: two at a 15 s scrape of a 30 s collection, thirty at 1 s).
COLLECTION_STEPS = 1.5

Mask = npt.NDArray[np.bool_]
#: A catch-up after a collection re-served (readings and counter held together), or after a stuck counter.
CatchUp = Literal["collection", "counter"]


@dataclass(frozen=True, slots=True)
class _Steps:
    """The track's steps as the counter sees them: ΔE, Δt, joined (one boot, no gap), ΔE/Δt usable."""

    d_energy: F64
    dt_s: F64
    joined: Mask
    counter: Mask

    def moved_into(self, a: int) -> bool:
        """Whether the counter took the value of the stretch starting at ``a`` at the step just before."""
        return a > 0 and bool(self.joined[a - 1] and self.counter[a - 1] and self.d_energy[a - 1] > 0)

    def resumed(self, b: int) -> bool:
        """Whether the counter is seen to move again at step ``b``, the one after the stretch [a, b)."""
        return b < len(self.d_energy) and bool(self.joined[b] and self.counter[b])

    def catch_up(self, b: int, readings: F64, span_s: float) -> CatchUp | None:
        """Whether step ``b`` (the counter resumed) is the stretch's catch-up, and of which kind (the module
        says when); ``readings``: the power of the stretch's samples."""
        step_j = float(self.d_energy[b])
        if _stale(readings) and step_j >= COLLECTION_STEPS * float(np.nanmax(readings)) * float(self.dt_s[b]):
            return "collection"
        drawn_j = float(np.nanmean(readings)) * (span_s + float(self.dt_s[b]))
        return "counter" if step_j >= CATCH_UP_SHARE * drawn_j else None


def _stale(readings: F64) -> bool:
    """Readings that never changed (those there are): a collection re-served, or a sensor as still."""
    known = readings[np.isfinite(readings)]
    return len(known) >= 2 and bool(np.all(known == known[0]))


def mend_held(power_w: F64, d_energy: F64, dt_s: F64, joined: Mask, *, power: F64, counter: Mask) -> None:
    """In place on ``power`` (per interval) and ``counter`` (interval power is the counter's): every stretch
    as the module says. ``power_w``: the readings, per sample; ``joined``: intervals inside one boot, with
    no gap."""
    flat = counter & joined
    flat &= d_energy == 0
    if not flat.any():
        return
    steps = _Steps(d_energy, dt_s, joined, counter.copy())  # the counter as read, before any is mended
    edges = np.diff(flat.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # stretches [start, end)
    elapsed = np.concatenate(([0.0], np.cumsum(dt_s)))
    long = elapsed[ends] - elapsed[starts] >= HELD_COUNTER_S
    for a, b in zip(starts[long].tolist(), ends[long].tolist(), strict=True):
        readings = power_w[a : b + 1]  # the stretch's samples, all on the one counter value
        if not np.isfinite(readings).any() or float(np.nanmean(readings)) < HELD_COUNTER_MIN_W:
            continue  # no readings to tell by, or a rail at rest: the counter may be right
        span_s = float(elapsed[b] - elapsed[a])
        end = b
        if not steps.resumed(b):  # its end unseen (the track's end, a gap, a counter missing)
            if _stale(readings):  # perhaps a collection: its readings as old as its counter
                power[a:b] = np.nan
                continue
        elif (kind := steps.catch_up(b, readings, span_s)) is not None:
            if steps.moved_into(a):
                power[a : b + 1] = d_energy[b] / (span_s + dt_s[b])
                continue
            if kind == "collection":  # seen in part, and its readings as old as its counter: unknown
                power[a : b + 1] = np.nan
                continue
            end = b + 1  # seen in part: its catch-up covers time before it too, and is not the counter's
        power[a:end] = 0.5 * (power_w[a:end] + power_w[a + 1 : end + 1])
        counter[a:end] = False
