"""The decimation behind the export's series block (issue 18): per run of joinable samples and time bucket,
the min and the max sample survive at their own times; nothing is joined across a gap, a boot change or
an unknown value (a None sits between); the output is in time order; a short series comes back whole.

Checked against a plain-Python reading of the same rules, on series hypothesis draws."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core.decimate import decimate

MS = 1_000_000
T0 = 1_800_000_000 * 10**9


@dataclass(frozen=True)
class Series:
    t_ns: np.ndarray
    v: np.ndarray
    breaks: np.ndarray
    t0_ns: int
    bucket_ns: int


@st.composite
def series(draw: st.DrawFn, max_size: int = 150) -> Series:
    """Times on whole ms (so the ms rounding is exact), equal times allowed; whole-number values (exact at
    any rounding), some unknown; breaks anywhere; t0 at or before the first sample."""
    n = draw(st.integers(1, max_size))
    steps = draw(st.lists(st.integers(0, 400), min_size=n, max_size=n))
    first = T0 + draw(st.integers(0, 5_000)) * MS
    t_ns = first + np.cumsum(np.array(steps, np.int64)) * MS
    values = draw(st.lists(st.integers(-50, 50) | st.just(None), min_size=n, max_size=n))
    v = np.array([math.nan if x is None else float(x) for x in values])
    breaks = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    bucket_ns = draw(st.integers(1, 2_000)) * MS
    return Series(t_ns, v, breaks, T0, bucket_ns)


def runs_of(s: Series) -> list[list[int]]:
    """The indices of each run of joinable known samples, by the rules read one sample at a time."""
    out: list[list[int]] = []
    previous = None  # the index of the last sample looked at, when it was known and may be joined to
    for i in range(len(s.t_ns)):
        if math.isnan(s.v[i]):
            previous = None
            continue
        if previous is None or s.breaks[i]:
            out.append([])
        out[-1].append(i)
        previous = i
    return out


def seconds(s: Series, i: int) -> float:
    return round((int(s.t_ns[i]) - s.t0_ns) / 1e9, 3)


def pieces(t_s: list[float], v: list[float | None]) -> list[list[tuple[float, float]]]:
    """The output cut at its breaks: one list of (t_s, v) per drawn piece."""
    out: list[list[tuple[float, float]]] = [[]]
    for t, x in zip(t_s, v, strict=True):
        if x is None:
            out.append([])
        else:
            out[-1].append((t, x))
    return [p for p in out if p] if len(out) > 1 or out[0] else []


def run(s: Series, keep_all_up_to: int = 0) -> tuple[list[float], list[float | None]]:
    return decimate(s.t_ns, s.v, s.breaks, s.t0_ns, s.bucket_ns, keep_all_up_to=keep_all_up_to)


@settings(max_examples=120, deadline=None)
@given(series())
def test_every_bucket_keeps_its_min_and_max_and_no_run_is_joined_to_another(s: Series) -> None:
    t_s, v = run(s)
    runs = runs_of(s)
    drawn = pieces(t_s, v)
    assert len(drawn) == len(runs)  # one piece per run: a None between every two, none inside one
    assert v[:1] != [None] and v[-1:] != [None]  # breaks only between pieces
    assert all(v[k] is not None or v[k + 1] is not None for k in range(len(v) - 1))
    for indices, piece in zip(runs, drawn, strict=True):
        own = {(seconds(s, i), float(s.v[i])) for i in indices}
        assert set(piece) <= own  # every point drawn is one of the run's own samples: nothing invented
        assert piece[0] == (seconds(s, indices[0]), s.v[indices[0]])  # the run's edges are exact
        assert piece[-1] == (seconds(s, indices[-1]), s.v[indices[-1]])
        buckets: dict[int, list[int]] = {}
        for i in indices:
            buckets.setdefault((int(s.t_ns[i]) - s.t0_ns) // s.bucket_ns, []).append(i)
        for members in buckets.values():
            for extreme in (min, max):
                value = extreme(float(s.v[i]) for i in members)
                at = {seconds(s, i) for i in members if s.v[i] == value}
                assert any(x == value and t in at for t, x in piece), (value, at, piece)
        assert len(piece) <= 2 * len(buckets) + 2  # what the bucket count allows, however long the run


@settings(max_examples=80, deadline=None)
@given(series())
def test_the_output_is_in_time_order(s: Series) -> None:
    t_s, v = run(s)
    assert t_s == sorted(t_s) and len(t_s) == len(v)


@settings(max_examples=200, deadline=None)
@given(series(max_size=60))
def test_a_series_shorter_than_the_bucket_count_comes_back_whole(s: Series) -> None:
    t_s, v = run(s, keep_all_up_to=len(s.t_ns))
    drawn = pieces(t_s, v)
    expected = [[(seconds(s, i), float(s.v[i])) for i in indices] for indices in runs_of(s)]
    assert drawn == expected  # every known sample, in order, cut where the runs are


def test_a_gap_a_boot_change_and_an_unknown_value_each_break_the_line() -> None:
    t = T0 + np.array([0, 100, 200, 900, 1000, 1100, 1200, 1300], np.int64) * MS
    v = np.array([1.0, 5.0, 2.0, 3.0, 4.0, math.nan, 6.0, 7.0])
    breaks = np.array([False, False, False, True, False, False, False, True])  # a gap; later a new boot
    t_s, out = decimate(t, v, breaks, T0, 10_000 * MS)  # one bucket for everything
    assert out == [1.0, 5.0, 2.0, None, 3.0, 4.0, None, 6.0, None, 7.0]
    assert t_s == [0.0, 0.1, 0.2, 0.55, 0.9, 1.0, 1.1, 1.2, 1.25, 1.3]  # each None in the middle of its gap


def test_one_long_run_keeps_first_last_and_each_buckets_extremes_at_their_own_times() -> None:
    t = T0 + np.arange(1000, dtype=np.int64) * 10 * MS  # 10 s at 100 Hz
    v = np.sin(np.arange(1000) / 7.0) * 100
    v[333] = 500.0  # a one-sample spike
    t_s, out = decimate(t, v, np.zeros(1000, bool), T0, 1_000 * MS, digits=2)  # 10 buckets of 1 s
    assert None not in out and len(out) <= 2 * 10 + 2
    assert (3.33, 500.0) in zip(t_s, out, strict=True)
    assert (t_s[0], t_s[-1]) == (0.0, 9.99)
    whole = decimate(t, v, np.zeros(1000, bool), T0, 1, digits=0)  # 1 ns buckets: every sample
    assert len(whole[0]) == 1000 and all(type(x) is int for x in whole[1])


def test_nothing_known_is_nothing_to_draw_and_a_bucket_must_have_a_length() -> None:
    t = T0 + np.arange(3, dtype=np.int64)
    assert decimate(t, np.full(3, math.nan), np.zeros(3, bool), T0, MS) == ([], [])
    with pytest.raises(ValueError, match="bucket_ns"):
        decimate(t, np.zeros(3), np.zeros(3, bool), T0, 0)
