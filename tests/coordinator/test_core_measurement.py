"""The pure measurement core: clock offsets, scopes, interval power, gating, joins — with property tests."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core.clock import TimeProbe, estimate_offset
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.power import scope_stats, summed_max_w, window_stats
from sparkwatch.core.tracks import GpuPoint, GpuTrack
from sparkwatch.core.windows import Window, scope_for, union

S = 1_000_000_000
T0 = 1_800_000_000 * S


def constant_track(
    power_w: float,
    n: int,
    *,
    interval_s: float = 0.1,
    util: float = 1.0,
    counter: bool = True,
    start: int = T0,
) -> GpuTrack:
    step = int(interval_s * S)
    return GpuTrack.from_points(
        GpuPoint(
            t_ns=start + k * step,
            segment=0,
            interval_s=interval_s,
            power_w=power_w,
            energy_j=1000.0 + power_w * k * interval_s if counter else None,
            util_ratio=util,
        )
        for k in range(n)
    )


# ---- clock -----------------------------------------------------------------------------------------
def test_offset_from_symmetric_round_trips() -> None:
    # agent clock runs 5 s behind: agent time = coordinator time - 5 s
    probes = [TimeProbe(t, t + 1000 - 5 * S, t + 2000) for t in range(T0, T0 + 10 * S, S)]
    est = estimate_offset(probes)
    assert est.offset_ns == 5 * S and est.uncertainty_ns == 1000


def test_offset_prefers_the_smallest_round_trips() -> None:
    good = [TimeProbe(T0 + k, T0 + k + 50 - 3 * S, T0 + k + 100) for k in range(5)]
    # slow probes whose reply was queued: their midpoint is off by up to half their round trip
    slow = [TimeProbe(T0 + k, T0 + k + 100 - 3 * S, T0 + k + 40_000_000) for k in range(5)]
    est = estimate_offset(good + slow)
    assert est.offset_ns == 3 * S and est.uncertainty_ns == 50 and est.probes_used == 5


def test_offset_needs_a_probe() -> None:
    with pytest.raises(ValueError):
        estimate_offset([])


# ---- scopes ----------------------------------------------------------------------------------------
def test_union_merges_overlaps_and_drops_empty() -> None:
    scope = union([(10, 20), (15, 30), (40, 50), (60, 60), (45, 47)])
    assert scope.to_json() == [[10, 30], [40, 50]]
    assert scope.contains(np.array([9, 10, 29, 30, 45], dtype=np.int64)).tolist() == [
        False,
        True,
        True,
        False,
        True,
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)), max_size=6),
    st.lists(st.tuples(st.integers(0, 130), st.integers(0, 30)), min_size=1, max_size=8),
)
def test_an_interval_overlaps_a_scope_when_they_share_time(
    spans: list[tuple[int, int]], intervals: list[tuple[int, int]]
) -> None:
    scope = union([(a, a + n) for a, n in spans])
    a = np.array([x for x, _ in intervals], dtype=np.int64)
    b = a + np.array([n for _, n in intervals], dtype=np.int64)
    expected = [any(s < hi and e > lo for s, e in scope.to_json()) for lo, hi in zip(a, b, strict=True)]
    assert scope.overlaps(a, b).tolist() == expected


def test_scope_kinds_and_warmup_exclusion() -> None:
    windows = [
        Window("w", "warmup", T0, T0 + 5 * S, t_first_token_ns=T0 + S, t_last_token_ns=T0 + 4 * S),
        Window(
            "a", "timed", T0 + 10 * S, T0 + 20 * S, t_first_token_ns=T0 + 11 * S, t_last_token_ns=T0 + 19 * S
        ),
    ]
    assert scope_for(windows, "request", (T0, T0 + 30 * S)).seconds == 10
    assert scope_for(windows, "decode", (T0, T0 + 30 * S)).seconds == 8
    assert scope_for(windows, "run", (T0, T0 + 30 * S)).seconds == 30
    assert scope_for(windows, "request", (T0, T0 + 30 * S), frozenset({"timed", "warmup"})).seconds == 15


# ---- interval power, integration, gate -------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(
    power=st.floats(0.5, 1000),
    counter=st.booleans(),
    a_off=st.integers(0, 40),
    length=st.integers(1, 50),
)
def test_constant_power_integrates_exactly(power: float, counter: bool, a_off: int, length: int) -> None:
    track = constant_track(power, 100, counter=counter)  # covers [T0, T0 + 9.9 s]
    integrals = Integrals.build(track, 0.5)
    a = T0 + a_off * S // 10
    b = a + length * S // 10
    stats = scope_stats(integrals, union([(a, b)]))
    covered = (min(b, T0 + 99 * S // 10) - a) / S
    assert stats.covered_s == pytest.approx(covered, abs=1e-9)
    assert stats.energy_j == pytest.approx(power * covered, rel=1e-9)
    assert stats.gated_mean_w == pytest.approx(power, rel=1e-9)
    assert stats.method == ("counter" if counter else "trapezoid")


@settings(max_examples=40, deadline=None)
@given(
    powers=st.lists(st.floats(1, 500), min_size=5, max_size=60),
    utils=st.lists(st.floats(0, 1), min_size=60, max_size=60),
    seed=st.integers(0, 2**32 - 1),
)
def test_sample_order_does_not_matter(powers: list[float], utils: list[float], seed: int) -> None:
    points = [GpuPoint(T0 + k * S // 10, 0, 0.1, p, None, utils[k]) for k, p in enumerate(powers)]
    shuffled = points[:]
    random.Random(seed).shuffle(shuffled)
    scope = union([(T0, T0 + len(powers) * S // 10)])
    a = scope_stats(Integrals.build(GpuTrack.from_points(points), 0.5), scope)
    b = scope_stats(Integrals.build(GpuTrack.from_points(shuffled), 0.5), scope)
    assert a == b


@settings(max_examples=40, deadline=None)
@given(
    powers=st.lists(st.floats(1, 500), min_size=20, max_size=80),
    utils=st.lists(st.floats(0, 1), min_size=80, max_size=80),
    cuts=st.lists(st.integers(0, 8000), min_size=4, max_size=4, unique=True),
)
def test_scope_clipping_is_additive_and_gated_time_bounded(
    powers: list[float], utils: list[float], cuts: list[int]
) -> None:
    track = GpuTrack.from_points(
        GpuPoint(T0 + k * S // 10, 0, 0.1, p, None, utils[k]) for k, p in enumerate(powers)
    )
    integrals = Integrals.build(track, 0.5)
    c = sorted(T0 + x * S // 1000 for x in cuts)
    first, second = union([(c[0], c[1])]), union([(c[2], c[3])])
    both = scope_stats(integrals, union([(c[0], c[1]), (c[2], c[3])]))
    parts = [scope_stats(integrals, s) for s in (first, second)]
    assert both.covered_s == pytest.approx(sum(p.covered_s for p in parts), abs=1e-9)
    assert (both.energy_j or 0) == pytest.approx(sum(p.energy_j or 0 for p in parts), rel=1e-9, abs=1e-9)
    assert both.gated_s <= both.covered_s + 1e-12
    assert both.gated_s + both.excluded_s == pytest.approx(both.covered_s)


def test_gate_uses_utilisation_at_interval_end() -> None:
    # 10 W while idle (util 0), 60 W while busy (util 0.9), 1 s each half, 0.1 s samples, counter present
    points, energy = [], 0.0
    for k in range(21):
        busy = k > 10
        if k:
            energy += (60.0 if busy else 10.0) * 0.1
        points.append(
            GpuPoint(T0 + k * S // 10, 0, 0.1, 60.0 if busy else 10.0, energy, 0.9 if busy else 0.0)
        )
    stats = scope_stats(Integrals.build(GpuTrack.from_points(points), 0.5), union([(T0, T0 + 2 * S)]))
    assert stats.gated_mean_w == pytest.approx(60.0)
    assert stats.gated_s == pytest.approx(1.0) and stats.excluded_s == pytest.approx(1.0)
    assert stats.mean_w == pytest.approx(35.0) and stats.max_w == pytest.approx(60.0)


def test_counter_preferred_and_reset_falls_back_to_trapezoid() -> None:
    points = [
        GpuPoint(T0, 0, 0.1, 100.0, 50.0, 1.0),
        GpuPoint(T0 + S // 10, 0, 0.1, 100.0, 52.0, 1.0),  # counter says 20 W, power field says 100 W
        GpuPoint(T0 + 2 * S // 10, 0, 0.1, 100.0, 1.0, 1.0),  # counter reset
    ]
    integrals = Integrals.build(GpuTrack.from_points(points), 0.5)
    assert integrals.power_w.tolist() == pytest.approx([20.0, 100.0])
    assert integrals.method(np.ones(2, bool)) == "mixed"


def test_long_gaps_and_boot_changes_are_never_bridged() -> None:
    points = [GpuPoint(T0 + k * S // 10, 0, 0.1, 10.0, None, 1.0) for k in range(10)]
    points += [GpuPoint(T0 + 2 * S + k * S // 10, 0, 0.1, 10.0, None, 1.0) for k in range(10)]  # 1.1 s gap
    points += [GpuPoint(T0 + 3 * S + k * S // 10, 1, 0.1, 10.0, None, 1.0) for k in range(10)]  # new boot
    integrals = Integrals.build(GpuTrack.from_points(points), 0.5)
    stats = scope_stats(integrals, union([(T0, T0 + 4 * S)]))
    assert stats.covered_s == pytest.approx(3 * 0.9)
    assert stats.max_gap_s == pytest.approx(1.1)
    assert stats.coverage_ratio == pytest.approx(2.7 / 4)


def test_window_stats_vectorised() -> None:
    integrals = Integrals.build(constant_track(40.0, 101), 0.5)
    starts = np.array([T0, T0 + 5 * S, T0 + 9 * S], dtype=np.int64)
    ends = np.array([T0 + S, T0 + 6 * S, T0 + 12 * S], dtype=np.int64)
    ws = window_stats(integrals, starts, ends)
    assert ws.energy_j == pytest.approx([40.0, 40.0, 40.0])  # the last window is 1/3 covered
    assert ws.coverage_ratio == pytest.approx([1.0, 1.0, 1 / 3])
    assert ws.gated_mean_w == pytest.approx([40.0, 40.0, 40.0])


def test_no_gated_interval_is_none_not_zero() -> None:
    stats = scope_stats(Integrals.build(constant_track(8.0, 50, util=0.1), 0.5), union([(T0, T0 + 4 * S)]))
    assert stats.gated_mean_w is None and stats.gated_s == 0 and stats.mean_w == pytest.approx(8.0)


def test_implausible_power_is_rejected_never_averaged() -> None:
    """A counter that jumps 50 kJ in 0.1 s (0.5 MW) is no GPU: the interval is a counted gap."""
    points = []
    energy = 1000.0
    for k in range(41):
        if k:
            energy += 50.0 * 0.1 + (50_000.0 if k == 20 else 0.0)
        points.append(GpuPoint(T0 + k * S // 10, 0, 0.1, 50.0, energy, 1.0))
    integrals = Integrals.build(GpuTrack.from_points(points), 0.5)
    stats = scope_stats(integrals, union([(T0, T0 + 4 * S)]))
    assert stats.implausible == 1 and stats.gated_mean_w == pytest.approx(50.0)
    assert stats.energy_j == pytest.approx(50.0 * 3.9) and stats.coverage_ratio == pytest.approx(3.9 / 4)
    starts = np.array([T0 + S, T0 + 19 * S // 10], dtype=np.int64)
    windows = window_stats(integrals, starts, starts + S // 2)
    assert windows.implausible.tolist() == [0, 1] and windows.gated_mean_w == pytest.approx([50.0, 50.0])


def test_negative_power_is_implausible_never_a_negative_energy() -> None:
    """A sensor or meter that reads below zero (a wiring or sign mistake) draws nothing: its intervals
    are counted gaps, so no mean or energy is ever negative."""
    power = {10: -84.0, 11: -84.0, 20: -5.0}  # 20: a trapezoid with 50 W would average 22.5 W
    points = [GpuPoint(T0 + k * S // 10, 0, 0.1, power.get(k, 50.0), None, 1.0) for k in range(41)]
    integrals = Integrals.build(GpuTrack.from_points(points), 0.5)
    stats = scope_stats(integrals, union([(T0, T0 + 4 * S)]))
    assert stats.implausible == 5  # every interval with a negative reading at either end
    assert stats.gated_mean_w == pytest.approx(50.0) and stats.energy_j == pytest.approx(50.0 * 3.5)
    assert stats.coverage_ratio == pytest.approx(3.5 / 4)


def _steps(powers: list[float]) -> Integrals:
    return Integrals.build(
        GpuTrack.from_points(GpuPoint(T0 + k * S // 10, 0, 0.1, p, None, 1.0) for k, p in enumerate(powers)),
        0.5,
    )


def test_a_nodes_maximum_is_what_its_gpus_drew_together_not_the_sum_of_their_maxima() -> None:
    """Two GPUs that peak at different times (500 W each, 100 W otherwise): together they never drew more
    than 600 W; the sum of their maxima said 1000 W. One GPU unknown at a time: that time does not count."""
    first = [500.0 if 10 <= k < 20 else 100.0 for k in range(41)]
    second = [500.0 if 25 <= k < 35 else 100.0 for k in range(41)]
    gpus = [_steps(first), _steps(second)]
    scope = union([(T0, T0 + 4 * S)])
    assert [scope_stats(g, scope).max_w for g in gpus] == [500.0, 500.0]
    assert summed_max_w(gpus, scope) == pytest.approx(600.0)
    assert summed_max_w(gpus[:1], scope) == 500.0
    assert summed_max_w(gpus, union([(T0 + S, T0 + S + S // 2)])) == pytest.approx(600.0)  # inside a peak
    assert summed_max_w(gpus, union([])) is None
    late = GpuTrack.from_points(
        GpuPoint(T0 + 5 * S + k * S // 10, 0, 0.1, 900.0, None, 1.0) for k in range(9)
    )
    assert summed_max_w([gpus[0], Integrals.build(late, 0.5)], scope) is None  # never both known
