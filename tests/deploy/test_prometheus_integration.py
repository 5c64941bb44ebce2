"""A real Prometheus, with the shipped config and rules, scraping real agents and the coordinator.

promtool checks syntax and the rules' arithmetic on made-up series; this checks the chain on what the
processes really serve: targets up with their node labels, the contract metrics of both nodes (and the
absent ones absent), the recording rules evaluating to the loads we set, the coordinator's run gauges, and
every query of the Grafana dashboards parsing and returning data.

Nodes: spark-1 runs the sim backend at utilisation 0.8 (5 W + 50 W × 0.8 = 45 W); spark-2 runs the real
NVML binding on the fake GB10 at utilisation 0.2 (5 W + 0.45 W × 20 = 14 W, below the gate), with an spbm
hwmon sensor, a fixed /proc/meminfo and instant-power reads failing after a good probe (read errors).
"""

from __future__ import annotations

import os
import pathlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from test_grafana_dashboards import dashboard_queries, load_dashboards, recording_rules, variable_queries

from doubles.fake_nvml import write_control
from doubles.shelly import ShellyPlug
from helpers.app_thread import AppThread
from helpers.processes import AgentProcess, Coordinator, free_port, sim_load
from helpers.prometheus import PROMETHEUS, Prometheus, PrometheusError

#: Every test here on one xdist worker (the suite runs with --dist loadgroup): the module's rig of engines,
#: agents and coordinators is set up once, not once on each worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_prometheus_integration")
ROOT = pathlib.Path(__file__).resolve().parents[2]
PROM_DIR = ROOT / "deploy" / "prometheus"

#: Values for Grafana's variables, as a dashboard over the last minutes would have them.
GRAFANA_VARIABLES = {"node": ".*", "__rate_interval": "1m", "__interval": "5s", "__range": "5m"}

GIB = 1024**3
SIM_USED_BYTES = 6 * GIB  # the sim's OS share, no model resident
MEMINFO_TOTAL_KB, MEMINFO_AVAILABLE_KB = 124546968, 13876420
GB10_MEMINFO = f"""MemTotal:       {MEMINFO_TOTAL_KB} kB
MemFree:         5230144 kB
MemAvailable:   {MEMINFO_AVAILABLE_KB} kB
Buffers:           11204 kB
Cached:          8102332 kB
SReclaimable:     712236 kB
SwapTotal:      16777212 kB
SwapFree:       16514044 kB
"""
GB10_USED_BYTES = (MEMINFO_TOTAL_KB - MEMINFO_AVAILABLE_KB) * 1024

#: Served by both nodes (sim and fake GB10 alike).
CONTRACT_BOTH_NODES = (
    "sparkwatch_gpu_power_watts",
    "sparkwatch_gpu_energy_joules_total",
    "sparkwatch_gpu_utilization_ratio",
    "sparkwatch_gpu_temperature_celsius",
    "sparkwatch_gpu_sm_clock_hertz",
    "sparkwatch_gpu_process_memory_bytes",
    "sparkwatch_gpu_info",
    "sparkwatch_field_supported",
    "sparkwatch_memory_total_bytes",
    "sparkwatch_memory_available_bytes",
    "sparkwatch_memory_used_bytes",
    "sparkwatch_memory_page_cache_bytes",
    "sparkwatch_agent_info",
    "sparkwatch_agent_gpu_up",
    "sparkwatch_agent_samples_total",
    "sparkwatch_agent_dropped_samples_total",
    "sparkwatch_agent_interval_seconds",
    "sparkwatch_agent_last_sample_timestamp_seconds",
)
#: The coordinator's remote-written copy of an agent series (no job, no instance label).
WRITTEN_COPY = 'sparkwatch_gpu_power_watts{job=""}'
#: Rules with a value for both nodes once both have been scraped long enough (the gated ones: spark-1 only).
RULES_BOTH_NODES = (
    "node_gpu:sparkwatch_gpu_energy_joules:rate1m",
    "node:sparkwatch_gpu_energy_joules:rate1m",
    "node:sparkwatch_gpu_power_watts:sum",
    "node:sparkwatch_memory_used_bytes:max1m",
    "node:sparkwatch_memory_used:ratio",
)


@dataclass
class Stack:
    prom: Prometheus
    run: dict[str, Any]  # the open run
    ended_run_id: str


def substitute(expr: str) -> str:
    """Replace Grafana variables ($node, ${node}, $__range, …); an unknown one fails the test."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in GRAFANA_VARIABLES, f"no test value for ${name} in {expr!r}"
        return GRAFANA_VARIABLES[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def all_queries() -> list[tuple[str, str]]:
    return [
        (f"{name} {where}", substitute(expr))
        for name, d in load_dashboards().items()
        for where, expr in dashboard_queries(d)
    ]


def shipped_config_for(tmp: pathlib.Path, targets: dict[str, list[dict[str, Any]]]) -> pathlib.Path:
    """The shipped prometheus.yml with 1 s intervals, local target files and the rules by absolute path."""
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(PROM_DIR / pattern) for pattern in config["rule_files"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(targets)
    for name, job in jobs.items():
        job.update(scrape_interval="1s", scrape_timeout="1s")
        target_file = tmp / f"{name}.targets.yml"
        target_file.write_text(yaml.safe_dump(targets[name]))
        (sd,) = job["file_sd_configs"]
        sd["files"] = [str(target_file)]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def wait_until(problems: Callable[[], list[str]], timeout_s: float) -> None:
    """Poll until ``problems()`` is empty; on time-out just return (the tests then say what is missing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and problems():
        time.sleep(0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: pathlib.Path) -> Iterator[Stack]:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail("prometheus missing: install the Debian package prometheus (.ci/run does)")
    tmp = tmp_path_factory.mktemp("prometheus_stack")
    chip = tmp / "hwmon" / "hwmon0"
    chip.mkdir(parents=True)
    for name, content in {
        "name": "spbm",
        "power1_label": "sys_total",
        "power1_input": "31000000",  # µW
        "energy1_label": "sys_total",
        "energy1_input": "5000000",  # µJ
        "prochot": "0",  # spbm's status attributes (spark_hwmon spbm.c: "%u\n")
        "pl_level": "2",
    }.items():
        (chip / name).write_text(content + "\n")
    (tmp / "meminfo").write_text(GB10_MEMINFO)
    control = tmp / "nvml.control"
    write_control(control, util=20)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY_SOCKET"))}
    gb10_env = {
        **env,
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_PROFILE": "gb10",
        "FAKE_NVML_CONTROL": str(control),
    }
    stops: list[Callable[[], object]] = []
    try:
        sim = AgentProcess(["--backend", "sim", "--node", "spark-1", "--interval", "0.5"], env, free_port())
        stops.append(sim.stop)
        gb10_args = ["--node", "spark-2", "--interval", "0.5", "--hwmon-root", str(tmp / "hwmon")]
        gb10 = AgentProcess([*gb10_args, "--meminfo-path", str(tmp / "meminfo")], gb10_env, free_port())
        stops.append(gb10.stop)
        sim.wait_ready()
        gb10.wait_ready()
        sim_load(sim, 0.8)
        # After the probe found instant power supported: every read of it now fails (a read error).
        write_control(control, util=20, fail_field=["186:0:3"])

        plug = AppThread(ShellyPlug(power_w=95.0).app(), free_port())  # spark-2's wall meter
        plug.start()
        stops.append(plug.stop)
        assert plug.ready.wait(10)

        coord_dir = tmp / "coordinator"
        coord_dir.mkdir()
        nodes = "".join(
            f'[nodes.{name}]\nurl = "ws://127.0.0.1:{a.port}"\n'
            for name, a in (("spark-1", sim), ("spark-2", gb10))
        )
        nodes += f'[nodes.spark-2.meter]\nkind = "shelly"\nurl = "http://127.0.0.1:{plug.port}"\n'
        nodes += "interval_s = 0.5\n"
        coord_port = free_port()
        config = shipped_config_for(
            tmp,
            {
                "sparkwatch-agent": [
                    {"targets": [f"127.0.0.1:{sim.port}"], "labels": {"node": "spark-1"}},
                    {"targets": [f"127.0.0.1:{gb10.port}"], "labels": {"node": "spark-2"}},
                ],
                "sparkwatch-coordinator": [{"targets": [f"127.0.0.1:{coord_port}"]}],
            },
        )
        # As docs/fleets.md sets one up: it scrapes the agents and takes the coordinator's remote write too,
        # so every agent series is held twice (scraped with job and instance, written without).
        prom = Prometheus(config, tmp / "tsdb", tmp / "prometheus.log", remote_write_receiver=True)
        stops.append(prom.stop)
        prom.wait_ready()
        coord = Coordinator(coord_dir, nodes, port=coord_port, args=["--remote-write", prom.write_url])
        coord.start()
        stops.append(coord.stop)
        _, warm_up = coord.call("POST", "/v1/runs", {"name": "warm-up", "interval_s": 0.5})
        assert coord.call("POST", f"/v1/runs/{warm_up['id']}/end")[0] == 200
        status, run = coord.call("POST", "/v1/runs", {"name": "bench-1", "interval_s": 0.5})
        assert status == 201

        def problems() -> list[str]:
            found = []
            targets = prom.api("/api/v1/targets")["activeTargets"]
            if len(targets) != 3 or any(t["health"] != "up" for t in targets):
                found.append("targets")
            for where, expr in [*all_queries(), *((r, r) for r in recording_rules())]:
                try:
                    if not prom.query(expr):
                        found.append(where)
                except PrometheusError:
                    found.append(where)
            for name in (*CONTRACT_BOTH_NODES, *RULES_BOTH_NODES, WRITTEN_COPY):
                if len(prom.query(f"count by (node) ({name})")) < 2:
                    found.append(name)
            return found

        wait_until(problems, timeout_s=45)  # the energy rate reads a minute that ended 10 s ago
        yield Stack(prom=prom, run=run, ended_run_id=warm_up["id"])
    finally:
        for stop in reversed(stops):
            stop()


def test_targets_are_up_with_their_node_labels(stack: Stack) -> None:
    targets = stack.prom.api("/api/v1/targets")["activeTargets"]
    assert sorted((t["labels"]["job"], t["labels"].get("node", ""), t["health"]) for t in targets) == [
        ("sparkwatch-agent", "spark-1", "up"),
        ("sparkwatch-agent", "spark-2", "up"),
        ("sparkwatch-coordinator", "", "up"),
    ]
    # honor_labels: the agent's own node label stays `node`, nothing is renamed `exported_node`.
    assert stack.prom.query('{exported_node!=""}') == []


def test_contract_metrics_of_both_nodes(stack: Stack) -> None:
    prom = stack.prom
    missing = {
        m: nodes
        for m in CONTRACT_BOTH_NODES
        if (nodes := set(prom.values(f"count by (node) ({m})"))) != {"spark-1", "spark-2"}
    }
    assert missing == {}
    supported = prom.values('sparkwatch_field_supported{field="memory_info"}')
    assert supported == {"spark-1": 0.0, "spark-2": 0.0}  # GB10: NOT_SUPPORTED, reported as such
    # Unknown values are absent series, never 0: no device memory or power limit on unified memory, and
    # spark-2's failing instant-power reads leave a gap (and count as read errors).
    for absent in ("sparkwatch_gpu_memory_used_bytes", "sparkwatch_gpu_power_limit_watts"):
        assert prom.query(absent) == [], absent
    assert set(prom.values("sparkwatch_gpu_power_instant_watts")) == {"spark-1"}
    errors = prom.query("sparkwatch_agent_read_errors_total")
    assert {(s["metric"]["node"], s["metric"]["field"]) for s in errors} == {("spark-2", "power_instant")}
    sensors = prom.query("sparkwatch_sensor_power_watts")
    # spark-2's hwmon tree, and the sim's spbm on spark-1 (busy at 0.8: 20 W + 45 W + 8 W × 0.8)
    assert {
        (s["metric"]["node"], s["metric"]["sensor"], s["metric"]["kind"], s["value"][1]) for s in sensors
    } == {
        ("spark-2", "sys_total", "system", "31"),
        ("spark-1", "sys_total", "system", "71.4"),
        ("spark-1", "dc_input", "system", "74.256"),
        ("spark-1", "gpu", "gpu", "45"),
    }
    status = prom.query("sparkwatch_sensor_status")
    assert {(s["metric"]["node"], s["metric"]["status"], s["value"][1]) for s in status} == {
        ("spark-2", "prochot", "0"),
        ("spark-2", "pl_level", "2"),
    }


def test_recording_rules_evaluate_on_the_real_series(stack: Stack) -> None:
    prom = stack.prom
    empty = [record for record in recording_rules() if not prom.query(record)]
    assert empty == []
    for record in RULES_BOTH_NODES:
        assert set(prom.values(f"count by (node) ({record})")) == {"spark-1", "spark-2"}, record
    # Gate: spark-1 is busy (45 W at 0.8); spark-2 at 0.2 has no gated value at all, not 0.
    assert prom.values("node_gpu:sparkwatch_gpu_power_watts:avg1m_gated") == {"spark-1": pytest.approx(45.0)}
    assert prom.values("node_gpu:sparkwatch_gpu_power_watts:avg5m_gated") == {"spark-1": pytest.approx(45.0)}
    assert prom.values("node:sparkwatch_gpu_power_watts:sum") == {
        "spark-1": pytest.approx(45.0),
        "spark-2": pytest.approx(14.0),
    }
    assert prom.values(":sparkwatch_gpu_power_watts:sum") == {"": pytest.approx(59.0)}
    assert prom.values(":sparkwatch_memory_used_bytes:sum") == {"": SIM_USED_BYTES + GB10_USED_BYTES}
    assert prom.values("node:sparkwatch_memory_used:ratio")["spark-2"] == pytest.approx(
        GB10_USED_BYTES / (MEMINFO_TOTAL_KB * 1024)
    )
    # The rate's window is not full yet (Prometheus divides by the whole minute), so only the shape is
    # checked here; the numbers are asserted in deploy/prometheus/tests/.
    # Both from one evaluation (the rate still grows every second): the total is its group's last rule, so
    # at the total's newest timestamp the per-node rule has been written too.
    (newest,) = prom.query("timestamp(:sparkwatch_gpu_energy_joules:rate1m)")
    at = float(newest["value"][1])
    per_node = prom.values("node:sparkwatch_gpu_energy_joules:rate1m", at=at)
    assert set(per_node) == {"spark-1", "spark-2"} and all(v > 0 for v in per_node.values())
    total = prom.values(":sparkwatch_gpu_energy_joules:rate1m", at=at)
    assert total == {"": pytest.approx(sum(per_node.values()))}


def test_a_series_held_twice_is_counted_once(stack: Stack) -> None:
    """Scraped and remote-written, each agent series is there twice; the rules and the dashboards' sums
    count it once (before, every sum over nodes came out doubled)."""
    prom = stack.prom
    copies = prom.query("count by (node, gpu) (sparkwatch_gpu_power_watts)")
    assert {(s["metric"]["node"], s["value"][1]) for s in copies} == {("spark-1", "2"), ("spark-2", "2")}
    for record in recording_rules():
        per_series = prom.query(f"count by (node, gpu, uuid) ({record})")
        assert per_series and all(s["value"][1] == "1" for s in per_series), (record, per_series)
    assert prom.values(":sparkwatch_gpu_power_watts:sum") == {"": pytest.approx(59.0)}
    memory_sums = [
        (w, e)
        for w, e in all_queries()
        if e.startswith(("sum(", "max_over_time(sum(")) and "memory_used" in e
    ]
    assert len(memory_sums) == 3, memory_sums
    for where, expr in memory_sums:
        assert prom.values(expr) == {"": SIM_USED_BYTES + GB10_USED_BYTES}, where


def test_run_gauges_show_open_runs_only(stack: Stack) -> None:
    prom = stack.prom
    active = prom.query("sparkwatch_coordinator_run_active")
    assert [(s["metric"]["run_id"], s["value"][1]) for s in active] == [(stack.run["id"], "1")]
    # the run id is the only label of its own: a run's name (from a command line) is never one
    own = {"__name__", "run_id", "job", "instance"}
    for family in ("run_active", "run_start_timestamp_seconds"):
        series = prom.query(f"sparkwatch_coordinator_{family}")
        assert series and all(set(s["metric"]) == own for s in series), series
    starts = prom.values("sparkwatch_coordinator_run_start_timestamp_seconds", label="run_id")
    assert starts == {stack.run["id"]: pytest.approx(stack.run["t_start_ns"] / 1e9, abs=1e-3)}
    assert stack.ended_run_id not in starts
    assert prom.values("sparkwatch_coordinator_open_runs") == {"": 1.0}


def test_every_dashboard_query_parses_and_returns_data(stack: Stack) -> None:
    prom = stack.prom
    queries = all_queries()
    assert len(queries) > 40
    failures = {}
    for where, expr in queries:
        try:
            if not prom.query(expr):
                failures[where] = f"no data: {expr}"
        except PrometheusError as err:
            failures[where] = f"{err}: {expr}"
    assert failures == {}
    # The node variable's label_values() as Grafana asks for it.
    for _, query in (q for d in load_dashboards().values() for q in variable_queries(d)):
        (metric,) = re.findall(r"label_values\((\w+), node\)", query)
        assert prom.api("/api/v1/label/node/values", **{"match[]": metric}) == ["spark-1", "spark-2"]


def test_the_coordinators_wall_meter_reading_is_scraped_under_the_agents_node_name(stack: Stack) -> None:
    """The shipped config's coordinator job gets each meter's latest reading with the node label the
    agent's own series carry (the node-overview dashboard plots it beside the hwmon channels)."""
    prom = stack.prom
    (series,) = prom.query('sparkwatch_meter_power_watts{job="sparkwatch-coordinator"}')
    assert {k: v for k, v in series["metric"].items() if k not in ("job", "instance")} == {
        "__name__": "sparkwatch_meter_power_watts",
        "node": "spark-2",
        "domain": "wall",
        "source": "meter:shelly",
    }
    assert series["metric"]["job"] == "sparkwatch-coordinator" and float(series["value"][1]) == 95.0
    assert prom.values("sparkwatch_meter_poll_interval_seconds") == {"spark-2": 0.5}
