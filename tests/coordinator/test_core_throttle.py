"""A window the GPU spent slowed down by heat or a power brake, or far below its maximum clock, is flagged;
a clean one is not; unknown signals flag nothing."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_an_idle_gpus_low_clock_is_not_a_slowdown_but_a_working_one_at_low_clock_is() -> None:
    """NVML marks a resting GPU ``gpu_idle`` and its clocks drop: not flagged (a warm-up before the load).
    The ratio reported is still every sample's; the flag reads the samples not marked idle, so a GPU held
    at 700 MHz while working is flagged beside idle samples, and without reasons every sample counts."""
    starts, ends = windows((0.0, 2.0))
    (idle,) = window_signals([track([0x1] * 20, [210.0] * 20)], starts, ends)
    assert idle["throttle"] == [] and idle["sm_clock_ratio"] == round(210 / 3003, 3)
    assert idle["clock_event_reasons"] == ["gpu_idle"]
    (mixed,) = window_signals([track([0x1] * 10 + [0] * 10, [210.0] * 10 + [700.0] * 10)], starts, ends)
    assert mixed["throttle"] == ["throttled:sm_clock (mean 0.23 of the maximum while not idle, under 0.6)"]
    (unknown,) = window_signals([track([-1] * 20, [210.0] * 20)], starts, ends)
    assert unknown["throttle"] == ["throttled:sm_clock (mean 0.07 of the maximum, under 0.6)"]


def test_unknown_signals_are_unknown_not_clean() -> None:
    starts, ends = windows((0.0, 1.0))
    (unknown,) = window_signals([track([-1] * 10, [float("nan")] * 10)], starts, ends)
    assert unknown["clock_event_reasons"] is None and unknown["sm_clock_hz_mean"] is None
    assert unknown["throttle"] == []
    assert reason_names(0x1 | 0x800) == ["gpu_idle", "0x800"]


def _reference(tracks: list[SignalTrack], a: int, b: int) -> dict[str, object]:
    """The per-window loop window_signals replaced (kept here as the statement of what it computes)."""
    from sparkwatch.core.throttle import MAX_SLOWDOWN_RATIO, MIN_CLOCK_RATIO, REASON_NAMES, SLOWDOWN_BITS

    clocks, ratios, working, temps, masks = [], [], [], [], []
    for t in tracks:
        lo, hi = np.searchsorted(t.t_ns, [a, b], side="left")
        clock, reasons = t.sm_clock_hz[lo:hi], t.reasons[lo:hi]
        clocks.append(clock[np.isfinite(clock)])
        if t.max_sm_clock_hz:
            ratios.append(clocks[-1] / t.max_sm_clock_hz)
            awake = np.isfinite(clock) & ~((reasons >= 0) & (reasons & 0x1 != 0))  # gpu_idle is NVML's 0x1
            working.append(clock[awake] / t.max_sm_clock_hz)
        temps.append(t.temperature_c[lo:hi][np.isfinite(t.temperature_c[lo:hi])])
        masks.append(t.reasons[lo:hi][t.reasons[lo:hi] >= 0])
    clock_all, ratio_all = np.concatenate(clocks or [np.empty(0)]), np.concatenate(ratios or [np.empty(0)])
    temp_all, mask_all = (
        np.concatenate(temps or [np.empty(0)]),
        np.concatenate(masks or [np.empty(0, np.int64)]),
    )
    union = int(np.bitwise_or.reduce(mask_all)) if len(mask_all) else None
    flags = []
    for bit, name in REASON_NAMES.items():
        share = float(np.mean((mask_all & bit) != 0)) if len(mask_all) else 0.0
        if bit & SLOWDOWN_BITS and share > MAX_SLOWDOWN_RATIO:
            flags.append(f"throttled:{name} ({share:.0%} of the window's samples)")
    ratio = float(np.mean(ratio_all)) if len(ratio_all) else None
    working_all = np.concatenate(working or [np.empty(0)])
    if len(working_all) and np.mean(working_all) < MIN_CLOCK_RATIO:
        awake = " while not idle" if len(working_all) < len(ratio_all) else ""
        flags.append(
            f"throttled:sm_clock (mean {np.mean(working_all):.2f} of the maximum{awake},"
            f" under {MIN_CLOCK_RATIO:g})"
        )
    return {
        "sm_clock_hz_mean": round(float(np.mean(clock_all))) if len(clock_all) else None,
        "sm_clock_ratio": round(ratio, 3) if ratio is not None else None,
        "temperature_c_max": float(np.max(temp_all)) if len(temp_all) else None,
        "clock_event_reasons": reason_names(union) if union is not None else None,
        "throttle": flags,
    }


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_vectorised_signals_equal_the_per_window_loop(data: st.DataObject) -> None:
    gpus = data.draw(st.integers(0, 3))
    tracks = []
    for _ in range(gpus):
        n = data.draw(st.integers(0, 40))
        t = np.sort(np.array(data.draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)), np.int64)) * (
            S // 10
        )
        clock = data.draw(
            st.lists(st.one_of(st.floats(1e8, 3e9), st.just(float("nan"))), min_size=n, max_size=n)
        )
        temp = data.draw(
            st.lists(st.one_of(st.floats(20, 95), st.just(float("nan"))), min_size=n, max_size=n)
        )
        reasons = data.draw(
            st.lists(
                st.sampled_from([-1, 0, 0x1, 0x8, 0x20, 0x80, 0x1 | 0x80, 0x4000]), min_size=n, max_size=n
            )
        )
        top = data.draw(st.sampled_from([None, 3.003e9]))
        tracks.append(SignalTrack(t, np.array(clock), np.array(temp), np.array(reasons, np.int64), top))
    spans = data.draw(st.lists(st.tuples(st.integers(-5, 65), st.integers(0, 30)), max_size=12))
    starts = np.array([a * (S // 10) for a, _ in spans], np.int64)
    ends = np.array([(a + d) * (S // 10) for a, d in spans], np.int64)
    got = window_signals(tracks, starts, ends)
    for k, entry in enumerate(got):
        want = _reference(tracks, int(starts[k]), int(ends[k]))
        for key in ("sm_clock_hz_mean", "sm_clock_ratio"):
            if want[key] is None or entry[key] is None:
                assert entry[key] == want[key], key
            else:
                assert abs(entry[key] - want[key]) <= (1 if key == "sm_clock_hz_mean" else 0.001), key
        assert {k2: entry[k2] for k2 in ("temperature_c_max", "clock_event_reasons", "throttle")} == {
            k2: want[k2] for k2 in ("temperature_c_max", "clock_event_reasons", "throttle")
        }
