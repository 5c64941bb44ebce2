"""A TSDB's samples at more than one rate: a coordinator remote-writes an agent's 1 Hz while idle and its
10 Hz during a run, and an export reads a baseline before the run and a minute either side. Each sample's
nominal interval is its own stretch's spacing (align.local_interval), and the run's interval is the one
seen inside the run: one median over the whole read said 1 s for a short 10 Hz run (a new user's trial:
its 1.2 s window ``low_confidence``, its gap limit 3 s), and flipped between the rates as the read moved."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from test_core_export import RUN, T0, S

from sparkwatch.core.clock import NodeClock
from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.export_nodes import resolution_s
from sparkwatch.core.run_spec import NodeInput
from sparkwatch.core.tracks import GAP_INTERVALS, GpuTrack, MemTrack
from sparkwatch.core.windows import Window
from sparkwatch.sources import export_from
from sparkwatch.sources.prometheus.align import (
    NEIGHBOURS,
    STEADY_RATIO,
    local_interval,
    nominal_interval,
    spacing_s,
)
from sparkwatch.sources.prometheus.channels import sensor_domains
from sparkwatch.sources.prometheus.raw import RawSeries

MS = 1_000_000


def _times(*stretches: tuple[int, int, int]) -> np.ndarray:
    """Sample times over each (from, to, step) in ms after T0, the ends included once."""
    parts = [T0 + np.arange(a, b, step, dtype=np.int64) * MS for a, b, step in stretches]
    return np.unique(np.concatenate([*parts, [T0 + stretches[-1][1] * MS]]))


def test_each_stretch_keeps_its_own_spacing_and_a_hole_stays_a_gap() -> None:
    # 1 Hz for 75 s, 10 Hz for 2 s, 1 Hz for 60 s: one median over all of it is 1 s
    t = _times((-75_000, 0, 1000), (0, 2000, 100), (2000, 62_000, 1000))
    assert spacing_s(t) == 1.0
    nominal = local_interval(t)
    inside = (t > T0 + 500 * MS) & (t < T0 + 1500 * MS)
    assert np.all(nominal[inside] == pytest.approx(0.1))
    assert np.all(nominal[t < T0 - 10 * S] == 1.0) and np.all(nominal[t > T0 + 10 * S] == 1.0)
    # a 0.5 s hole among 10 Hz samples, and one at the very first interval: each a gap (> 3 × 0.1 s)
    holed = _times((-500, -400, 100), (0, 900, 100), (1400, 3000, 100))
    nominal = local_interval(holed)
    hole = int(np.searchsorted(holed, T0 + 1400 * MS))
    assert (holed[hole] - holed[hole - 1]) / 1e9 > GAP_INTERVALS * nominal[hole]
    assert (holed[1] - holed[0]) / 1e9 > GAP_INTERVALS * nominal[1]  # the very first interval
    # fewer intervals than a whole neighbourhood: the median of those there are
    short = _times((0, 300, 100))
    assert list(local_interval(short)) == pytest.approx([0.1] * 4) and len(short) - 1 < 2 * NEIGHBOURS + 1
    assert list(local_interval(t[:1])) == [0.0]


def _reference(t_ns: np.ndarray) -> np.ndarray:
    """local_interval as its docstring says it, one sample at a time."""
    spacing = np.diff(t_ns) / 1e9
    usual = float(np.median(spacing))
    odd = np.abs(spacing - usual) > STEADY_RATIO * usual
    out = []
    for j in range(len(spacing)):
        lo, hi = max(0, j - NEIGHBOURS), j + NEIGHBOURS + 1
        out.append(float(np.median(spacing[lo:hi])) if odd[lo:hi].any() else usual)
    return np.array([out[0], *out])


def test_reads_of_any_length_and_spacing_match_the_rule_sample_by_sample() -> None:
    """Short uneven reads too (a first cut indexed past the end below a whole neighbourhood: a traceback
    for 60 s scrapes around a short run, or a meter's few readings with one missed)."""
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(2, 40))
        steps = rng.choice([100, 100, 100, 1000, 5000], size=n - 1) + rng.integers(-3, 4, size=n - 1)
        t = T0 + np.concatenate([[0], np.cumsum(steps)]).astype(np.int64) * MS
        assert local_interval(t) == pytest.approx(_reference(t)), steps
    for steps in ([1000, 100], [1000, 1000, 5000], [1000] * 6 + [100] * 2):
        t = T0 + np.concatenate([[0], np.cumsum(steps)]).astype(np.int64) * MS
        assert local_interval(t) == pytest.approx(_reference(t))


def _said(t_ns: np.ndarray, interval_s: np.ndarray) -> RawSeries:
    return RawSeries({"__name__": "sparkwatch_agent_interval_seconds", "node": "n"}, t_ns, interval_s)


def test_the_agents_own_interval_judges_its_remote_written_samples_and_not_its_scrapes() -> None:
    """Remote-written at the agent's rate, a stalled agent's late samples (six 2 s steps in a row, a slower
    'rate' to the spacing alone) are gaps against the 0.1 s it said, as the store judges them; scraped every
    1 s, the same 0.1 s is the agent's, not the scrapes': their own spacing judges them."""
    stalled = _times((0, 5000, 100), (5000, 17_000, 2000), (17_000, 20_000, 100))
    said = _said(stalled, np.full(len(stalled), 0.1))
    nominal = nominal_interval(stalled, said)
    late = (stalled > T0 + 5000 * MS) & (stalled <= T0 + 17_000 * MS)
    assert np.all(nominal[late] == 0.1) and np.all(np.diff(stalled)[late[1:]] / 1e9 > GAP_INTERVALS * 0.1)
    assert np.all(local_interval(stalled)[late][1:-1] == 2.0)  # the spacing alone: no gap there
    scraped = _times((0, 60_000, 1000))
    assert np.all(nominal_interval(scraped, _said(scraped, np.full(len(scraped), 0.1))) == 1.0)
    # idle 1 Hz, then the run at 10 Hz, both remote-written: each at its own, as the agent said
    mixed = _times((-20_000, 0, 1000), (0, 3000, 100))
    rate = np.where(mixed > T0, 0.1, 1.0)
    assert list(nominal_interval(mixed, _said(mixed, rate))) == pytest.approx(list(rate))
    assert np.all(nominal_interval(mixed, None) == local_interval(mixed))  # no such series: the spacing's


def test_scrapes_that_match_the_idle_agents_rate_are_still_scrapes_during_its_run() -> None:
    """Scraped every 1 s, an agent idle at 1 s and then sampling a 13 s run at 0.1 s: the read's idle lead
    and tail (at the agent's rate by their spacing) outvoted the run, whose scrapes were then judged against
    0.1 s, every one a gap (a new user's short run read `coverage 0.000`, later than it had read
    one node's). Each interval the agent said is voted on alone: the run's scrapes take their spacing."""
    scraped = _times((-75_000, 73_000, 1000))
    rate = np.where((scraped >= T0) & (scraped < T0 + 13_000 * MS), 0.1, 1.0)
    for tail in (scraped <= T0 + 13_000 * MS, np.ones(len(scraped), bool)):  # soon after the run, and later
        t = scraped[tail]
        assert np.all(nominal_interval(t, _said(t, rate[tail])) == 1.0)
    # remote-written: idle at 1 s, the run at 0.1 s with a stall of six 2 s steps, a shorter tail
    written = _times((-75_000, 0, 1000), (0, 4000, 100), (4000, 16_000, 2000), (16_000, 20_000, 100))
    rate = np.where((written >= T0) & (written <= T0 + 20_000 * MS), 0.1, 1.0)
    nominal = nominal_interval(written, _said(written, rate))
    assert list(nominal) == pytest.approx(list(rate))  # the stall's samples are gaps against 0.1 s


def test_a_slow_counter_is_seen_over_the_whole_read_for_a_short_run() -> None:
    """Scrapes every 1 s of a counter that moves every 30 s (dcgm-exporter's default collection): a 20 s
    run holds one move or none, so the counter's interval is read over the whole read, not the run's."""
    t = T0 + np.arange(0, 200, dtype=np.int64) * S
    energy = (np.arange(200) // 30) * 300.0
    zeros = np.zeros(len(t), np.int64)
    track = GpuTrack.from_arrays(
        t, zeros, local_interval(t), power_w=np.full(200, 10.0), energy_j=energy, util_ratio=np.ones(200)
    )
    assert resolution_s(track, (T0 + 100 * S, T0 + 120 * S)) == (pytest.approx(30.0), pytest.approx(30.0))
    assert resolution_s(track, (T0 + 100 * S, T0 + 100 * S)) == resolution_s(track)  # one sample inside


class _Source:
    """One node as a TSDB source gives it: a GPU track on its scrape times, every sample's interval local."""

    def __init__(self, t_ns: np.ndarray, busy: tuple[int, int]) -> None:
        on = (t_ns >= busy[0]) & (t_ns <= busy[1])
        power = np.where(on, 60.0, 10.0)
        energy = np.concatenate([[0.0], np.cumsum(power[1:] * np.diff(t_ns) / 1e9)])
        zeros = np.zeros(len(t_ns), np.int64)
        self.gpu = GpuTrack.from_arrays(
            t_ns,
            zeros,
            local_interval(t_ns),
            power_w=power,
            energy_j=energy,
            util_ratio=np.where(on, 0.9, 0.0),
        )
        used = np.full(len(t_ns), 40.0 * 2**30)
        self.memory = MemTrack.from_arrays(
            t_ns, zeros, local_interval(t_ns), used, np.full(len(t_ns), np.nan)
        )

    def describe(self) -> dict[str, Any]:
        return {"kind": "prometheus", "metrics": "sparkwatch"}

    def node_input(self, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
        clock = NodeClock(summary=None, method="tsdb", rate_ppm=None)
        return NodeInput(node=node, gpus=[self.gpu], gpu_uuids=["GPU-a"], memory=self.memory, clock=clock)

    def engine_input(self, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
        return None


@pytest.mark.parametrize("series", [None, 40])
def test_a_short_run_at_10_hz_between_idle_1_hz_is_judged_at_its_own_rate(series: int | None) -> None:
    t = _times((-75_000, 0, 1000), (0, 2000, 100), (2000, 62_000, 1000))
    source = _Source(t, (T0, T0 + 2 * S))
    spec = dataclasses.replace(RUN, t_start_ns=T0, t_end_ns=T0 + 2 * S, interval_s=0.0)
    window = Window("q-1", "timed", T0 + 400 * MS, T0 + 1600 * MS, completion_tokens=12)
    export = export_from(source, spec, ["spark-1"], [window], "0.1.0", series_buckets=series)
    assert export["method"]["interval_s"] == 0.1
    (node,) = export["nodes"]
    assert node["samples"]["interval_s"] == 0.1
    (judged,) = export["windows"]
    assert judged["verdict"] == "ok", judged["reasons"]
    assert judged["nodes"][0]["energy_j"] == pytest.approx(60.0 * 1.2)


def test_a_power_channel_is_judged_against_the_agents_own_interval_as_its_gpu_is() -> None:
    """An agent restarted during a run samples its first second at the idle rate (1 s) among 0.1 s ones:
    the GPU track took that second (the agent said 1 s), a power channel's spacing alone took it for a gap,
    so a TSDB export's dc_input read 4.7 % less energy than the same run from SQLite."""
    t = _times((0, 5000, 100), (5000, 6000, 1000), (6000, 9000, 100))
    rate = np.where(t == T0 + 6000 * MS, 1.0, 0.1)  # the sample that ends the second said 1 s
    watts = RawSeries(
        {"__name__": "sparkwatch_sensor_power_watts", "node": "n", "sensor": "dc_input"},
        t,
        np.full(len(t), 50.0),
    )
    labels = ["node", "kind", "source"]
    after = int(np.searchsorted(t, T0 + 6000 * MS))
    (read,) = sensor_domains({"dc_input": [watts]}, {}, labels, [], _said(t, rate))
    (alone,) = sensor_domains({"dc_input": [watts]}, {}, labels, [])  # no such series: the spacing's
    assert read.track.max_gap_ns[after] == GAP_INTERVALS * S  # the second is one interval: counted
    assert alone.track.max_gap_ns[after] == pytest.approx(GAP_INTERVALS * 0.1 * S)  # a gap
