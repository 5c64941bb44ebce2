"""Idle baselines, the prefill/decode split and the totals' reasons, from synthetic tracks with known power:
constant power P over [a, b) integrates to P·(b − a), so every expected figure is a product."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core.clock import ClockOffset, NodeClock
from sparkwatch.core.domains import DomainInput
from sparkwatch.core.export import build_export
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.json_pieces import json_pieces
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.tracks import GpuTrack, MemTrack
from sparkwatch.core.window_rows import plain
from sparkwatch.core.windows import Window

S = 1_000_000_000
T0 = 1_800_000_000 * S
GIB = 2**30
STEP_NS = S // 10
RUN = RunSpec(id="run-1", name="idle", t_start_ns=T0, t_end_ns=T0 + 60 * S, interval_s=0.1)
Power = Callable[[np.ndarray], np.ndarray]  # seconds since T0 → watts, per interval start


def track(power: Power, seconds: int = 60, offset_w: float = 0.0, util: Power | None = None) -> GpuTrack:
    """0.1 s samples over [T0, T0 + seconds] with an energy counter: interval k draws power(k/10) + offset_w
    at utilisation util(k/10) (by default 0.9 where it draws more than its least, else 0: gated in when busy).
    """
    n = seconds * 10 + 1
    t_ns = T0 + np.arange(n, dtype=np.int64) * STEP_NS
    t_s = np.arange(n - 1) / 10
    watts = power(t_s) + offset_w
    busy = util(t_s) if util is not None else np.where(watts > watts.min() + 1e-9, 0.9, 0.0)
    energy = np.concatenate(([0.0], np.cumsum(watts * 0.1)))
    return GpuTrack.from_arrays(
        t_ns,
        np.zeros(n, np.int64),
        np.full(n, 0.1),
        power_w=np.concatenate((watts, watts[-1:])),
        energy_j=energy,
        util_ratio=np.concatenate(([0.0], busy)),  # a sample reports the interval that ends there
    )


def node(
    name: str,
    power: Power,
    *,
    util: Power | None = None,
    mem_gib: float = 100,
    domains: Sequence[DomainInput] = (),
) -> NodeInput:
    gpu = track(power, util=util)
    memory = MemTrack.from_arrays(
        gpu.t_ns, gpu.segment, np.full(len(gpu.t_ns), 0.1), np.full(len(gpu.t_ns), mem_gib * GIB)
    )
    clock = NodeClock(ClockOffset(0, 600_000, 5, 10), method="monotonic", rate_ppm=0.0)
    return NodeInput(name, [gpu], [f"GPU-{name}"], memory, clock, "unified", domains=domains)


def steps(idle_w: float, busy_w: float, busy: Sequence[tuple[float, float]]) -> Power:
    """busy_w inside the [a, b) spans (seconds since T0), idle_w elsewhere."""

    def power(t_s: np.ndarray) -> np.ndarray:
        on = np.zeros(len(t_s), dtype=bool)
        for a, b in busy:
            on |= (t_s >= a - 1e-9) & (t_s < b - 1e-9)
        return np.where(on, busy_w, idle_w)

    return power


def window(wid: str, a: float, b: float, first: float | None = None, last: float | None = None,
           tokens: int | None = 100, phase: str = "timed", **extra: Any) -> Window:  # fmt: skip
    def at(x: float | None) -> int | None:
        return None if x is None else T0 + round(x * S)

    start, end = at(a), at(b)
    assert start is not None and end is not None
    return Window(
        wid,
        phase,
        start,
        end,
        t_first_token_ns=at(first),
        t_last_token_ns=at(last),
        completion_tokens=tokens,
        **extra,
    )


# ---- idle power ----------------------------------------------------------------------------------------
def test_idle_power_is_the_baseline_median_and_energy_above_it_is_over_the_covered_time() -> None:
    # baseline period = the 10 s before the first timed window (30 s). A warm-up keeps 22..29 s busy
    # (gated in: not rest, however much of the period it fills). Of the 3 s at rest, 1 s blips to 30 W at
    # low utilisation (20..20.5 and 29..29.5 s): it would pull a mean up, the median stays at idle
    busy = [(22.0, 29.0), (30.0, 40.0), (45.0, 50.0)]

    def with_blip(idle_w: float, busy_w: float) -> Power:
        def power(t_s: np.ndarray) -> np.ndarray:
            blip = ((t_s >= 20.0) & (t_s < 20.5 - 1e-9)) | ((t_s >= 29.0 - 1e-9) & (t_s < 29.5 - 1e-9))
            return np.where(blip, 30.0, steps(idle_w, busy_w, busy)(t_s))

        return power

    gate = steps(0.0, 0.9, busy)
    nodes = [
        node("spark-1", with_blip(11.0, 61.0), util=gate),
        node("spark-2", with_blip(9.0, 41.0), util=gate),
    ]
    windows = [window("r1", 30, 40, 31, 40), window("r2", 45, 50, 45.5, 50)]
    export = build_export(RUN, nodes, windows, "0.1.0")
    n1, n2 = export["nodes"]
    assert n1["idle_power_w"] == pytest.approx(11.0) and n2["idle_power_w"] == pytest.approx(9.0)
    assert n1["energy_j"] == pytest.approx(61.0 * 15)
    # energy − idle × covered seconds (the 15 s of scope with valid intervals)
    assert n1["energy_above_idle_j"] == pytest.approx((61.0 - 11.0) * 15)
    assert n2["energy_above_idle_j"] == pytest.approx((41.0 - 9.0) * 15)
    assert n1["gpus"][0]["idle_power_w"] == pytest.approx(11.0)
    assert n1["gpus"][0]["energy_above_idle_j"] == pytest.approx(750.0)
    assert export["totals"]["energy_above_idle_j"] == pytest.approx(750.0 + 480.0)
    assert "idle_power_w" not in n1["null_reasons"]
    jsonschema.validate(plain(export), run_schema())


def test_idle_power_uses_the_memory_baseline_period_and_nothing_before_it() -> None:
    # 50 W until 20 s, then 7 W, all at rest: the period [20, 30) before the first window sees only 7 W;
    # memory shows the same boundary
    def power(t_s: np.ndarray) -> np.ndarray:
        return np.where(t_s < 19.95, 50.0, 7.0)

    base = node("spark-1", power, util=lambda t_s: np.zeros(len(t_s)))
    used = np.where(base.memory.t_ns < T0 + 20 * S, 90 * GIB, 70 * GIB).astype(np.float64)
    spiky = dataclasses.replace(base, memory=dataclasses.replace(base.memory, used_bytes=used))
    export = build_export(RUN, [spiky], [window("r1", 30, 35, 31, 35)], "0.1.0")
    n = export["nodes"][0]
    assert n["idle_power_w"] == pytest.approx(7.0)
    assert n["memory_used_bytes"]["baseline"] == 70 * GIB
    # the period moves with the first window, for both baselines alike
    earlier = build_export(RUN, [spiky], [window("r1", 29, 35, 31, 35)], "0.1.0")["nodes"][0]
    assert earlier["memory_used_bytes"]["baseline"] == 70 * GIB  # 9.0 s of 10 at 70 GiB: median 70
    assert earlier["idle_power_w"] == pytest.approx(7.0)
    way_earlier = build_export(RUN, [spiky], [window("r1", 24, 35, 31, 35)], "0.1.0")["nodes"][0]
    assert way_earlier["memory_used_bytes"]["baseline"] == 90 * GIB  # 6 s of 10 before 20 s
    assert way_earlier["idle_power_w"] == pytest.approx(50.0)


def test_idle_is_null_with_a_reason_when_the_baseline_period_has_no_sample() -> None:
    # the first window starts at the first sample: nothing before it
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(0, 5)]))], [window("r1", 0, 5)], "0.1.0")
    n = export["nodes"][0]
    assert n["idle_power_w"] is None and n["energy_above_idle_j"] is None
    assert n["null_reasons"]["idle_power_w"] == (
        "no valid sample interval in the 10 s before the first window"
    )
    assert (
        n["null_reasons"]["memory_used_bytes.baseline"]
        == "no memory sample in the 10 s before the first window"
    )
    assert n["null_reasons"]["energy_above_idle_j"] == "needs the idle power (see idle_power_w)"
    assert n["energy_j"] == pytest.approx(305.0)  # the rest is untouched
    totals = export["totals"]
    assert totals["energy_above_idle_j"] is None
    assert (
        totals["null_reasons"]["energy_above_idle_j"]
        == "unknown on spark-1: needs the idle power (see idle_power_w)"
    )
    jsonschema.validate(plain(export), run_schema())


def test_a_warm_up_filling_the_whole_baseline_period_leaves_idle_unknown() -> None:
    export = build_export(
        RUN, [node("spark-1", steps(11.0, 61.0, [(15, 40)]))], [window("r1", 30, 40, 31, 40)], "0.1.0"
    )
    n = export["nodes"][0]
    assert n["idle_power_w"] is None and n["energy_above_idle_j"] is None
    assert n["null_reasons"]["idle_power_w"] == (
        "every interval in the 10 s before the first window is gated in or shares time with a request"
        " (busy: a warm-up?)"
    )
    assert n["memory_used_bytes"]["baseline"] == 100 * GIB  # memory has no gate: its baseline stays


def coarse(watts: np.ndarray, util: np.ndarray, step_s: float) -> NodeInput:
    """A node scraped every ``step_s`` (a TSDB's samples): interval k draws watts[k] at util[k]."""
    n = len(watts) + 1
    t_ns = T0 + np.arange(n, dtype=np.int64) * round(step_s * S)
    gpu = GpuTrack.from_arrays(
        t_ns,
        np.zeros(n, np.int64),
        np.full(n, step_s),
        power_w=np.concatenate((watts, watts[-1:])),
        energy_j=np.concatenate(([0.0], np.cumsum(watts * step_s))),
        util_ratio=np.concatenate(([0.0], util)),
    )
    memory = MemTrack.from_arrays(t_ns, gpu.segment, np.full(n, step_s), np.full(n, 100.0 * GIB))
    clock = NodeClock(ClockOffset(0, 600_000, 5, 10), method="monotonic", rate_ppm=0.0)
    return NodeInput("spark-1", [gpu], ["GPU-spark-1"], memory, clock, "unified")


def test_an_interval_that_shares_time_with_a_warm_up_is_not_idle_at_coarse_scrapes() -> None:
    """Scrapes 2.5 s apart: the warm-up [12.5, 24.5) at 61 W ends inside the interval [22.5, 25), which then
    averages 51 W but is gated out (the scrape at 25 s sees the GPU at rest). Taken as idle, it lifted the
    median of the baseline's resting intervals from 11 W to 31 W; a trial at 5 s scrapes read 35 W of idle
    for a GPU that rests at 5 W."""
    starts = np.arange(0.0, 60.0, 2.5)
    watts, util = np.full(len(starts), 11.0), np.zeros(len(starts))
    busy = ((starts >= 12.5) & (starts < 22.5)) | ((starts >= 30) & (starts < 40))
    watts[busy], util[busy] = 61.0, 0.9
    watts[starts == 22.5] = (2.0 * 61.0 + 0.5 * 11.0) / 2.5
    run = dataclasses.replace(RUN, interval_s=2.5)
    windows = [window("w0", 12.5, 24.5, phase="warmup"), window("r1", 30, 40, 31, 40)]
    n = build_export(run, [coarse(watts, util, 2.5)], windows, "0.1.0")["nodes"][0]
    assert n["idle_power_w"] == pytest.approx(11.0)
    assert n["energy_above_idle_j"] == pytest.approx((61.0 - 11.0) * 10)
    # with no request before the first window to say so, the same interval reads as rest
    alone = build_export(run, [coarse(watts, util, 2.5)], windows[1:], "0.1.0")["nodes"][0]
    assert alone["idle_power_w"] == pytest.approx((51.0 + 11.0) / 2)


def test_each_power_domain_gets_its_own_idle_and_energy_above_it() -> None:
    busy = [(30.0, 40.0)]
    gpu = steps(11.0, 61.0, busy)
    sys_total = DomainInput("sys_total", "system", "hwmon:spbm", track(gpu, offset_w=30.0))
    with_domain = node("spark-1", gpu, domains=[sys_total])
    export = build_export(RUN, [with_domain, node("spark-2", gpu)], [window("r1", 30, 40, 31, 40)], "0.1.0")
    n1 = export["nodes"][0]
    (domain,) = n1["system"]["domains"]
    assert domain["idle_power_w"] == pytest.approx(41.0)
    assert domain["energy_above_idle_j"] == pytest.approx((91.0 - 41.0) * 10)
    assert n1["energy_above_idle_j"] == pytest.approx((61.0 - 11.0) * 10)  # the GPU rail, never the domain
    totals = export["totals"]
    assert totals["system_energy_above_idle_j"] is None  # spark-2 has no headline domain
    assert "spark-2" in totals["null_reasons"]["system_energy_above_idle_j"]
    alone = build_export(RUN, [with_domain], [window("r1", 30, 40, 31, 40)], "0.1.0")
    assert alone["totals"]["system_energy_above_idle_j"] == pytest.approx(500.0)
    jsonschema.validate(plain(export), run_schema())


@settings(max_examples=25, deadline=None)
@given(
    idle_w=st.floats(1.0, 200.0),
    busy_w=st.floats(1.0, 1500.0),
    a_ds=st.integers(100, 400),
    length_ds=st.integers(1, 150),
)
def test_constant_power_above_a_constant_idle_is_their_difference_times_the_length(
    idle_w: float, busy_w: float, a_ds: int, length_ds: int
) -> None:
    a, b = a_ds / 10, (a_ds + length_ds) / 10
    gpu = node("n", steps(idle_w, busy_w, [(a, b)]), util=steps(0.0, 0.9, [(a, b)]))
    export = build_export(RUN, [gpu], [window("w", a, b)], "0.1.0")
    n = export["nodes"][0]
    assert n["idle_power_w"] == pytest.approx(idle_w, abs=1e-3)  # rounded to mW
    assert n["energy_above_idle_j"] == pytest.approx((busy_w - idle_w) * (b - a), abs=2e-3)


# ---- prefill / decode ----------------------------------------------------------------------------------
def test_each_window_splits_its_energy_at_the_first_token() -> None:
    # 80 W while waiting for the first token, 60 W while decoding, 11 W after the last token
    power = steps(11.0, 80.0, [(30, 32), (45, 45.5)])
    decoding = steps(0.0, 60.0, [(32, 40), (45.5, 49)])

    def total(t_s: np.ndarray) -> np.ndarray:
        return power(t_s) + np.where(decoding(t_s) > 0, 60.0 - 11.0, 0.0)

    windows = [window("r1", 30, 41, 32, 40), window("r2", 45, 50, 45.5, 49)]
    export = build_export(RUN, [node("spark-1", total), node("spark-2", total)], windows, "0.1.0")
    r1, r2 = export["windows"]
    assert r1["nodes"][0]["prefill_energy_j"] == pytest.approx(80.0 * 2)
    assert r1["nodes"][0]["decode_energy_j"] == pytest.approx(60.0 * 8)
    assert r1["prefill_energy_j"] == pytest.approx(2 * 160.0)  # the nodes' sum
    assert r1["decode_energy_j"] == pytest.approx(2 * 480.0)
    assert r1["nodes"][0]["energy_j"] == pytest.approx(160.0 + 480.0 + 11.0)  # the tail is in neither
    assert r2["prefill_energy_j"] == pytest.approx(2 * 80.0 * 0.5)
    assert r1["null_reasons"] == {} and r2["null_reasons"] == {}
    # one request at a time: the totals are the sums of the windows' own figures
    totals = export["totals"]
    assert totals["prefill_energy_j"] == pytest.approx(r1["prefill_energy_j"] + r2["prefill_energy_j"])
    assert totals["decode_energy_j"] == pytest.approx(r1["decode_energy_j"] + r2["decode_energy_j"])
    assert export["nodes"][0]["decode_energy_j"] == pytest.approx(60.0 * 11.5)
    jsonschema.validate(plain(export), run_schema())


def test_concurrent_requests_count_shared_time_once_and_as_decode() -> None:
    # constant 50 W; A: [20, 30) first token at 22 s, last at 30 s; B: [21, 29) first at 25 s, last at 29 s
    windows = [window("a", 20, 30, 22, 30), window("b", 21, 29, 25, 29)]
    export = build_export(RUN, [node("n", steps(50.0, 50.0, []))], windows, "0.1.0")
    a, b = export["windows"]
    assert (a["prefill_energy_j"], a["decode_energy_j"]) == pytest.approx((100.0, 400.0))
    assert (b["prefill_energy_j"], b["decode_energy_j"]) == pytest.approx((200.0, 200.0))
    totals = export["totals"]
    assert totals["decode_energy_j"] == pytest.approx(50.0 * 8)  # [22, 30): someone is decoding
    assert totals["prefill_energy_j"] == pytest.approx(50.0 * 2)  # [20, 22): only A waits, nobody decodes
    assert totals["prefill_energy_j"] + totals["decode_energy_j"] <= totals["energy_j"] + 1e-6


def test_a_window_without_token_stamps_has_no_split_and_the_totals_say_which() -> None:
    windows = [
        window("r1", 30, 40, 31, 40),
        window("r2", 42, 44),  # no stamps at all
        window("r3", 45, 50, 46, None),  # a first token, no last
        window("warm", 20, 22, phase="warmup"),  # not measured: never counted against the totals
    ]
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 50)]))], windows, "0.1.0")
    by_id = {w["id"]: w for w in export["windows"]}
    assert by_id["r1"]["prefill_energy_j"] == pytest.approx(61.0)
    assert by_id["r2"]["prefill_energy_j"] is None and by_id["r2"]["decode_energy_j"] is None
    assert by_id["r2"]["null_reasons"]["prefill_energy_j"] == "t_first_token_ns and t_last_token_ns unknown"
    assert by_id["r3"]["null_reasons"]["decode_energy_j"] == "t_last_token_ns unknown"
    assert by_id["r2"]["nodes"][0]["prefill_energy_j"] is None
    totals = export["totals"]
    assert totals["prefill_energy_j"] is None and totals["decode_energy_j"] is None
    why = "2 of 3 measured window(s) lack a first or last token stamp: r2, r3"
    assert totals["null_reasons"]["decode_energy_j"] == f"unknown on spark-1: {why}"
    assert export["nodes"][0]["null_reasons"]["prefill_energy_j"] == why
    jsonschema.validate(plain(export), run_schema())


@settings(max_examples=25, deadline=None)
@given(
    watts=st.floats(1.0, 1500.0),
    start_ds=st.integers(0, 500),
    prefill_ds=st.integers(0, 50),
    decode_ds=st.integers(0, 50),
)
def test_constant_power_splits_in_proportion_to_the_phase_lengths(
    watts: float, start_ds: int, prefill_ds: int, decode_ds: int
) -> None:
    a = start_ds / 10
    first, last = a + prefill_ds / 10, a + (prefill_ds + decode_ds) / 10
    w = window("w", a, last + 0.5, first, last)
    export = build_export(RUN, [node("n", steps(watts, watts, []))], [w], "0.1.0")
    entry = export["windows"][0]
    assert entry["prefill_energy_j"] == pytest.approx(watts * (first - a), abs=2e-3)
    assert entry["decode_energy_j"] == pytest.approx(watts * (last - first), abs=2e-3)
    assert export["totals"]["prefill_energy_j"] == pytest.approx(entry["prefill_energy_j"], abs=2e-3)


# ---- reasons that say what happened --------------------------------------------------------------------
def test_in_the_run_scope_energy_is_not_divided_by_the_measured_tokens_alone() -> None:
    """10 s of warm-up beside 10 s of timed requests at 50 W: the run scope's energy holds both, the tokens
    only the timed ones, so per token it read twice the joules (10.0 for the request scope's 5.0)."""
    windows = [window("warm", 10, 20, 11, 20, phase="warmup"), window("timed", 30, 40, 31, 40)]
    busy = node("spark-1", steps(0.0, 50.0, [(10, 20), (30, 40)]))
    request = build_export(RUN, [busy], windows, "0.1.0")["totals"]
    assert request["joules_per_token"] == pytest.approx(500 / 100, rel=1e-3)
    whole = build_export(dataclasses.replace(RUN, scope="run"), [busy], windows, "0.1.0")
    totals = whole["totals"]
    assert totals["energy_j"] == pytest.approx(1000, rel=1e-3) and totals["completion_tokens"] == 100
    assert totals["joules_per_token"] is None
    assert totals["null_reasons"]["joules_per_token"].startswith(
        "the run scope's energy is the whole run's, and 1 request window(s) in it are not measured"
    )
    jsonschema.validate(plain(whole), run_schema())
    alone = build_export(dataclasses.replace(RUN, scope="run"), [busy], windows[1:], "0.1.0")["totals"]
    assert alone["joules_per_token"] == pytest.approx(alone["energy_j"] / 100)  # every request counted


def test_a_run_without_timed_windows_says_so() -> None:
    power = steps(11.0, 61.0, [(20, 25)])
    for windows in ([], [window("warm", 20, 25, 21, 25, phase="warmup")]):
        export = build_export(RUN, [node("spark-1", power)], windows, "0.1.0")
        reasons = export["totals"]["null_reasons"]
        assert reasons["completion_tokens"] == "no timed window was recorded"
        assert "no timed window was recorded" in reasons["joules_per_token"]
        assert reasons["decode_energy_j"] == "unknown on spark-1: no timed window was recorded"
        assert export["nodes"][0]["null_reasons"]["idle_power_w"] == (
            "no measured window, so no baseline period before the first one"
        )
        jsonschema.validate(plain(export), run_schema())
    failed = build_export(RUN, [node("spark-1", power)], [window("x", 20, 25, http_status=503)], "0.1.0")
    assert failed["totals"]["null_reasons"]["completion_tokens"] == (
        "none of the 1 timed window(s) was measured (failed, or without the stamps the scope needs)"
    )


def test_a_window_without_a_token_count_is_named_in_the_reasons() -> None:
    windows = [
        window("r1", 30, 35, 31, 35),
        window("r2", 36, 38, 36.5, None, tokens=None),  # the client went away mid-stream
        window("r3", 40, 45, 41, 45, tokens=None, finish_reason="stop"),
    ]
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 45)]))], windows, "0.1.0")
    totals = export["totals"]
    assert totals["completion_tokens"] is None and totals["joules_per_token"] is None
    assert totals["energy_j"] is not None  # the energy is known: only the tokens are missing
    why = totals["null_reasons"]["completion_tokens"]
    assert why.startswith(
        "2 of 3 measured window(s) have no completion token count:"
        " r2 (no finish_reason, no last token), r3 (finish_reason stop);"
    )
    per_token = totals["null_reasons"]["joules_per_token"]
    assert "r2 (no finish_reason, no last token)" in per_token
    assert "not divided by the other windows' tokens" in per_token


def test_mark_windows_are_said_to_carry_no_tokens_not_blamed_on_a_client() -> None:
    """A mark (`runs mark`) times a stretch by hand and never has tokens: before, its n/a blamed "a client
    that disconnected before the end, or a server or importer that gave none"."""
    mark = {"kind": "mark", "clock": "coordinator"}
    windows = [window("m1", 30, 35, tokens=None, source=mark), window("m2", 36, 40, tokens=None, source=mark)]
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 40)]))], windows, "0.1.0")
    why = export["totals"]["null_reasons"]["completion_tokens"]
    assert why == "2 of 2 measured window(s) are marks, which carry no token counts: m1, m2"
    mixed = [*windows, window("r3", 41, 45, tokens=None)]
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 45)]))], mixed, "0.1.0")
    why = export["totals"]["null_reasons"]["completion_tokens"]
    assert why.startswith("2 of 3 measured window(s) are marks, which carry no token counts: m1, m2;"), why
    assert "1 of 3 measured window(s) have no completion token count: r3 (no finish_reason" in why
    again = [window("m1", 30, 35, tokens=None, source={"format": "export", "taken": mark})]  # re-measured
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 40)]))], again, "0.1.0")
    assert export["totals"]["null_reasons"]["completion_tokens"].startswith(
        "1 of 1 measured window(s) are marks"
    )


def test_many_windows_without_counts_are_named_up_to_five() -> None:
    windows = [window(f"w{k}", 30 + k, 30.5 + k, tokens=None) for k in range(8)]
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 40)]))], windows, "0.1.0")
    why = export["totals"]["null_reasons"]["completion_tokens"]
    assert "w0 (no finish_reason, no last token), " in why and "w4 (" in why and "and 3 more" in why
    assert "w5 (" not in why


# ---- the schema describes every field ------------------------------------------------------------------
def undescribed(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Keys of ``value`` that the schema's ``properties`` do not name (objects that list properties)."""
    found = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}")
            else:
                found += undescribed(item, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value[:3]:
            found += undescribed(item, schema["items"], f"{path}[]")
    return found


def test_the_schema_names_every_field_an_export_has() -> None:
    gpu = steps(11.0, 61.0, [(30, 40)])
    sys_total = DomainInput("sys_total", "system", "hwmon:spbm", track(gpu, offset_w=30.0))
    nodes = [node("spark-1", gpu, domains=[sys_total]), node("spark-2", gpu)]
    windows = [window("r1", 30, 40, 31, 40), window("r2", 41, 42, tokens=None)]
    export = build_export(RUN, nodes, windows, "0.1.0")
    assert undescribed(export, run_schema()) == []
    jsonschema.validate(plain(export), run_schema())
    wrong = plain(export)  # the windows as lists, to be edited
    wrong["windows"][0]["decode_energy_j"] = "480"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, run_schema())


def test_token_counts_that_sum_past_64_bits_are_unknown_and_the_export_encodes() -> None:
    """Three windows of 2^63 - 1 completion tokens each (each a count the API takes): their sum made the
    coordinator's export answer break off mid-stream (orjson: "Integer exceeds 64-bit range") and `export
    --db` a traceback. The total is unknown now, with why, and every figure that needs it likewise."""
    big = 2**63 - 1
    windows = [window(f"r{k}", 30 + 5 * k, 34 + 5 * k, 31 + 5 * k, 34 + 5 * k, tokens=big) for k in range(3)]
    export = build_export(RUN, [node("spark-1", steps(11.0, 61.0, [(30, 45)]))], windows, "0.1.0")
    totals = export["totals"]
    assert totals["completion_tokens"] is None and totals["joules_per_token"] is None
    assert totals["null_reasons"]["completion_tokens"].startswith(
        "the measured windows' completion tokens sum past 2^63 - 1 ("
    )
    assert b"".join(json_pieces(export)).startswith(b"{")  # wire: orjson, 64-bit integers at most
