"""Putting samples on the coordinator's clock: probe rounds, the monotonic fit, steps, disagreements."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core import clock
from sparkwatch.core.clock import (
    STEP_MIN_NS,
    STEP_RATE,
    ClockOffset,
    ClockStep,
    NodeClock,
    OffsetRound,
    TimeProbe,
    estimate_offset,
    fit_monotonic,
    wall_steps,
)

S = 1_000_000_000
T0 = 1_800_000_000 * S
BOOT_MONO = 5_000 * S  # the agent booted 5000 s before T0 on the coordinator's clock


def rounds(
    drift_ppm: float, every_s: float = 10, count: int = 37, noise_ns: int = 0, seed: int = 0
) -> list[OffsetRound]:
    """Rounds of an agent whose monotonic clock runs ``drift_ppm`` slow: coordinator = mono·(1+drift) + c."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        t = T0 + int(k * every_s * S)
        mono = int((t - T0) / (1 + drift_ppm * 1e-6)) + BOOT_MONO
        jitter = int(rng.integers(-noise_ns, noise_ns + 1)) if noise_ns else 0
        out.append(OffsetRound(t, offset_ns=0, uncertainty_ns=200_000, mono_offset_ns=t - mono + jitter))
    return out


def test_probe_round_gives_wall_and_monotonic_offsets() -> None:
    probes = [
        TimeProbe(T0 + k, T0 + k + 500 - 3 * S, T0 + k + 1000, t_agent_mono_ns=k + 500) for k in range(6)
    ]
    est = estimate_offset(probes)
    assert est.offset_ns == 3 * S and est.mono_offset_ns == T0 and est.uncertainty_ns == 500
    legacy = estimate_offset([TimeProbe(T0, T0, T0 + 10)])  # an agent that sends no monotonic time
    assert legacy.mono_offset_ns is None


def test_fit_follows_drift_and_maps_to_the_nanosecond() -> None:
    fit = fit_monotonic(rounds(drift_ppm=50))  # 50 ppm: 18 ms an hour
    assert fit is not None and fit.rate == pytest.approx(50e-6, rel=1e-3) and fit.disagreements == ()
    t = T0 + 6 * 60 * S  # 6 minutes in: 18 ms of drift, mapped back within a microsecond
    mono = np.array([int((t - T0) / (1 + 50e-6)) + BOOT_MONO], dtype=np.int64)
    # (the rate prior draws 50 ppm in by ~1e-5 of itself here: ~90 ns at 3 minutes from the middle round)
    assert abs(int(fit.to_coordinator(mono)[0]) - t) < 1_000
    line = int(mono[0]) + fit.offset_ns + round(fit.rate * (int(mono[0]) - fit.anchor_mono_ns))
    assert abs(int(fit.to_coordinator(mono)[0]) - line) <= 1  # int64 all the way: no 256 ns float steps
    assert abs(fit.to_mono(line) - int(mono[0])) <= 1


def test_two_noisy_rounds_of_a_short_run_are_not_read_as_drift() -> None:
    """Two rounds 10 s apart, each ±25 ms (probes queued on a loaded machine), 50 ms apart: a line through
    them ran at 5000 ppm and scaled every duration (and mean power) of the run by 0.5 %."""
    mono0 = BOOT_MONO
    noisy = [
        OffsetRound(T0, 0, 25_000_000, mono_offset_ns=T0 - mono0 - 25_000_000),
        OffsetRound(T0 + 10 * S, 0, 25_000_000, mono_offset_ns=T0 - mono0 + 25_000_000),
    ]
    fit = fit_monotonic(noisy)
    assert fit is not None and abs(fit.rate) < 1e-5, fit.rate  # the line through them: 5e-3
    assert fit.offset_ns == pytest.approx(T0 - mono0, abs=100_000)  # the rounds' mean, all but flat
    # the same two rounds with precise probes (±0.2 ms) are believed: the rate is kept nearly whole
    precise = fit_monotonic([OffsetRound(r.t_ns, 0, 200_000, r.mono_offset_ns) for r in noisy])
    assert precise is not None and precise.rate == pytest.approx(5e-3, rel=0.1)


def test_a_real_fast_drift_over_minutes_is_followed() -> None:
    fit = fit_monotonic(rounds(drift_ppm=500, count=7))  # a minute of rounds at NTP's fastest slew
    assert fit is not None and fit.rate == pytest.approx(500e-6, rel=0.01)


@settings(max_examples=60, deadline=None)
@given(
    drift_ppm=st.floats(-200, 200),
    noise_ns=st.integers(0, 150_000),
    count=st.integers(1, 40),
    seed=st.integers(0, 1000),
)
def test_fit_error_stays_within_the_round_uncertainty(
    drift_ppm: float, noise_ns: int, count: int, seed: int
) -> None:
    probe_rounds = rounds(drift_ppm, count=count, noise_ns=noise_ns, seed=seed)
    fit = fit_monotonic(probe_rounds)
    assert fit is not None
    for r in probe_rounds:  # at every round the line lies within the round's own uncertainty of the truth
        assert r.mono_offset_ns is not None
        mono = np.array([r.t_ns - r.mono_offset_ns], dtype=np.int64)
        truth = T0 + round((int(mono[0]) - BOOT_MONO) * (1 + drift_ppm * 1e-6))
        assert (
            abs(int(fit.to_coordinator(mono)[0]) - truth) <= 2 * max(noise_ns, 1_000) + 2 * r.uncertainty_ns
        )


def test_a_round_that_misses_the_line_is_left_out_and_reported() -> None:
    probe_rounds = rounds(drift_ppm=0)
    bad = probe_rounds[20]
    probe_rounds[20] = OffsetRound(bad.t_ns, 0, 200_000, (bad.mono_offset_ns or 0) + 30_000_000)  # 30 ms off
    fit = fit_monotonic(probe_rounds)
    assert (
        fit is not None
        and fit.rounds_used == len(probe_rounds) - 1
        and fit.rate == pytest.approx(0, abs=1e-9)
    )
    (disagreement,) = fit.disagreements
    assert disagreement.t_ns == bad.t_ns and disagreement.residual_ns == pytest.approx(30_000_000, abs=10)
    clock = NodeClock(ClockOffset(0, 200_000, 8, 8), "monotonic", 0.0, disagreements=fit.disagreements)
    assert clock.suspects(bad.t_ns - 5 * S, bad.t_ns - 4 * S) == [
        "clock probes disagree by +30.00 ms (allowed 0.40 ms)"
    ]
    assert clock.suspects(bad.t_ns + 20 * S, bad.t_ns + 21 * S) == []  # a probe period away: fine


def test_no_monotonic_offset_no_fit() -> None:
    assert fit_monotonic([OffsetRound(T0, 5, 100)]) is None
    one = fit_monotonic([OffsetRound(T0, 5, 100, mono_offset_ns=T0 - BOOT_MONO)])
    assert one is not None and one.rate == 0.0 and one.rounds_used == 1


@pytest.mark.parametrize("size_s", [-20, -1, 1, 20])
def test_wall_steps_are_found_and_slewing_is_not(size_s: int) -> None:
    mono = BOOT_MONO + np.arange(200, dtype=np.int64) * (S // 10)
    wall = T0 + (mono - BOOT_MONO) + (np.arange(200) * 2_000).astype(np.int64)  # slewing at 20 ppm
    wall[120:] += size_s * S
    coord = T0 + (mono - BOOT_MONO)
    (step,) = wall_steps(wall, mono, coord)
    assert step.t_ns == int(coord[120]) and step.size_ns == size_s * S + 2_000
    assert wall_steps(wall[:120], mono[:120], coord[:120]) == []
    clock = NodeClock(None, "monotonic", 0.0, steps=(step,))
    assert clock.suspects(int(coord[110]), int(coord[130])) == [
        f"wall clock stepped {(size_s * S + 2_000) / S:+.3f} s inside the window"
    ]
    assert clock.suspects(int(coord[130]), int(coord[140])) == []


def test_a_sample_whose_clock_reads_were_split_by_preemption_is_no_step() -> None:
    """A sampler preempted 15 ms between reading its wall and its monotonic clock makes one sample's
    wall − mono 15 ms off and the next one right again: not a step (a loaded machine did this in tests);
    a step at the very last sample still is one."""
    mono = BOOT_MONO + np.arange(100, dtype=np.int64) * (S // 20)
    wall = T0 + (mono - BOOT_MONO)
    coord = wall.copy()
    wall[40] -= 15_000_000
    wall[41] += 12_000_000
    wall[70] += 20_000_000
    assert wall_steps(wall, mono, coord) == []
    wall[99] += S
    assert wall_steps(wall, mono, coord) == [ClockStep(int(coord[99]), S)]


def test_one_time_maps_like_many() -> None:
    fit = fit_monotonic(rounds(drift_ppm=-80))
    assert fit is not None
    monos = BOOT_MONO + np.array([0, 7 * S, 333 * S + 17], dtype=np.int64)
    assert [fit.at(int(m)) for m in monos] == fit.to_coordinator(monos).tolist()


def _steps_whole(wall: np.ndarray, mono: np.ndarray, coord: np.ndarray) -> list[ClockStep]:
    """wall_steps as one pass over the whole columns (what it computed before it took slices)."""
    if len(mono) < 2:
        return []
    apart = wall - mono
    smooth = apart.copy()
    if len(apart) >= 3:
        smooth[1:-1] = np.sort(np.stack([apart[:-2], apart[1:-1], apart[2:]]), axis=0)[1]
    lasting = np.diff(smooth)
    limit = np.maximum(STEP_MIN_NS, (np.diff(mono) * STEP_RATE).astype(np.int64))
    jump = np.diff(apart)
    return [ClockStep(int(coord[i + 1]), int(jump[i])) for i in np.flatnonzero(np.abs(lasting) > limit)]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 7),
    st.lists(st.sampled_from([0, 0, 0, 15_000_000, -12_000_000, S, -S]), min_size=0, max_size=40),
)
def test_slices_find_the_steps_one_pass_finds(slice_samples: int, jumps: list[int]) -> None:
    """Steps and blips at every position against every slice boundary: the same steps, in order, and the
    same coordinator times."""
    mono = BOOT_MONO + np.arange(len(jumps), dtype=np.int64) * (S // 10)
    wall = T0 + (mono - BOOT_MONO) + np.cumsum(np.array(jumps, dtype=np.int64))
    wall[1::5] += 14_000_000  # a preempted read now and then
    coord = T0 + (mono - BOOT_MONO) + 3
    fit = fit_monotonic(rounds(drift_ppm=-80))
    assert fit is not None
    whole = mono + np.int64(fit.offset_ns) + np.round(fit.rate * (mono - fit.anchor_mono_ns)).astype(np.int64)
    with patch.object(clock, "SLICE_SAMPLES", slice_samples):
        assert wall_steps(wall, mono, coord) == _steps_whole(wall, mono, coord)
        assert fit.to_coordinator(mono).tolist() == whole.tolist() == [fit.at(int(m)) for m in mono]
