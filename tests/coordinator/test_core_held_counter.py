"""An energy counter that stands still while the device draws (core/integrals.py, ``_mend_held``): a counter
that stopped counting read 0 W, and one re-served between collections (dcgm-exporter collects every 30 s
by default; a 1 s scrape reads one value 30 times, then the jump) read 0 W for 29 s and then a step no GPU
can draw, rejected, so its energy was lost and the gated mean came out near zero."""

from __future__ import annotations

import numpy as np
import pytest

from sparkwatch.core.export_nodes import resolution_s
from sparkwatch.core.integrals import HELD_COUNTER_S, Integrals
from sparkwatch.core.power import scope_stats, window_stats
from sparkwatch.core.tracks import GpuPoint, GpuTrack
from sparkwatch.core.windows import union

S = 1_000_000_000
T0 = 1_800_000_000 * S


def _track(power_w: list[float], energy_j: list[float | None], interval_s: float) -> GpuTrack:
    step = round(interval_s * S)
    return GpuTrack.from_points(
        GpuPoint(T0 + k * step, 0, interval_s, p, e, 1.0)
        for k, (p, e) in enumerate(zip(power_w, energy_j, strict=True))
    )


def _energy(integrals: Integrals, a_ns: int, b_ns: int) -> float:
    return scope_stats(integrals, union([(a_ns, b_ns)])).energy_j or 0.0


def test_a_counter_that_stops_counting_falls_back_to_the_readings() -> None:
    """10 Hz, 100 W: the counter moves for 2 s, stands still for 3 s (no catch-up), then moves again."""
    energy, counted = [], 5000.0
    for k in range(71):
        if k and not 20 <= k - 1 < 50:
            counted += 10.0
        energy.append(counted)
    integrals = Integrals.build(_track([100.0] * 71, energy, 0.1), 0.5)
    assert _energy(integrals, T0 + 2 * S, T0 + 5 * S) == pytest.approx(300.0)  # it read 0 J before
    assert _energy(integrals, T0, T0 + 7 * S) == pytest.approx(700.0)
    assert integrals.method(np.ones(70, bool)) == "mixed"
    assert (
        not integrals.counter[20:50].any() and integrals.counter[:20].all() and integrals.counter[50:].all()
    )


def test_a_counter_served_between_collections_is_spread_over_the_stretch_it_covers() -> None:
    """dcgm-exporter's default: values collected every 30 s, scraped every 1 s. Power and counter are both
    re-served; each collection's ΔE covers the 30 s before it."""
    block_w = [300.0, 120.0, 450.0]
    power, energy, counted = [], [], 1e6
    for k in range(91):
        if k and k % 30 == 0:
            counted += block_w[(k - 1) // 30] * 30.0  # the collection at k: the 30 s before it
        power.append(block_w[min(k // 30, 2)])
        energy.append(counted)
    integrals = Integrals.build(_track(power, energy, 1.0), 0.5)
    stats = scope_stats(integrals, union([(T0, T0 + 90 * S)]))
    assert stats.implausible == 0  # the 30 s jump in one 1 s step was 9 000 W: rejected, its energy lost
    assert stats.energy_j == pytest.approx((300.0 + 120.0 + 450.0) * 30.0)
    assert stats.gated_mean_w == pytest.approx(290.0)
    assert integrals.method(np.ones(90, bool)) == "counter"
    starts = np.array([T0 + 5 * S, T0 + 40 * S], dtype=np.int64)
    windows = window_stats(integrals, starts, starts + 10 * S)
    assert windows.gated_mean_w == pytest.approx([300.0, 120.0])  # they read 0 W before
    assert resolution_s(_track(power, energy, 1.0)) == pytest.approx(30.0)  # the collection's, not 1 s


def test_a_counter_that_moves_less_often_than_the_samples_but_within_a_second_is_left_as_it_reads() -> None:
    """GB10 at 10 Hz with a counter that moves every 200 ms: 0 W, then twice the power, exact in sum."""
    energy = [100.0 + 40.0 * (k // 2) for k in range(41)]
    integrals = Integrals.build(_track([200.0] * 41, energy, 0.1), 0.5)
    assert integrals.power_w[:4].tolist() == pytest.approx([0.0, 400.0, 0.0, 400.0])
    assert integrals.method(np.ones(40, bool)) == "counter"
    assert _energy(integrals, T0, T0 + 4 * S) == pytest.approx(800.0)
    assert resolution_s(_track([200.0] * 41, energy, 0.1)) == pytest.approx(0.2)
    assert resolution_s(_track([200.0] * 41, [float(k) for k in range(41)], 0.1)) == pytest.approx(0.1)
    assert resolution_s(_track([200.0] * 41, [None] * 41, 0.1)) == pytest.approx(0.1)  # no counter


@pytest.mark.parametrize(
    ("power_w", "why"),
    [(0.4, "a rail at rest moves a mJ counter too little to tell"), (float("nan"), "no readings")],
)
def test_a_still_counter_is_kept_without_readings_that_say_otherwise(power_w: float, why: str) -> None:
    n = int(3 * HELD_COUNTER_S / 0.1) + 1
    integrals = Integrals.build(_track([power_w] * n, [7.0] * n, 0.1), 0.5)
    assert integrals.power_w.tolist() == pytest.approx([0.0] * (n - 1)), why
    assert integrals.counter.all()


def test_a_stretch_held_across_a_boot_or_a_gap_is_two_stretches() -> None:
    """Stretches never join across a gap: each half is under a second and read as the counter says."""
    points = [GpuPoint(T0 + k * S // 10, 0, 0.1, 100.0, 50.0, 1.0) for k in range(8)]
    points += [GpuPoint(T0 + S + k * S // 10, 1, 0.1, 100.0, 50.0, 1.0) for k in range(8)]  # new boot
    integrals = Integrals.build(GpuTrack.from_points(points), 0.5)
    assert integrals.counter[integrals.valid].all() and np.nansum(integrals.power_w) == 0.0
