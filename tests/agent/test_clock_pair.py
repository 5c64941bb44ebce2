"""Reading the wall and the monotonic clock as one pair: a hold-up between the two reads (the thread
preempted, a slow LD_PRELOAD'ed clock) no longer shifts a sample's wall − monotonic, which the coordinator
would report as a wall-clock step at a boot's first sample (a loaded CI machine did, under libfaketime)."""

from __future__ import annotations

import numpy as np
import pytest
from test_sampler import make_sampler

from doubles.nvml_fake import gb10_fake
from sparkwatch.core.clock import wall_steps
from sparkwatch_agent.sampling.clocks import PAIR_GAP_NS, PAIR_TRIES, Clocks, read_pair

MS = 1_000_000
APART_NS = 1_800_000_000_000_000_000 - 5_000_000_000  # true wall − monotonic


class HeldClock:
    """One true time read through both clocks; each wall read is held up (after it read the time, before
    it returns) by the next listed seconds, as a thread preempted between the two reads would be."""

    def __init__(self, holdups_s: list[float]) -> None:
        self.mono = 5_000_000_000
        self.holdups_s = holdups_s
        self.wall_reads = 0

    def wall_ns(self) -> int:
        self.wall_reads += 1
        wall = self.mono + APART_NS
        self.advance(self.holdups_s.pop(0) if self.holdups_s else 0.0)
        return wall

    def mono_ns(self) -> int:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.mono += round(seconds * 1e9)

    def clocks(self) -> Clocks:
        return Clocks(wall_ns=self.wall_ns, mono_ns=self.mono_ns)


def test_an_unheld_pair_is_read_once_and_exact() -> None:
    clock = HeldClock([])
    wall, mono = read_pair(clock.wall_ns, clock.mono_ns)
    assert (wall - mono, mono, clock.wall_reads) == (APART_NS, 5_000_000_000, 1)


def test_a_wall_read_held_up_is_taken_again() -> None:
    clock = HeldClock([0.015, 0.012])
    wall, mono = read_pair(clock.wall_ns, clock.mono_ns)
    assert wall - mono == APART_NS and clock.wall_reads == 3
    assert mono == clock.mono  # the monotonic read is the last one: a caller's stamp


@pytest.mark.parametrize("holdups_s", [[0.015, 0.004, 0.009], [0.004, 0.015, 0.009], [0.015, 0.009, 0.004]])
def test_held_up_every_try_the_closest_is_kept_within_half_its_gap(holdups_s: list[float]) -> None:
    clock = HeldClock(list(holdups_s))
    wall, mono = read_pair(clock.wall_ns, clock.mono_ns)
    assert clock.wall_reads == PAIR_TRIES and mono == clock.mono
    assert wall - mono == APART_NS - 2 * MS  # the 4 ms try's wall, as of its midpoint, carried forward
    assert abs(wall - mono - APART_NS) <= min(holdups_s) * 1e9 / 2


def test_a_boot_whose_first_wall_read_was_held_up_shows_no_step() -> None:
    """The agent's first sample is its slowest (first calls, cold caches): held up 15 ms between its
    clock reads it read 15 ms off, and the coordinator's step finder (which cannot take a one-sample blip
    out at a boot's end) reported a 15 ms step. Its later samples are held up under the gap too."""
    clock = HeldClock([0.015, 0.0009, 0.0009, 0.0009])
    sampler = make_sampler(gb10_fake(), clock)
    samples = []
    for _ in range(40):
        samples.append(sampler.tick())
        clock.advance(0.05)
    wall = np.array([s.t_wall_ns for s in samples], dtype=np.int64)
    mono = np.array([s.t_mono_ns for s in samples], dtype=np.int64)
    assert wall_steps(wall, mono, wall) == []
    assert np.abs(wall - mono - APART_NS).max() <= PAIR_GAP_NS // 2
