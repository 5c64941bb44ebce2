"""Power domains beside the GPU rail: gated by the node's GPU utilisation, the whole-node one picked by
preference, never summed with the GPU figures."""

from __future__ import annotations

import numpy as np
import pytest

from sparkwatch.core.domains import DomainInput, domain_figures, gate_util, headline_domain, listed
from sparkwatch.core.tracks import GpuPoint, GpuTrack
from sparkwatch.core.windows import union

S = 1_000_000_000


def track(times_s: list[float], util: list[float | None], power: float = 0.0) -> GpuTrack:
    return GpuTrack.from_points(
        GpuPoint(int(t * S), 0, 0.1, power, None, u) for t, u in zip(times_s, util, strict=True)
    )


def domain(name: str, kind: str = "system", source: str = "hwmon:spbm") -> DomainInput:
    return DomainInput(name, kind, source, track([0.0], [None]))


def test_gate_util_is_the_busiest_gpus_next_reading_within_a_gap() -> None:
    gpus = [track([0.0, 0.1, 0.2], [0.1, 0.9, 0.2]), track([0.0, 0.1, 0.2], [0.6, 0.3, None])]
    at = np.array([0, int(0.05 * S), int(0.1 * S), int(0.2 * S), int(0.25 * S), int(5 * S)], dtype=np.int64)
    util = gate_util(gpus, at)
    assert util[:4].tolist() == [0.6, 0.9, 0.9, 0.2]
    assert np.isnan(util[4]) and np.isnan(util[5])  # after the last reading: no GPU says
    assert np.isnan(gate_util([], at)).all()


def test_headline_prefers_a_wall_meter_then_dc_input_then_sys_total_then_power_meter_never_a_rail() -> None:
    assert (
        headline_domain([domain("sys_total"), domain("wall", source="meter:shelly"), domain("dc_input")])
        == "wall"
    )
    assert headline_domain([domain("sys_total"), domain("dc_input")]) == "dc_input"
    assert headline_domain([domain("module_power_socket_0", "module"), domain("sys_total")]) == "sys_total"
    assert headline_domain([domain("power_meter_power1", source="hwmon:power_meter")]) == "power_meter_power1"
    assert headline_domain([domain("gpu", "gpu"), domain("cpu_p", "cpu")]) is None
    assert headline_domain([domain("dc_input", "gpu")]) is None  # the name alone does not make it system
    # a meter whose domain was renamed in nodes.toml is still the node's wall meter (it lost to dc_input)
    assert headline_domain([domain("dc_input"), domain("plug", source="meter:redfish")]) == "plug"


def test_domains_are_listed_headline_first_then_by_kind_and_name_whatever_order_a_source_found_them() -> None:
    """The store keeps the order the agent first streamed its channels, a TSDB its own: the export's listing
    (``domains[0]``) is the same from either."""
    found = [
        domain("gpu_rail", "gpu"),
        domain("sys_total"),
        domain("cpu_p", "cpu"),
        domain("wall", source="meter:shelly"),
        domain("dc_input"),
        domain("module_power_socket_0", "module"),
    ]
    order = ["wall", "dc_input", "sys_total", "module_power_socket_0", "cpu_p", "gpu_rail"]
    assert [d.domain for d in listed(found)] == order
    assert [d.domain for d in listed(found[::-1])] == order
    starts, ends = np.array([0], np.int64), np.array([S], np.int64)
    figures = [domain_figures(f, union([(0, S)]), 0.5, starts, ends) for f in (found, found[::-1])]
    assert figures[0].system == figures[1].system
    assert [d["domain"] for d in (figures[0].system or {})["domains"]] == order
    assert [[d["domain"] for d in w] for w in figures[1].windows] == [order]


def test_a_domain_is_gated_by_the_nodes_gpu_and_measured_like_one() -> None:
    times = [0.1 * k for k in range(21)]
    busy = [None if k == 0 else (0.9 if 5 < k <= 15 else 0.0) for k in range(21)]
    gpu = track(times, busy, power=40.0)
    system = GpuTrack.from_points(
        GpuPoint(int(t * S), 0, 0.1, 80.0 if 5 <= k <= 15 else 25.0, None, None) for k, t in enumerate(times)
    )
    system = GpuTrack(
        system.t_ns,
        system.segment,
        system.max_gap_ns,
        system.power_w,
        system.energy_j,
        gate_util([gpu], system.t_ns),
    )
    scope = union([(0, 2 * S)])
    starts = np.array([int(0.6 * S)], dtype=np.int64)
    ends = np.array([int(1.5 * S)], dtype=np.int64)
    figures = domain_figures(
        [DomainInput("sys_total", "system", "hwmon:spbm", system)], scope, 0.5, starts, ends
    )
    assert figures.system is not None and figures.headline == "sys_total"
    (entry,) = figures.system["domains"]
    assert entry["power_w"]["gated_mean"] == pytest.approx(80.0)  # only the busy intervals, all at 80 W
    assert entry["energy_method"] == "trapezoid"
    assert figures.headline_energy_j == pytest.approx(entry["energy_j"])
    assert figures.windows[0][0]["energy_j"] == pytest.approx(0.9 * 80.0)
    assert domain_figures([], scope, 0.5, starts, ends).system is None


def test_a_domains_unknown_gated_mean_says_why() -> None:
    """Gated by the node's GPUs: a threshold they never reached leaves every domain's gated mean unknown,
    which the table's system W column showed as n/a without a word."""
    times = [0.1 * k for k in range(21)]
    idle = GpuTrack.from_points(GpuPoint(int(t * S), 0, 0.1, 25.0, None, 0.2) for t in times)
    figures = domain_figures(
        [DomainInput("dc_input", "system", "hwmon:spbm", idle)],
        union([(0, 2 * S)]),
        0.88,
        np.array([0], np.int64),
        np.array([S], np.int64),
    )
    assert figures.system is not None and figures.system["domains"][0]["power_w"]["gated_mean"] is None
    assert figures.null_reasons["system.dc_input.power_w.gated_mean"] == (
        "no interval inside the scope with the node's GPU utilisation >= 0.88"
    )
    later = domain_figures(
        [DomainInput("dc_input", "system", "hwmon:spbm", idle)],
        union([(5 * S, 6 * S)]),  # after its last sample: nothing covers it
        0.5,
        np.array([5 * S], np.int64),
        np.array([6 * S], np.int64),
    )
    assert (
        later.null_reasons["system.dc_input.power_w.gated_mean"]
        == "no valid sample interval inside the scope"
    )
    blind = GpuTrack.from_points(GpuPoint(int(t * S), 0, 0.1, 25.0, None, None) for t in times)  # no gate
    unknown = domain_figures(
        [DomainInput("dc_input", "system", "hwmon:spbm", blind)],
        union([(0, 2 * S)]),
        0.5,
        np.array([0], np.int64),
        np.array([S], np.int64),
    )
    assert unknown.null_reasons["system.dc_input.power_w.gated_mean"] == (
        "no utilisation sample (the gate's series) from the node's GPUs"
    )
