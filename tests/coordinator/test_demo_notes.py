"""The demo's notes beside its table: with requests a few sampling intervals long (`--max-tokens 32`), the
figures read a few % below the simulation's truth, and the demo says why instead of leaving a reader to
suspect the measurement (its table's 54.0 W against a truth of 56.0 W said nothing)."""

from __future__ import annotations

from typing import Any

from sparkwatch.commands.demo import SHORT_INTERVALS, _short_requests

S = 1_000_000_000


def export(lengths_s: list[float], interval_s: float = 0.1, phase: str = "timed") -> dict[str, Any]:
    windows = [{"phase": phase, "t_start_ns": 0, "t_end_ns": round(s * S)} for s in lengths_s]
    return {"method": {"interval_s": interval_s}, "windows": windows}


def test_short_requests_are_said_to_read_below_the_truth() -> None:
    (line,) = _short_requests(export([0.432, 0.431, 0.430]))
    assert line.startswith("the timed requests took 0.43 s, 4 sampling intervals of 0.1 s:")
    assert "reads below the truth" in line


def test_requests_long_enough_or_none_timed_say_nothing() -> None:
    assert _short_requests(export([3.4, 3.5])) == []  # the demo's default: 256 tokens at 76 tok/s
    assert _short_requests(export([SHORT_INTERVALS * 0.1])) == []
    assert _short_requests(export([0.4], phase="warmup")) == []  # the warm-up is not measured
    assert _short_requests(export([])) == []
    assert _short_requests(export([0.4], interval_s=0.0)) == []
