"""The export's series block (issue 18) from small hand-made tracks: a gap and a boot change stay breaks, the
shaded gated-out time is exactly what the gate dropped inside the scope, a throttle episode is found and an
unthrottled GPU has none; the export without the block is the export as before, with the same digest."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import numpy as np
import pytest

from sparkwatch.core.clock import ClockOffset, NodeClock
from sparkwatch.core.domains import DomainInput
from sparkwatch.core.export import build_export, digest
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.series import run_series
from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import GpuTrack, MemTrack
from sparkwatch.core.window_rows import plain
from sparkwatch.core.windows import Window, union

S = 1_000_000_000
T0 = 1_800_000_000 * S
RUN = RunSpec(id="run-s", name="series", t_start_ns=T0, t_end_ns=T0 + 20 * S, interval_s=0.1)
MAX_CLOCK_HZ = 3.0e9
WINDOWS = [Window("r1", "timed", T0 + 2 * S, T0 + 8 * S), Window("r2", "timed", T0 + 12 * S, T0 + 18 * S)]


def gpu(
    busy: list[tuple[float, float]],
    *,
    hole: tuple[float, float] | None = None,
    boot_at_s: float | None = None,
) -> GpuTrack:
    """0.1 s samples over the run: 60 W at util 0.9 inside the busy spans (a, b], 10 W at util 0 outside (the
    gate reads the util at an interval's end, so the intervals inside [a, b] are gated in); no samples
    inside ``hole``; a new agent boot from ``boot_at_s`` on."""
    t_s = np.round(np.arange(201) * 0.1, 3)
    if hole is not None:
        t_s = t_s[(t_s <= hole[0]) | (t_s >= hole[1])]
    on = np.array([any(a < t <= b for a, b in busy) for t in t_s])
    segment = (t_s >= boot_at_s).astype(np.int64) if boot_at_s is not None else np.zeros(len(t_s), np.int64)
    return GpuTrack.from_arrays(
        T0 + np.round(t_s * S).astype(np.int64),
        segment,
        np.full(len(t_s), 0.1),
        power_w=np.where(on, 60.0, 10.0),
        energy_j=np.full(len(t_s), np.nan),  # the trapezoid of the readings
        util_ratio=np.where(on, 0.9, 0.0),
    )


def signals(reasons: list[int], clock_hz: list[float], uuid: str = "GPU-a") -> SignalTrack:
    n = len(reasons)
    return SignalTrack(
        t_ns=T0 + np.arange(n, dtype=np.int64) * S // 10,
        sm_clock_hz=np.array(clock_hz),
        temperature_c=np.full(n, 60.0),
        reasons=np.array(reasons, np.int64),
        max_sm_clock_hz=MAX_CLOCK_HZ,
        uuid=uuid,
    )


def node(
    track: GpuTrack,
    *,
    signal: list[SignalTrack] | None = None,
    domains: tuple[DomainInput, ...] = (),
    cache: bool = False,
) -> NodeInput:
    """The node of ``track``, its memory (and with ``cache`` its page cache) following its power."""
    interval_s = np.full(len(track), 0.1)
    page_cache = track.power_w * 2**20 if cache else None
    memory = MemTrack.from_arrays(track.t_ns, track.segment, interval_s, track.power_w * 2**30, page_cache)
    clock = NodeClock(summary=ClockOffset(0, 500_000, 5, 10), method="monotonic", rate_ppm=0.0)
    return NodeInput("spark-1", [track], ["GPU-a"], memory, clock, domains=domains, signals=signal or [])


def lines(block: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [line for line in block["nodes"][0]["lines"] if line["kind"] == kind]


def joined_steps_s(line: dict[str, Any]) -> list[float]:
    """The time steps the plot draws a line along (both ends known)."""
    t, v = line["t_s"], line["v"]
    return [t[k + 1] - t[k] for k in range(len(t) - 1) if v[k] is not None and v[k + 1] is not None]


def test_a_gap_stays_a_break_in_every_line() -> None:
    track = gpu([(2, 8), (12, 18)], hole=(5.0, 6.0))
    block = run_series(RUN, [node(track, cache=True)], union([(T0 + 2 * S, T0 + 8 * S)]), buckets=100)
    for kind in ("gpu_power_w", "util_ratio", "mem_used_bytes", "mem_page_cache_bytes"):
        (line,) = lines(block, kind)
        assert line["v"].count(None) == 1, kind
        k = line["v"].index(None)
        assert line["t_s"][k - 1] <= 5.0 and line["t_s"][k + 1] >= 6.0, kind  # the None sits in the hole
        assert max(joined_steps_s(line)) < 0.5, kind  # 0.4 s buckets: never a line across the 1 s hole
    power = lines(block, "gpu_power_w")[0]
    assert power["samples"] == len(track) and power["unit"] == "W" and power["gpu_uuid"] == "GPU-a"
    assert {60.0, 10.0} <= set(power["v"])  # interval power, both levels seen


def test_a_boot_change_is_a_break_though_the_samples_run_on() -> None:
    block = run_series(RUN, [node(gpu([(2, 8)], boot_at_s=10.0))], union([]), buckets=50)
    for kind in ("gpu_power_w", "util_ratio", "mem_used_bytes"):
        (line,) = lines(block, kind)
        assert line["v"].count(None) == 1, kind
        k = line["v"].index(None)
        assert line["t_s"][k - 1] < 10.0 <= line["t_s"][k + 1], kind


def test_a_short_series_keeps_every_sample() -> None:
    block = run_series(RUN, [node(gpu([(2, 8)]))], union([]), buckets=1000)
    (util,) = lines(block, "util_ratio")
    assert util["t_s"] == pytest.approx([k / 10 for k in range(201)]) and util["samples"] == 201
    assert len(lines(block, "gpu_power_w")[0]["t_s"]) == 200  # one per interval, at its middle
    assert lines(block, "mem_page_cache_bytes") == []  # never read: no line of nothing but gaps


def test_gated_out_is_what_the_gate_dropped_inside_the_scope() -> None:
    # busy 2-5 s and 6-8 s inside r1, busy 12-18 s (all of r2): the gate drops r1's idle second 5-6 s,
    # and nothing of the idle time outside the scope is shaded
    track = gpu([(2, 5), (6, 8), (12, 18)])
    scope = union([(w.t_start_ns, w.t_end_ns) for w in WINDOWS])
    block = run_series(RUN, [node(track)], scope, buckets=200)
    shaded = block["nodes"][0]["gated_out"]
    assert shaded == [[5.0, 6.0]]
    _, covered, _, gated = Integrals.build(track, 0.5).between(scope.starts, scope.ends).sum(1)
    assert sum(b - a for a, b in shaded) == pytest.approx(covered - gated)  # the excluded time, exactly
    run_scope = run_series(RUN, [node(track)], union([(T0, T0 + 20 * S)]), buckets=200)
    assert run_scope["nodes"][0]["gated_out"] == [[0.0, 2.0], [5.0, 6.0], [8.0, 12.0], [18.0, 20.0]]


def test_a_flickering_gate_joins_its_closest_pieces_and_says_so() -> None:
    # busy on every other 0.1 s for 10 s (50 dropped pieces 0.1 s apart), then on 10-18 s with one idle
    # 0.5 s: with 2 buckets (16 pieces kept at 8 per bucket) the 0.1 s gaps are joined, the 0.5 s one not
    busy = [(0.2 * k + 0.1, 0.2 * k + 0.2) for k in range(50)] + [(10.0, 14.0), (14.5, 18.0)]
    track = gpu(busy)
    scope = union([(T0, T0 + 20 * S)])
    exact = run_series(RUN, [node(track)], scope, buckets=200)["nodes"][0]
    pieces = exact["gated_out"]
    assert (
        exact["gated_out_joined_s"] == 0.0
        and len(pieces) > 16
        and pieces[-2:] == [[14.0, 14.5], [18.0, 20.0]]
    )
    joined = run_series(RUN, [node(track)], scope, buckets=2)["nodes"][0]
    assert joined["gated_out_joined_s"] == pytest.approx(0.1)
    assert joined["gated_out"] == [[0.0, pieces[-3][1]], [14.0, 14.5], [18.0, 20.0]]


def test_a_throttle_episode_is_found_and_an_idle_or_unthrottled_gpu_has_none() -> None:
    busy_hz, idle_hz = 2.4e9, 0.2e9
    reasons = [0x1] * 20 + [0] * 20 + [0x80] * 10 + [0] * 20 + [0] * 10 + [0x1] * 20  # idle, busy, brake…
    clock = [idle_hz] * 20 + [busy_hz] * 50 + [1.2e9] * 10 + [idle_hz] * 20  # … then held at 0.4 of max
    braked = signals(reasons, clock)
    block = run_series(RUN, [node(gpu([]), signal=[braked])], union([]), buckets=100)
    episodes = block["nodes"][0]["throttle"]
    assert episodes == [
        {"t_s": [4.0, 5.0], "gpu_uuid": "GPU-a", "reasons": ["hw_power_brake"]},
        {"t_s": [7.0, 8.0], "gpu_uuid": "GPU-a", "reasons": ["sm_clock"]},
    ]  # the idle GPU's low clock (gpu_idle) is no episode
    (sm,) = lines(block, "sm_clock_hz")
    assert sm["label"] == "GPU 0" and sm["unit"] == "Hz" and all(type(x) is int for x in sm["v"])
    clean = signals([0] * 100, [busy_hz] * 100)
    assert (
        run_series(RUN, [node(gpu([]), signal=[clean])], union([]), buckets=100)["nodes"][0]["throttle"] == []
    )


def test_each_domain_is_its_own_line_never_summed() -> None:
    track = gpu([(2, 8)])
    total = DomainInput("sys_total", "system", "hwmon:spbm", gpu([(2, 8)]))
    block = run_series(RUN, [node(track, domains=(total,))], union([]), buckets=100)
    (line,) = lines(block, "system_power_w")
    assert line["key"] == "system_power_w/sys_total" and line["label"] == "sys_total (hwmon:spbm)"
    assert (line["domain"], line["domain_kind"], line["source"]) == ("sys_total", "system", "hwmon:spbm")
    assert max(v for v in line["v"] if v is not None) == pytest.approx(60.0)  # its own, not GPU + domain


def test_the_export_without_series_is_as_before_and_the_digest_ignores_the_block() -> None:
    nodes = [
        node(gpu([(2, 5), (6, 8), (12, 18)], hole=(14.0, 15.0)), signal=[signals([0] * 200, [2.4e9] * 200)])
    ]
    bare = build_export(RUN, nodes, WINDOWS, "0.1.0")
    with_series = build_export(RUN, nodes, WINDOWS, "0.1.0", series_buckets=300)
    assert "series" not in bare
    assert {k: v for k, v in with_series.items() if k != "series"} == bare
    assert json.dumps(plain(bare)) == json.dumps(
        plain({k: v for k, v in with_series.items() if k != "series"})
    )
    assert digest(with_series) == digest(bare) and digest(bare) in bare["lmx"]["notes"]
    jsonschema.validate(plain(with_series), run_schema())
    series = with_series["series"]
    assert series["buckets"] == 300 and series["bucket_s"] == pytest.approx(20 / 300, abs=1e-9)
    assert series["t0_ns"] == RUN.t_start_ns and series["t_end_ns"] == RUN.t_end_ns
    assert [n["node"] for n in series["nodes"]] == [n["node"] for n in bare["nodes"]]
    assert series["nodes"][0]["gated_out"] == [[5.0, 6.0]]


def test_the_schema_refuses_a_series_block_out_of_shape() -> None:
    export = build_export(RUN, [node(gpu([(2, 8)]))], WINDOWS, "0.1.0", series_buckets=100)
    validator = jsonschema.Draft202012Validator(run_schema())
    assert validator.is_valid(plain(export))
    bad_line = json.loads(json.dumps(plain(export)))
    del bad_line["series"]["nodes"][0]["lines"][0]["t_s"]
    assert not validator.is_valid(bad_line)
    bad_method = {**export, "series": {**export["series"], "method": "average"}}
    assert not validator.is_valid(bad_method)
    with pytest.raises(ValueError, match="buckets"):
        run_series(RUN, [], union([]), buckets=0)


def test_a_window_outside_the_run_is_inside_the_plots() -> None:
    """A window measured though it started before the run (an import's clock, the ±2 s rule) is plotted:
    the block starts with it, and its samples are in the lines."""
    early = Window("r0", "timed", T0 - 3 * S, T0 + 1 * S)
    track = gpu([(0, 20)])
    export = build_export(RUN, [node(track)], [early, *WINDOWS], "test", series_buckets=100)
    series = export["series"]
    assert series["t0_ns"] == T0 - 3 * S and series["t_end_ns"] == T0 + 20 * S
    (util,) = [ln for ln in series["nodes"][0]["lines"] if ln["kind"] == "util_ratio"]
    assert util["t_s"][0] == pytest.approx(3.0)  # the first sample, at the run's start, 3 s into the plot
    plain = build_export(RUN, [node(track)], [*WINDOWS], "test", series_buckets=100)["series"]
    assert plain["t0_ns"] == T0  # without it, the run's own span
