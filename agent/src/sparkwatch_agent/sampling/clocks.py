"""The agent's two clocks, and reading them as one pair.

A sample (and a clock probe's answer) carries the wall and the monotonic time it was taken at; the
coordinator places samples by the monotonic one and reports a step wherever wall − monotonic jumps. A
thread held up between the two reads (preempted on a loaded host, the GIL kept by another thread, a slow
LD_PRELOAD'ed clock) pairs a wall time with a later monotonic one: that sample's wall − monotonic is off
by the hold-up. Off at a boot's first sample, it cannot be told from a step there. So the wall clock is
read between two monotonic reads, again when those lie far apart, and placed at the last of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: Monotonic reads either side of a wall read further apart than this: the wall read is taken again.
PAIR_GAP_NS = 1_000_000
#: Wall reads tried per pair at most; the one between the closest monotonic reads is kept.
PAIR_TRIES = 3


@dataclass(frozen=True, slots=True)
class Clocks:
    """Injected time sources (the loop's waits are on an event, so stop and lease changes wake it)."""

    wall_ns: Callable[[], int] = time.time_ns
    mono_ns: Callable[[], int] = time.monotonic_ns

    def pair(self) -> tuple[int, int]:
        """``(t_wall_ns, t_mono_ns)`` as of one instant, the monotonic read last (a caller's stamp)."""
        return read_pair(self.wall_ns, self.mono_ns)


def read_pair(wall_ns: Callable[[], int], mono_ns: Callable[[], int]) -> tuple[int, int]:
    """The wall time at the returned monotonic time: the wall read whose monotonic reads either side lay
    closest (at most ``PAIR_TRIES``, until one gap is under ``PAIR_GAP_NS``), taken as of their midpoint
    and carried forward to the last monotonic read. Its error is at most half that gap (the two clocks
    run at the same rate to 500 ppm over the microseconds between)."""
    before = mono_ns()
    wall = wall_ns()
    after = mono_ns()
    gap = after - before
    if gap <= PAIR_GAP_NS:  # nearly always: one try, kept cheap (a sampler at 100 Hz pays it each tick)
        return wall + gap - gap // 2, after
    best_gap_ns, best_wall_ns, best_mid_ns = gap, wall, before + gap // 2
    for _ in range(PAIR_TRIES - 1):
        before = after
        wall = wall_ns()
        after = mono_ns()
        gap = after - before
        if gap < best_gap_ns:
            best_gap_ns, best_wall_ns, best_mid_ns = gap, wall, before + gap // 2
        if gap <= PAIR_GAP_NS:
            break
    return best_wall_ns + (after - best_mid_ns), after
