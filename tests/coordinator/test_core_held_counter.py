"""An energy counter that stands still while the device draws (core/held_counter.py): a counter that stopped
counting read 0 W, and one re-served between collections (dcgm-exporter collects every 30 s by default; a
1 s scrape reads one value 30 times, then the jump) read 0 W for 29 s and then a step no GPU can draw,
rejected, so its energy was lost and the gated mean came out near zero."""

from __future__ import annotations

import numpy as np
import pytest

from sparkwatch.core.export_nodes import resolution_s
from sparkwatch.core.held_counter import HELD_COUNTER_S
from sparkwatch.core.integrals import Integrals
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


def _energy(integrals: Integrals, a_s: float, b_s: float) -> float:
    return scope_stats(integrals, union([(T0 + round(a_s * S), T0 + round(b_s * S))])).energy_j or 0.0


def _collected(average_w: list[float], reported_w: list[float], first_s: int = 10) -> tuple[list, list]:
    """A 1 s scrape of a dcgm-exporter collecting every 30 s: collection k (at 30 k s, k ≥ 1) serves the
    energy counter after block k−1 (which drew ``average_w[k-1]`` on average) and the power it read then,
    ``reported_w[k]``; the track starts ``first_s`` s before the first collection it sees."""
    power, energy = [], []
    for t in range(30 - first_s, 30 * len(average_w) + 1):
        k = t // 30
        energy.append(1e6 + 30.0 * sum(average_w[:k]))
        power.append(reported_w[min(k, len(reported_w) - 1)])
    return power, energy


def test_a_counter_that_stops_counting_falls_back_to_the_readings() -> None:
    """10 Hz, 100 W: the counter moves for 2 s, stands still for 3 s (no catch-up), then moves again."""
    energy, counted = [], 5000.0
    for k in range(71):
        if k and not 20 <= k - 1 < 50:
            counted += 10.0
        energy.append(counted)
    integrals = Integrals.build(_track([100.0] * 71, energy, 0.1), 0.5)
    assert _energy(integrals, 2, 5) == pytest.approx(300.0)  # it read 0 J before
    assert _energy(integrals, 0, 7) == pytest.approx(700.0)
    assert integrals.method(np.ones(70, bool)) == "mixed"
    assert (
        not integrals.counter[20:50].any() and integrals.counter[:20].all() and integrals.counter[50:].all()
    )


def test_a_stuck_counter_with_a_reading_missing_is_still_mended_around_it() -> None:
    """Live readings (they vary) while the counter stands still to the track's end: the trapezoid, and the
    missing reading's two intervals are gaps."""
    energy = [5000.0 + 10.0 * min(k, 20) for k in range(51)]  # moves for 2 s, then stuck for good
    power = [100.0 + (k % 3) for k in range(51)]
    power[30] = float("nan")
    integrals = Integrals.build(_track(power, energy, 0.1), 0.5)
    stats = scope_stats(integrals, union([(T0 + 2 * S, T0 + 5 * S)]))
    assert stats.covered_s == pytest.approx(2.8) and stats.implausible == 0
    assert stats.energy_j == pytest.approx(101.0 * 2.8, rel=0.01)


def test_a_collection_whose_catch_up_is_not_seen_is_a_gap_and_a_missing_reading_changes_nothing() -> None:
    """The track ends (or a gap comes) before a collection's catch-up: its readings are as old as its
    counter, so it is unknown, as at the track's start. A reading missing inside a collection does not make
    its readings live."""
    power, energy = _collected([300.0, 120.0, 450.0], [310.0, 300.0, 120.0, 450.0])
    cut = Integrals.build(_track(power[:-5], energy[:-5], 1.0), 0.5)  # the last collection's catch-up unseen
    assert scope_stats(cut, union([(T0 + 40 * S, T0 + 70 * S)])).covered_s == 0.0
    assert _energy(cut, 10, 40) == pytest.approx(30.0 * 120.0)
    power[45] = float(
        "nan"
    )  # inside the collection that drew 450 W and re-serves the 120 W read at its start
    integrals = Integrals.build(_track(power, energy, 1.0), 0.5)
    assert _energy(integrals, 40, 70) == pytest.approx(30.0 * 450.0)
    assert scope_stats(integrals, union([(T0 + 40 * S, T0 + 70 * S)])).implausible == 0


def test_a_counter_served_between_collections_is_spread_over_the_collection_it_covers() -> None:
    """The collections' power readings are those read at each collection, re-served; each collection's ΔE
    covers the 30 s before it. The first stretch is seen only from 10 s before the first collection."""
    average = [300.0, 300.0, 120.0, 450.0]
    power, energy = _collected(average, [310.0, 300.0, 300.0, 120.0, 450.0])
    integrals = Integrals.build(_track(power, energy, 1.0), 0.5)
    stats = scope_stats(integrals, union([(T0 + 10 * S, T0 + 100 * S)]))  # the collections seen whole
    assert stats.implausible == 0  # the 30 s jump in one 1 s step was 9 000 W: rejected, its energy lost
    assert stats.energy_j == pytest.approx(30.0 * (300.0 + 120.0 + 450.0))
    assert stats.gated_mean_w == pytest.approx(290.0)
    assert integrals.method(np.ones(len(integrals.dt_s), bool)) == "counter"
    first = scope_stats(integrals, union([(T0, T0 + 10 * S)]))  # seen in part: not 9 000 J in 10 s
    assert first.energy_j is None and first.covered_s == 0.0 and first.implausible == 0  # a gap
    starts = np.array([T0 + 15 * S, T0 + 50 * S], dtype=np.int64)
    windows = window_stats(integrals, starts, starts + 10 * S)
    assert windows.gated_mean_w == pytest.approx([300.0, 120.0])  # they read 0 W before
    assert resolution_s(_track(power, energy, 1.0))[0] == pytest.approx(30.0)  # the collection's, not 1 s
    served, _ = _collected(average, [310.0, 300.0, 290.0, 120.0, 450.0])  # each collection's own reading
    no_counter = _track(served, [None] * len(served), 1.0)  # re-served, with no counter beside them
    assert resolution_s(no_counter) == (pytest.approx(30.0), pytest.approx(30.0))


def test_a_load_drop_inside_a_collection_is_counted_once() -> None:
    """600 W read at a collection, then the GPU drops to 60 W: the re-served 600 W readings say far more
    than the counter's advance, which is still the collection's whole energy, not a counter resuming."""
    power, energy = _collected([600.0, 78.0, 60.0], [600.0, 600.0, 60.0, 60.0])
    integrals = Integrals.build(_track(power, energy, 1.0), 0.5)
    assert _energy(integrals, 10, 70) == pytest.approx(30.0 * (78.0 + 60.0))
    assert scope_stats(integrals, union([(T0 + 10 * S, T0 + 70 * S)])).implausible == 0
    # the same at the track's start: its first collection seen in part is a gap, not 600 W for 10 s
    power, energy = _collected([78.0, 60.0], [600.0, 60.0, 60.0])
    integrals = Integrals.build(_track(power, energy, 1.0), 0.5)
    assert scope_stats(integrals, union([(T0, T0 + 10 * S)])).covered_s == 0.0
    assert _energy(integrals, 10, 40) == pytest.approx(30.0 * 60.0)


def test_a_stuck_counter_seen_in_part_and_its_catch_up_take_the_live_readings() -> None:
    """The counter stands still from before the track begins; the readings are live (they vary): the
    catch-up's advance covers time before the track, so neither it nor the stretch is the counter's."""
    power = [100.0 + (k % 3) for k in range(31)]
    energy = [500.0] * 21 + [500.0 + 400.0 + 10.0 * k for k in range(10)]  # a 400 J catch-up at step 20
    integrals = Integrals.build(_track(power, energy, 0.1), 0.5)
    assert not integrals.counter[:21].any() and integrals.counter[21:].all()
    assert _energy(integrals, 0, 2.1) == pytest.approx(float(np.sum(integrals.power_w[:21]) * 0.1))
    assert 200.0 < _energy(integrals, 0, 2.1) < 220.0  # the readings' ~101 W, not the 400 J squeezed in


def test_a_stuck_counter_beside_a_sensor_as_still_is_not_taken_for_a_collection() -> None:
    """Constant readings that change where the counter resumes, or one missing there, are no collection:
    the counter resumes at one step's worth, not several, so the stretch takes the readings."""
    energy = [1e6 + 200.0 * (k if k <= 10 else max(10, k - 10)) for k in range(31)]  # stuck for 10 s
    for power in ([200.0] * 21 + [201.0] * 10, [200.0] * 21 + [float("nan")] + [200.0] * 9):
        integrals = Integrals.build(_track(power, energy, 1.0), 0.5)
        assert _energy(integrals, 10, 20) == pytest.approx(2000.0)


def test_a_counter_that_moves_every_other_sample_is_spread_over_its_moves() -> None:
    """10 Hz samples of a counter that moves every 200 ms: it read 0 W, then twice the power. Each move's
    advance now covers the time since the one before; before the first move the advance is not known."""
    energy = [100.0 + 40.0 * (k // 2) for k in range(41)]
    integrals = Integrals.build(_track([200.0] * 41, energy, 0.1), 0.5)
    assert np.isnan(integrals.power_w[:2]).all() and integrals.power_w[2:].tolist() == pytest.approx(
        [200.0] * 38
    )
    assert integrals.method(np.ones(40, bool)) == "counter"
    assert _energy(integrals, 0.2, 4) == pytest.approx(760.0)
    assert resolution_s(_track([200.0] * 41, energy, 0.1))[0] == pytest.approx(0.2)
    assert resolution_s(_track([200.0] * 41, [float(k) for k in range(41)], 0.1))[0] == pytest.approx(0.1)
    aliased = [float(k - (k % 50 == 49)) for k in range(41 * 5)]  # now and then a tick lands one sample late
    assert resolution_s(_track([200.0] * len(aliased), aliased, 0.1))[0] == pytest.approx(0.1)
    assert resolution_s(_track([200.0] * 41, [None] * 41, 0.1))[0] == pytest.approx(0.1)  # no counter


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


def _scraped(
    average_w: list[float], reported_w: list[float], scrape_s: int, start_s: int
) -> tuple[list, list]:
    """Scrapes every ``scrape_s`` from ``start_s`` of 30 s collections (as ``_collected``): collection k
    serves the counter after blocks < k and the reading ``reported_w[k]``."""
    power, energy = [], []
    for t in range(start_s, 30 * len(average_w) + 1, scrape_s):
        k = t // 30
        energy.append(1e6 + 30.0 * sum(average_w[:k]))
        power.append(reported_w[min(k, len(reported_w) - 1)])
    return power, energy


@pytest.mark.parametrize("scrape_s", [1, 5, 15])
def test_collections_at_any_scrape_interval_keep_their_energy_whatever_the_reading_said(
    scrape_s: int,
) -> None:
    """A 600 W reading, then the GPU at 60 W for most of the collection: the stale readings never stand for
    the power (they made 9-15 kJ of it at 5 s and 15 s scrapes); a counter value missing in between costs
    nothing; the collection before the first move, seen from 15 s before its end, is a gap."""
    power, energy = _scraped([300.0, 78.0, 60.0, 60.0], [300.0, 600.0, 60.0, 60.0, 60.0], scrape_s, 15)
    energy[len(energy) // 2] = float("nan")
    integrals = Integrals.build(_track(power, energy, float(scrape_s)), 0.5)
    start = 15 // scrape_s * scrape_s  # the track's own first sample is at its t=0: 15 s here
    stats = scope_stats(integrals, union([(T0 + (30 - 15) * S, T0 + (120 - 15) * S)]))
    assert stats.energy_j == pytest.approx(30.0 * (78.0 + 60.0 + 60.0)) and stats.implausible == 0
    assert scope_stats(integrals, union([(T0, T0 + (30 - start) * S)])).covered_s == 0.0


def test_a_stuck_counter_without_readings_is_judged_by_what_the_counter_usually_says() -> None:
    """A node domain's accumulator stuck for 10 s (no power readings) and then caught up: spread, not
    0 W and a step of 200 kW rejected as implausible."""
    energy = [1e5 + 200.0 * min(k, 50) + (20_000.0 if k >= 151 else 0.0) + 200.0 * max(0, k - 151)
              for k in range(201)]  # fmt: skip
    integrals = Integrals.build(_track([float("nan")] * 201, energy, 0.1), 0.5, 20_000.0)
    stats = scope_stats(integrals, union([(T0, T0 + 20 * S)]))
    assert stats.energy_j == pytest.approx(energy[-1] - energy[0]) and stats.implausible == 0
    assert stats.covered_s == pytest.approx(20.0)


def test_a_sampling_gap_inside_a_collection_costs_nothing_and_a_lost_move_costs_its_span() -> None:
    """Missed scrapes (5 s, over the 3-scrape gap limit) inside a collection: the counter reads the same on
    both sides, so no collection fell in the gap and the scrapes it lost would have read the one the others
    read: the collection's advance covers it too (it was a gap, 6 s short of the 30). An outage that hides
    a move leaves the spans it bounds unknown: where the move fell is not known."""
    average = [300.0, 120.0, 450.0, 200.0, 200.0]
    power, energy = _scraped(average, [310.0, 300.0, 120.0, 450.0, 200.0, 200.0], 1, 0)
    kept = [t for t in range(len(power)) if not 40 <= t < 45]
    track = GpuTrack.from_points(GpuPoint(T0 + t * S, 0, 1.0, power[t], energy[t], 1.0) for t in kept)
    integrals = Integrals.build(track, 0.5)
    stats = scope_stats(integrals, union([(T0 + 30 * S, T0 + 60 * S)]))
    assert stats.covered_s == pytest.approx(30.0) and stats.energy_j == pytest.approx(120.0 * 30.0)
    assert stats.gated_mean_w == pytest.approx(120.0)
    outage = [t for t in range(len(power)) if not 35 <= t < 95]  # the moves at 60 and 90 are not seen
    track = GpuTrack.from_points(GpuPoint(T0 + t * S, 0, 1.0, power[t], energy[t], 1.0) for t in outage)
    after = Integrals.build(track, 0.5)
    # the move first seen at 95 fell somewhere in the outage: neither span it bounds is known (95..120
    # read 240 W for 200 W, the collection's 30 s of energy over the 25 s seen)
    assert scope_stats(after, union([(T0 + 30 * S, T0 + 120 * S)])).covered_s == 0.0
    back = scope_stats(after, union([(T0 + 120 * S, T0 + 150 * S)]))
    assert back.covered_s == pytest.approx(30.0) and back.energy_j == pytest.approx(200.0 * 30.0)


def test_a_move_seen_after_the_counter_went_unseen_is_late_and_a_gap_it_was_not_read_across_stays() -> None:
    """Collections every 10 s at 100 W, scraped every 1 s: the scrapes from 34 s to 39 s are lost, and the
    counter is missing from 40 s to 48 s (the power still read). The collection at 40 s is first seen at
    49 s: it fell somewhere after 33 s, so neither span it bounds is known (the 1 s from 49 s to the
    next collection at 50 s took its 10 s of energy: 1 000 W), and the gap, with no counter read at its
    end, may hold a collection: it stays a gap."""
    kept = [t for t in range(71) if not 34 <= t <= 39]
    energy = [float("nan") if 40 <= t <= 48 else 1e6 + 1000.0 * (t // 10) for t in kept]
    track = GpuTrack.from_points(
        GpuPoint(T0 + t * S, 0, 1.0, 100.0, e, 1.0) for t, e in zip(kept, energy, strict=True)
    )
    integrals = Integrals.build(track, 0.5)
    assert np.nanmax(integrals.power_w) == pytest.approx(100.0)
    assert scope_stats(integrals, union([(T0 + 30 * S, T0 + 50 * S)])).covered_s == 0.0
    around = scope_stats(integrals, union([(T0 + 10 * S, T0 + 70 * S)]))
    assert around.covered_s == pytest.approx(40.0) and around.energy_j == pytest.approx(4000.0)


def test_steady_readings_with_no_counter_are_no_coarse_collection() -> None:
    """nvidia_gpu_exporter scraped every 1 s (no energy counter), a GPU that holds 20 W and 100 W for
    seconds at a time, stepping at 10, 40, 45 and 60 s: its readings move four times, at no rhythm, and
    that was read as a 15 s collection, so every window was too short for it (a sweep). It is the 1 s
    scrape's; readings moving once a collection at a rhythm still read as the collection's (above)."""
    steps = {10: 100.0, 40: 20.0, 45: 100.0, 60: 20.0}
    power, level = [], 20.0
    for t in range(90):
        level = steps.get(t, level)
        power.append(level)
    assert resolution_s(_track(power, [None] * 90, 1.0)) == (pytest.approx(1.0), None)
    rhythm = [20.0 + 5.0 * ((t // 5) % 2) for t in range(90)]  # a reading collected every 5 s, re-served
    assert resolution_s(_track(rhythm, [None] * 90, 1.0)) == (pytest.approx(5.0), pytest.approx(5.0))
    two_moves = [20.0] * 30 + [100.0] * 30 + [20.0] * 30  # two moves, one spacing: no rhythm to go by
    assert resolution_s(_track(two_moves, [None] * 90, 1.0)) == (pytest.approx(1.0), None)
    # an idle GPU behind a caching exporter: some 30 s collections read what the one before did, so its
    # readings move 30, 60 or 90 s apart, on the collections' beat all the same
    held = [100.0, 101.0, 101.0, 102.0, 103.0, 103.0, 103.0, 104.0]
    idle = [value for value in held for _ in range(30)]
    assert resolution_s(_track(idle, [None] * len(idle), 1.0)) == (pytest.approx(30.0), pytest.approx(30.0))
    # a run that holds three of the collections' moves (two spacings): read over the whole read, as a
    # counter's are for a run that holds fewer than three
    busy = [float(k) for k in range(12) for _ in range(30)]
    run = (T0 + 100 * S, T0 + 195 * S)
    assert resolution_s(_track(busy, [None] * len(busy), 1.0), run) == (
        pytest.approx(30.0),
        pytest.approx(30.0),
    )
