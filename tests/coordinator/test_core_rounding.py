"""The vectorised rounding of figures gives exactly what ``round`` gives each value, ties and huge values
included, except that a figure rounding to zero from below is 0.0 (never -0.0), and unknown (NaN, ±inf)
as None."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sparkwatch.core.clock import NodeClock
from sparkwatch.core.power import INCOMPLETE_COVERAGE, falls_short
from sparkwatch.core.rounding import NOISE, floored_list, ratio_text, round_figure, rounded, rounded_list

#: A coverage at the threshold, a float noise under it, just under the noise, and what has nothing covered.
EDGES = [INCOMPLETE_COVERAGE, INCOMPLETE_COVERAGE - NOISE / 2, INCOMPLETE_COVERAGE - 2 * NOISE, 0.0, 1.0]


def by_round(values: list[float], digits: int) -> list[float | None]:
    return [round(v, digits) + 0.0 if math.isfinite(v) else None for v in values]


def same(a: list[float | None], b: list[float | None]) -> bool:
    """Equal, and of the same sign where zero (JSON writes -0.0)."""
    return all(
        x is None if y is None else (x is not None and x == y and math.copysign(1, x) == math.copysign(1, y))
        for x, y in zip(a, b, strict=True)
    )


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=50), st.integers(0, 6))
def test_any_floats_round_as_round_does(values: list[float], digits: int) -> None:
    assert same(rounded_list(np.array(values, dtype=np.float64), digits), by_round(values, digits))


def test_decimal_ties_and_their_neighbours_round_as_round_does() -> None:
    # 0.0005, 2.675, 1.0005…: halves in decimal that binary holds a hair above or below
    ties = (np.arange(-20_000, 20_000) + 0.5) / 1000
    hairs = (np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf))
    near = np.concatenate([ties, *hairs, [2.675, 1e17, -0.0]])
    for digits in (0, 2, 3, 4):
        scaled = near / 10.0 ** (3 - digits)
        assert same(rounded_list(scaled, digits), by_round(scaled.tolist(), digits))


def test_a_figure_rounding_to_zero_from_below_is_zero_not_minus_zero() -> None:
    """An idle run's energy above idle of -0.0004 J: JSON would say -0.0."""
    out = rounded_list(np.array([-0.0004, -0.0, -0.0006, 1e-300 * -1]), 3)
    assert [math.copysign(1, v) for v in out if v is not None] == [1, 1, -1, 1] and out[2] == -0.001
    assert round_figure(-0.0004) == 0.0 and math.copysign(1, round_figure(-0.0004)) == 1


def test_every_figure_the_export_rounds_one_by_one_is_never_minus_zero() -> None:
    """A clock's drift of -0.0001 ppm, a token cross-check's -0.00004: written 0.0 like the columns."""
    assert rounded(None) is None and math.copysign(1, rounded(-0.0004) or 1) == 1
    clock = NodeClock(summary=None, method="monotonic", rate_ppm=-0.0001)
    assert math.copysign(1, clock.to_json()["rate_ppm"]) == 1  # type: ignore[arg-type]


def test_unknown_is_none() -> None:
    assert rounded_list(np.array([np.nan, np.inf, -np.inf, 1.23456])) == [None, None, None, 1.235]


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=50), st.integers(1, 6))
def test_a_ratio_is_floored_to_the_largest_decimal_not_above_it(values: list[float], digits: int) -> None:
    """Never rounded up: a coverage of 0.99996 written 1.0 reads as whole, 0.94996 as 0.95 as enough."""
    for value, low in zip(values, floored_list(values, digits), strict=True):
        assert low is not None and low <= value + 1e-9 and round(low, digits) == low
        assert value - low < 10.0**-digits * (1 + 1e-9)  # the largest such: one step more is above it
        assert round(low + 10.0**-digits, digits) > value


def test_floored_ratios_keep_their_side_of_a_threshold() -> None:
    got = floored_list([0.99996, 0.94996, 0.95, 0.29, 1.0, 0.0, float("nan"), 1 - 1e-12])
    assert got == [0.9999, 0.9499, 0.95, 0.29, 1.0, 0.0, None, 1.0]  # the last: float noise, not a shortfall
    assert [ratio_text(c) for c in (0.9496, 0.95, 0.9999, 1.0)] == ["0.949", "0.950", "0.999", "1.000"]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(EDGES), max_size=50))
def test_one_coverage_falls_short_as_a_column_of_them_does(values: list[float]) -> None:
    """falls_short judges one float without numpy (each window's node entries: 40 000 calls in an 8 h
    export) and a column with it: the one rule must give the same answer both ways, edges included."""
    column = falls_short(np.array(values, dtype=np.float64))
    assert [falls_short(v) for v in values] == column.tolist()
    assert all(type(falls_short(v)) is bool for v in values)
