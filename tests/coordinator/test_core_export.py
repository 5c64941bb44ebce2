"""The sparkwatch.run/1 export built from synthetic tracks with known power, memory and clocks."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core.clock import ClockOffset, NodeClock
from sparkwatch.core.domains import DomainInput
from sparkwatch.core.export import build_export, digest, verdict
from sparkwatch.core.intervals import median_of
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.tracks import GpuPoint, GpuTrack, MemPoint, MemTrack
from sparkwatch.core.window_rows import plain
from sparkwatch.core.windows import Window
from sparkwatch.defaults import EXPORT_SCHEMA

S = 1_000_000_000
T0 = 1_800_000_000 * S
GIB = 2**30
MIB = 2**20


def node(
    name: str, idle_w: float, busy_w: float, busy: list[tuple[int, int]], mem_gib: float, cache: bool = True
) -> NodeInput:
    """0.1 s samples over [T0, T0 + 40 s]: busy_w at util 0.9 inside the busy spans, idle_w at 0 outside;
    with ``cache``, a page cache of k MiB at sample k."""
    gpu, mem, energy = [], [], 0.0
    for k in range(401):
        t = T0 + k * S // 10
        on = k > 0 and any(a * S <= (k - 1) * S // 10 < b * S for a, b in busy)  # interval [k-1, k]
        if k:
            energy += (busy_w if on else idle_w) * 0.1
        gpu.append(GpuPoint(t, 0, 0.1, busy_w if on else idle_w, energy, 0.9 if on else 0.0))
        mem.append(MemPoint(t, 0, 0.1, int((mem_gib + (4 if on else 0)) * GIB), k * MIB if cache else None))
    return NodeInput(
        node=name,
        gpus=[GpuTrack.from_points(gpu)],
        gpu_uuids=[f"GPU-{name}"],
        memory=MemTrack.from_points(mem),
        clock=NodeClock(
            summary=ClockOffset(offset_ns=0, uncertainty_ns=600_000, probes_used=5, probes_total=10),
            method="monotonic",
            rate_ppm=0.0,
        ),
        memory_model="unified",
    )


WINDOWS = [
    Window("warm", "warmup", T0 + 12 * S, T0 + 14 * S, completion_tokens=10),
    Window(
        "r1",
        "timed",
        T0 + 20 * S,
        T0 + 25 * S,
        t_first_token_ns=T0 + 20 * S + S // 2,
        t_last_token_ns=T0 + 25 * S,
        completion_tokens=380,
    ),
    Window("r2", "timed", T0 + 30 * S, T0 + 35 * S, completion_tokens=380),
    Window("tiny", "timed", T0 + 36 * S, T0 + 36 * S + S // 20, completion_tokens=4),
]
RUN = RunSpec(id="run-1", name="demo", t_start_ns=T0, t_end_ns=T0 + 40 * S, interval_s=0.1)


def build() -> dict:
    # busy during the warm-up and both timed requests; idle in between
    busy = [(12, 14), (20, 25), (30, 35)]
    nodes = [node("spark-1", 11.0, 61.0, busy, 100), node("spark-2", 11.0, 41.0, busy, 90)]
    return build_export(RUN, nodes, WINDOWS, "0.1.0")


def test_export_numbers_match_the_known_load() -> None:
    export = build()
    assert export["schema"] == EXPORT_SCHEMA == "sparkwatch.run/1"
    n1, n2 = export["nodes"]
    # the scope is r1 ∪ r2 ∪ tiny = 10.05 s; busy (util 0.9) except the tiny window, which is idle
    assert export["method"]["scope_s"] == pytest.approx(10.05)
    assert n1["power_w"]["gated_mean"] == pytest.approx(61.0)
    assert n2["power_w"]["gated_mean"] == pytest.approx(41.0)
    assert n1["energy_j"] == pytest.approx(61.0 * 10 + 11.0 * 0.05)
    assert n1["gated_s"] == pytest.approx(10.0) and n1["excluded_s"] == pytest.approx(0.05)
    assert n1["energy_method"] == "counter"
    assert n1["samples"]["coverage_ratio"] == pytest.approx(1.0)
    assert n1["memory_used_bytes"]["baseline"] == 100 * GIB  # the 10 s before r1 are idle... except warm-up
    assert n1["memory_used_bytes"]["peak"] == 104 * GIB
    totals = export["totals"]
    assert totals["power_w_gated_mean_sum"] == pytest.approx(102.0)
    assert totals["memory_used_bytes_peak_sum"] == 198 * GIB
    assert totals["memory_used_bytes_peak_of_sum"] == 198 * GIB
    assert totals["completion_tokens"] == 764  # the warm-up's 10 tokens do not count
    assert totals["joules_per_token"] == pytest.approx(totals["energy_j"] / 764, rel=1e-3)
    assert export["lmx"]["gpuPowerWatts"] == [61.0, 41.0]
    assert export["lmx"]["peakVramGb"] == 198.0


def test_warmup_is_excluded_but_reported() -> None:
    warm = build()["windows"][0]
    assert warm["id"] == "warm" and warm["in_scope"] is False
    assert warm["nodes"][0]["power_w_gated_mean"] == pytest.approx(61.0)


def test_verdicts() -> None:
    windows = {w["id"]: w for w in build()["windows"]}
    assert windows["r1"]["verdict"] == "ok" and windows["r1"]["reasons"] == []
    tiny = windows["tiny"]
    assert tiny["verdict"] == "low_confidence"
    assert any("sampling intervals" in r for r in tiny["reasons"])
    assert any("clock uncertainty" in r for r in tiny["reasons"])  # 0.6 ms > 1 % of 50 ms


def test_a_node_without_any_sample_in_a_window_is_its_worst_coverage() -> None:
    """A node that sent nothing (its coverage None) beside a whole one read "coverage 1.000 < 0.95": the
    whole node's figure given as the missing one's."""
    assert verdict(10.0, [1.0, None], 0.1, 0.0) == ("incomplete", ["coverage 0.000 < 0.95 on 1 node(s)"])
    assert verdict(10.0, [1.0, 0.5, None], 0.1, 0.0)[1] == ["coverage 0.000 < 0.95 on 2 node(s)"]
    assert verdict(10.0, [1.0, 0.5], 0.1, 0.0)[1] == ["coverage 0.500 < 0.95 on 1 node(s)"]
    # written "coverage 0.950 < 0.95" when rounded: a ratio beside its threshold is never rounded up to it
    assert verdict(10.0, [0.9496], 0.1, 0.0)[1] == ["coverage 0.949 < 0.95 on 1 node(s)"]
    # float noise under the threshold (a sum of 0.1 s intervals) is judged as written: 0.95, enough
    assert verdict(10.0, [0.9499999999999998], 0.1, 0.0) == ("ok", [])


def test_incomplete_when_a_node_has_a_gap() -> None:
    gappy = node("spark-3", 11.0, 61.0, [(20, 25)], 80)
    track = gappy.gpus[0]
    keep = (track.t_ns < T0 + 21 * S) | (track.t_ns > T0 + 23 * S)  # 2 s hole inside r1
    hole = GpuTrack(
        track.t_ns[keep],
        track.segment[keep],
        track.max_gap_ns[keep],
        track.power_w[keep],
        track.energy_j[keep],
        track.util_ratio[keep],
    )
    nodes = [
        node("spark-1", 11.0, 61.0, [(20, 25)], 100),
        NodeInput(gappy.node, [hole], gappy.gpu_uuids, gappy.memory, gappy.clock),
    ]
    export = build_export(RUN, nodes, WINDOWS[:2], "0.1.0")
    r1 = export["windows"][1]
    assert r1["verdict"] == "incomplete" and "coverage" in r1["reasons"][0]
    assert export["nodes"][1]["samples"]["max_gap_s"] == pytest.approx(2.2)  # 20.9 s .. 23.1 s
    # the node's energy is that of its covered 2.8 s of the 5 s scope: not summed into the run's as whole
    assert export["nodes"][1]["energy_j"] == pytest.approx(61.0 * 2.8)
    totals = export["totals"]
    assert totals["energy_j"] is None and totals["joules_per_token"] is None
    assert totals["null_reasons"]["energy_j"] == (
        "the GPU samples of spark-3 (0.560) cover less than 0.95 of the scope: the energy of the covered"
        " time only is not the whole"
    )
    for key in ("energy_above_idle_j", "prefill_energy_j", "decode_energy_j"):  # every energy total
        assert totals[key] is None and "spark-3 (0.560)" in totals["null_reasons"][key], key
    # nor its gated mean, of 0.56 of the scope, summed with the whole node's as the cluster's draw (a new
    # user's table read 107.8 W beside a node at coverage 0.020); the node's own mean stays, with its coverage
    assert export["nodes"][1]["power_w"]["gated_mean"] == pytest.approx(61.0)
    assert totals["power_w_gated_mean_sum"] is None
    assert totals["null_reasons"]["power_w_gated_mean_sum"] == (
        "the GPU samples of spark-3 (0.560) cover less than 0.95 of the scope: a mean over the covered time"
        " only, summed with the other nodes', is not the cluster's draw"
    )


def _rail(gpu: GpuTrack, extra_w: float, keep: Any = slice(None)) -> GpuTrack:
    """A domain's track: the GPU's samples (``keep`` of them) plus ``extra_w``, no energy counter."""
    t = gpu.t_ns[keep]
    power = gpu.power_w[keep] + extra_w
    return GpuTrack(
        t, gpu.segment[keep], gpu.max_gap_ns[keep], power, np.full(len(t), np.nan), gpu.util_ratio[keep]
    )


def test_a_system_domain_with_a_gap_makes_its_windows_low_confidence_and_no_system_total() -> None:
    """A wall meter that stopped answering for 2.2 s of a 5 s request: the GPU figures are whole, the
    node's whole draw is not, so the window says so and the system energy is not summed as the whole."""
    busy = [(20, 25)]
    sensed = node("spark-1", 11.0, 61.0, busy, 100)
    gpu = sensed.gpus[0]
    keep = (gpu.t_ns < T0 + 21 * S) | (gpu.t_ns > T0 + 23 * S)
    wall = _rail(gpu, 30.0, keep)
    sensed = dataclasses.replace(sensed, domains=[DomainInput("wall", "system", "meter:redfish", wall)])
    export = build_export(RUN, [sensed], WINDOWS[:2], "0.1.0")
    r1 = export["windows"][1]
    assert r1["verdict"] == "low_confidence"
    assert r1["reasons"] == ["spark-1 wall: coverage 0.560 < 0.95"]
    assert r1["nodes"][0]["coverage_ratio"] == 1.0  # the GPU covered it
    totals = export["totals"]
    assert totals["energy_j"] == pytest.approx(61.0 * 5)  # whole
    assert totals["system_energy_j"] is None and totals["system_joules_per_token"] is None
    assert totals["null_reasons"]["system_energy_j"] == (
        "the headline domains of spark-1 (0.560) cover less than 0.95 of the scope: the energy of the"
        " covered time only is not the whole"
    )
    assert totals["system_energy_above_idle_j"] is None
    assert "spark-1 (0.560)" in totals["null_reasons"]["system_energy_above_idle_j"]


def test_a_run_without_windows_says_why_each_total_is_unknown_as_it_is() -> None:
    """A run with no window: its nodes' ``dc_input`` exists but has no energy, and there are no other
    windows' tokens. Before, ``system_energy_j`` read "no whole-node power domain with a known energy" and
    ``joules_per_token`` spoke of "the other windows' tokens"; the domain's own nulls had no reason."""
    sensed = node("spark-1", 11.0, 61.0, [(20, 25)], 100)
    dc_input = DomainInput("dc_input", "system", "hwmon:spbm", _rail(sensed.gpus[0], 30.0))
    bare = node("spark-2", 11.0, 61.0, [(20, 25)], 100)
    export = build_export(RUN, [dataclasses.replace(sensed, domains=[dc_input]), bare], [], "0.1.0")
    reasons = export["totals"]["null_reasons"]
    none = "no valid sample interval inside the scope"
    assert (
        reasons["system_energy_j"]
        == f"no whole-node power domain on spark-2; unknown on spark-1's dc_input: {none}"
    )
    assert (
        reasons["joules_per_token"] == "the completion token count is unknown (no timed window was recorded)"
    )
    assert reasons["system_joules_per_token"] == reasons["joules_per_token"]
    node_reasons = export["nodes"][0]["null_reasons"]
    domain = export["nodes"][0]["system"]["domains"][0]
    for figure in ("energy_j", "power_w.mean", "power_w.max", "power_w.gated_mean"):
        key, value = figure.split(".") if "." in figure else (figure, None)
        assert (domain[key] if value is None else domain[key][value]) is None, figure
        assert node_reasons[f"system.dc_input.{figure}"] == none, figure


def test_a_gap_in_a_channel_that_is_not_the_whole_node_judges_no_window() -> None:
    """A CPU rail with the same gap beside a complete dc_input: no figure a window is judged by is short."""
    sensed = node("spark-1", 11.0, 61.0, [(20, 25)], 100)
    gpu = sensed.gpus[0]
    keep = (gpu.t_ns < T0 + 21 * S) | (gpu.t_ns > T0 + 23 * S)
    domains = [
        DomainInput("cpu_rail", "cpu", "hwmon:spbm", _rail(gpu, 5.0, keep)),
        DomainInput("dc_input", "system", "hwmon:spbm", _rail(gpu, 30.0)),
    ]
    export = build_export(RUN, [dataclasses.replace(sensed, domains=domains)], WINDOWS[:2], "0.1.0")
    r1 = export["windows"][1]
    assert (r1["verdict"], r1["reasons"]) == ("ok", [])
    assert [d["coverage_ratio"] for d in r1["nodes"][0]["system"]] == [1.0, 0.56]  # the headline first
    dc_input = export["nodes"][0]["system"]["domains"][0]
    assert (
        dc_input["domain"] == "dc_input" and export["totals"]["system_energy_j"] == dc_input["energy_j"] > 0
    )


def test_unknowns_are_null_with_reasons() -> None:
    idle = node("idle", 9.0, 9.0, [], 50)  # never above the gate
    export = build_export(RUN, [idle], WINDOWS, "0.1.0")
    n = export["nodes"][0]
    assert n["power_w"]["gated_mean"] is None and n["power_w"]["mean"] == pytest.approx(9.0)
    assert n["null_reasons"]["power_w.gated_mean"] == "no interval inside the scope with utilisation >= 0.5"
    assert export["totals"]["power_w_gated_mean_sum"] is None
    assert export["lmx"]["gpuPowerWatts"] == [None]
    assert "NaN" not in json.dumps(plain(export))


def test_a_node_down_through_the_scope_is_not_said_to_have_idled() -> None:
    """Its agent stopped before the first window: its gated power was "no interval inside the scope with
    utilisation >= 0.5", which reads as an idle GPU (a benchmark sent elsewhere), not a node that was down."""
    full = node("down", 9.0, 60.0, [(0, 40)], 50)
    early = full.gpus[0].t_ns < T0 + 15 * S  # every sample before r1 (20 s) and the baseline's
    gpu = dataclasses.replace(
        full.gpus[0],
        **{
            f: getattr(full.gpus[0], f)[early]
            for f in ("t_ns", "segment", "max_gap_ns", "power_w", "energy_j", "util_ratio")
        },
    )
    n = build_export(RUN, [dataclasses.replace(full, gpus=[gpu])], WINDOWS, "0.1.0")["nodes"][0]
    assert n["power_w"]["gated_mean"] is None and n["samples"]["coverage_ratio"] == 0.0
    assert n["null_reasons"]["power_w.gated_mean"] == "no valid sample interval inside the scope"


def test_the_page_cache_is_measured_beside_memory_used_and_unknown_with_a_reason_where_not_read() -> None:
    n1 = build()["nodes"][0]
    # the scope: r1 [20, 25 s), r2 [30, 35 s) and tiny [36, 36.05 s): samples k = 200-249, 300-349 and 360
    inside = [*range(200, 250), *range(300, 350), 360]
    assert n1["memory_page_cache_bytes"] == {
        "baseline": int(149.5 * MIB),  # the median of the 10 s before r1 (k = 100-199)
        "peak": 360 * MIB,
        "mean": int(sum(inside) / len(inside) * MIB),
    }
    assert not any(k.startswith("memory_page_cache_bytes") for k in n1["null_reasons"])
    unread = build_export(RUN, [node("old", 11.0, 61.0, [(20, 36)], 100, cache=False)], WINDOWS, "0.1.0")
    n = unread["nodes"][0]
    assert n["memory_page_cache_bytes"] == {"baseline": None, "peak": None, "mean": None}
    assert n["memory_used_bytes"]["peak"] == 104 * GIB  # memory used is read as before
    assert n["null_reasons"]["memory_page_cache_bytes"] == "no page cache reading inside the scope"
    assert n["null_reasons"]["memory_page_cache_bytes.baseline"] == (
        "no page cache reading in the 10 s before the first window"
    )


def test_a_gpu_without_any_utilisation_sample_is_not_called_idle() -> None:
    """A source without the gate's series (a DCGM target serving power only): the gated mean is null, and
    its reason says the utilisation is missing, not that it stayed below the gate."""
    busy = node("busy", 10.0, 61.0, [(1, 4)], 50)
    (gpu,) = busy.gpus
    unknown = dataclasses.replace(gpu, util_ratio=np.full(len(gpu), np.nan))
    n = build_export(RUN, [dataclasses.replace(busy, gpus=[unknown])], WINDOWS, "0.1.0")["nodes"][0]
    assert n["power_w"]["gated_mean"] is None and n["power_w"]["mean"] is not None
    assert (
        n["null_reasons"]["power_w.gated_mean"]
        == "no utilisation sample (the gate's series) from GPU GPU-busy"
    )


def test_digest_and_notes() -> None:
    export = build()
    notes = export["lmx"]["notes"]
    assert digest(export) in notes and len(notes) <= 2000
    changed = build()
    changed["nodes"][0]["energy_j"] += 1
    assert digest(changed) != digest(export)


def test_export_validates_against_the_published_schema() -> None:
    import jsonschema

    from sparkwatch.core.export_schema import run_schema

    jsonschema.validate(plain(build()), run_schema())
    idle = build_export(RUN, [node("idle", 9.0, 9.0, [], 50)], WINDOWS, "0.1.0")  # nulls included
    jsonschema.validate(plain(idle), run_schema())
    broken = build()
    broken["nodes"][0]["power_w"]["gated_mean"] = "61"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(plain(broken), run_schema())


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("totals", "completion_tokens"), -7),
        (("lmx", "peakVramGb"), -1.0),
        (("windows", 0, "phase"), "TIMED"),
        (("windows", 0, "completion_tokens"), -3),
    ],
)
def test_the_schema_refuses_what_no_export_can_hold(where: tuple[Any, ...], value: Any) -> None:
    """Counts and sizes below 0, a phase no window may have: a hand edit the schema let through before."""
    import jsonschema

    from sparkwatch.core.export_schema import run_schema

    export = plain(build())
    *path, last = where
    target = export
    for step in path:
        target = target[step]
    target[last] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(export, run_schema())


def test_decode_scope_counts_only_windows_with_token_stamps() -> None:
    run = RunSpec(id="d", name="decode", t_start_ns=T0, t_end_ns=T0 + 40 * S, interval_s=0.1, scope="decode")
    export = build_export(run, [node("spark-1", 11.0, 61.0, [(20, 25), (30, 35)], 100)], WINDOWS, "0.1.0")
    windows = {w["id"]: w for w in export["windows"]}
    assert windows["r1"]["in_scope"] is True and windows["r2"]["in_scope"] is False  # r2 has no stamps
    assert windows["r2"]["verdict"] == "incomplete" and "token stamps" in windows["r2"]["reasons"][0]
    assert export["totals"]["completion_tokens"] == 380  # r1 only: energy and tokens from the same windows
    assert export["method"]["scope_s"] == pytest.approx(4.5)


def test_totals_say_why_they_are_null() -> None:
    export = build_export(RUN, [node("idle", 9.0, 9.0, [], 50)], WINDOWS, "0.1.0")
    reasons = export["totals"]["null_reasons"]
    assert export["totals"]["power_w_gated_mean_sum"] is None and "power_w_gated_mean_sum" in reasons


@pytest.mark.parametrize(
    ("status", "source", "reason"),
    [
        (500, {}, "HTTP status 500: a request not answered with 2xx is not measured"),
        (307, {}, "HTTP status 307: a request not answered with 2xx is not measured"),
        # a 200 the proxy saw cut short (core.windows.CUT_SHORT)
        (
            200,
            {"kind": "proxy", "upstream_broke_off": True},
            "the upstream broke off its answer (source.upstream_broke_off): a request that did not"
            " complete is not measured",
        ),
        (
            200,
            {"kind": "proxy", "client_disconnected": True, "client_left_unfinished": True},
            "the client hung up before the answer finished (source.client_left_unfinished): a request"
            " that did not complete is not measured",
        ),
        (
            200,
            {"kind": "proxy", "upstream_unfinished": True},
            "the upstream's stream ended without [DONE] or a finish reason (source.upstream_unfinished): a"
            " request that did not complete is not measured",
        ),
        (
            200,
            {"kind": "proxy", "upstream_error": True},
            "the upstream reported an error inside its answer (source.upstream_error): a request that did"
            " not complete is not measured",
        ),
        (
            None,
            {"kind": "proxy", "upstream_timed_out": True},
            "the upstream's answer outlasted the proxy's upstream timeout (source.upstream_timed_out): a"
            " request that did not complete is not measured",
        ),
    ],
)
def test_a_failed_request_is_reported_but_not_measured(
    status: int | None, source: dict[str, Any], reason: str
) -> None:
    busy = [(12, 14), (20, 25), (30, 35)]
    nodes = [node("spark-1", 11.0, 61.0, busy, 100)]
    # a failure during an idle stretch: measuring it would pull the gated figures toward idle
    failed = Window(
        "err", "timed", T0 + 16 * S, T0 + 19 * S, completion_tokens=0, http_status=status, source=source
    )
    export = build_export(RUN, nodes, [*WINDOWS, failed], "0.1.0")
    err = next(w for w in export["windows"] if w["id"] == "err")
    assert err["in_scope"] is False and err["verdict"] == "incomplete"
    assert err["reasons"] == [reason]
    assert export["method"]["scope_s"] == pytest.approx(10.05)  # the same scope as without it
    assert export["nodes"][0]["energy_j"] == pytest.approx(61.0 * 10 + 11.0 * 0.05)


@pytest.mark.parametrize(("extra_w", "shown"), [(30.0, "91.0"), (18.25, "79.3")])
def test_system_domains_reach_the_totals_and_the_lmx_notes_but_never_gpu_power(
    extra_w: float, shown: str
) -> None:
    """A node's sys_total (gated by its GPU) is its headline; the other node has none, so the totals are
    unknown with the node named, and the notes say so beside the GPU method, to one decimal as the report
    and lmx round it (79.25 is 79.3, half away from zero)."""
    busy = [(12, 14), (20, 25), (30, 35)]
    plain = node("spark-2", 11.0, 41.0, busy, 90)
    with_sensor = node("spark-1", 11.0, 61.0, busy, 100)
    gpu = with_sensor.gpus[0]
    system_energy = gpu.energy_j + extra_w * (gpu.t_ns - T0) / S  # the rail and more, with its own counter
    system = GpuTrack(
        gpu.t_ns, gpu.segment, gpu.max_gap_ns, gpu.power_w + extra_w, system_energy, gpu.util_ratio
    )
    with_sensor = dataclasses.replace(
        with_sensor, domains=[DomainInput("sys_total", "system", "hwmon:spbm", system)]
    )
    export = build_export(RUN, [with_sensor, plain], WINDOWS, "0.1.0")
    n1, n2 = export["nodes"]
    assert n1["system"]["headline_domain"] == "sys_total"
    assert n1["system"]["domains"][0]["power_w"]["gated_mean"] == pytest.approx(61.0 + extra_w)
    assert n1["power_w"]["gated_mean"] == pytest.approx(61.0)  # the GPU figure is untouched
    assert n2["system"] is None and n2["null_reasons"]["system"] == "no_sensor"
    assert export["totals"]["system_energy_j"] is None
    assert "spark-2" in export["totals"]["null_reasons"]["system_energy_j"]
    assert export["lmx"]["gpuPowerWatts"] == [61.0, 41.0]
    notes = export["lmx"]["notes"]
    assert f"spark-1 {shown} W (sys_total, hwmon:spbm); spark-2 n/a (no sensor)" in notes
    assert "not in gpuPowerWatts" in notes and digest(export) in notes


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(-3, 3), min_size=1, max_size=40),
    st.integers(0, 60),
    st.integers(1, 5),
)
def test_the_median_with_a_majority_shortcut_is_numpys(spread: list[int], repeats: int, value: int) -> None:
    """A value most spacings share (whole-ms scrape stamps), or none: the same float as ``np.median``."""
    values = np.array([*spread, *[value] * repeats], dtype=np.int64)
    np.random.default_rng(len(spread)).shuffle(values)
    assert median_of(values) == float(np.median(values))


def test_a_two_gpu_nodes_maximum_is_their_peak_together_and_null_with_a_reason_when_never_both_known() -> (
    None
):
    """Two GPUs busy at different times: the node's maximum is what they drew together (61 + 10 W), not the
    sum of their maxima (122 W). With their samples at disjoint times no moment has both: null, said."""
    first, second = node("a", 10.0, 61.0, [(20, 22)], 50), node("b", 10.0, 61.0, [(23, 25)], 50)
    both = dataclasses.replace(first, gpus=[*first.gpus, *second.gpus], gpu_uuids=["GPU-a", "GPU-b"])
    n = build_export(RUN, [both], WINDOWS, "0.1.0")["nodes"][0]
    assert n["power_w"]["max"] == pytest.approx(71.0) and "power_w.max" not in n["null_reasons"]
    (whole,) = first.gpus
    arrays = [f.name for f in dataclasses.fields(whole) if isinstance(getattr(whole, f.name), np.ndarray)]
    # one GPU's samples up to 22.5 s, the other's from there: each covers part of r1, never both at once
    apart = [
        dataclasses.replace(whole, **{name: getattr(whole, name)[part] for name in arrays})
        for part in (slice(0, 225), slice(226, None))
    ]
    two = dataclasses.replace(first, gpus=apart, gpu_uuids=["GPU-a", "GPU-b"])
    n = build_export(RUN, [two], WINDOWS, "0.1.0")["nodes"][0]
    assert n["power_w"]["max"] is None and n["power_w"]["mean"] is not None
    assert n["null_reasons"]["power_w.max"] == "no time inside the scope at which every GPU's power is known"
