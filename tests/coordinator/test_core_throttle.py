"""A window the GPU spent slowed down by heat or a power brake, or far below its maximum clock, is flagged;
a clean one is not; unknown signals flag nothing."""

from __future__ import annotations

import numpy as np

from sparkwatch.core.throttle import SignalTrack, reason_names, window_signals

S = 1_000_000_000


def track(reasons: list[int], clock_mhz: list[float], max_mhz: float | None = 3003.0) -> SignalTrack:
    n = len(reasons)
    return SignalTrack(
        t_ns=np.arange(n, dtype=np.int64) * (S // 10),
        sm_clock_hz=np.array(clock_mhz, dtype=np.float64) * 1e6,
        temperature_c=np.linspace(50, 70, n),
        reasons=np.array(reasons, dtype=np.int64),
        max_sm_clock_hz=None if max_mhz is None else max_mhz * 1e6,
    )


def windows(*spans: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([int(a * S) for a, _ in spans], dtype=np.int64),
        np.array([int(b * S) for _, b in spans], dtype=np.int64),
    )


def test_a_power_brake_over_a_tenth_of_the_window_flags_it_and_a_short_blip_does_not() -> None:
    reasons = [0] * 10 + [0x80] * 3 + [0] * 7 + [0x80] + [0] * 19
    starts, ends = windows((1.0, 2.0), (2.0, 4.0))
    braked, blip = window_signals([track(reasons, [2418.0] * 40)], starts, ends)
    assert braked["throttle"] == ["throttled:hw_power_brake (30% of the window's samples)"]
    assert braked["clock_event_reasons"] == ["hw_power_brake"]
    assert blip["throttle"] == [] and blip["clock_event_reasons"] == [
        "hw_power_brake"
    ]  # 1 of 20: seen, not flagged
    assert braked["sm_clock_hz_mean"] == 2_418_000_000 and braked["sm_clock_ratio"] == round(2418 / 3003, 3)


def test_a_gb10_held_at_700_mhz_is_flagged_by_its_clock_alone() -> None:
    starts, ends = windows((0.0, 2.0))
    (slow,) = window_signals([track([0] * 20, [700.0] * 20)], starts, ends)
    assert slow["throttle"] == ["throttled:sm_clock (mean 0.23 of the maximum, under 0.6)"]
    (fine,) = window_signals([track([0] * 20, [2418.0] * 20)], starts, ends)
    assert fine["throttle"] == [] and fine["temperature_c_max"] is not None
    (no_max,) = window_signals([track([0] * 20, [700.0] * 20, max_mhz=None)], starts, ends)
    assert no_max["throttle"] == [] and no_max["sm_clock_ratio"] is None  # no maximum: no ratio, no flag


def test_unknown_signals_are_unknown_not_clean() -> None:
    starts, ends = windows((0.0, 1.0))
    (unknown,) = window_signals([track([-1] * 10, [float("nan")] * 10)], starts, ends)
    assert unknown["clock_event_reasons"] is None and unknown["sm_clock_hz_mean"] is None
    assert unknown["throttle"] == []
    assert reason_names(0x1 | 0x800) == ["gpu_idle", "0x800"]
