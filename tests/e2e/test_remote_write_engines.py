"""`sparkwatch coordinator --remote-write URL` end to end: two simulated agents sampling at 10 Hz stream to
two real coordinators, one remote-writing to a real Prometheus (its receiver on), one to a real
VictoriaMetrics. Once the coordinators have stopped (a graceful stop sends what is queued), every sample
each stored is in its engine with its value and its time in ms on the coordinator's clock (the agent's
monotonic time plus the offset of one of the link's clock-probe rounds for its boot; spark-2's wall clock
runs 3 s ahead, so its own times would not match), and the engine holds no other: the same count per node.
Bad remote-write settings end the coordinator with one line before it starts."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from helpers.clocks import faketime_env, set_fake_time
from helpers.processes import AgentProcess, Coordinator, free_port, sim_load, wait_connected, wait_stored
from helpers.prometheus import Prometheus
from helpers.receivers import start_receivers
from helpers.victoria import Victoria
from sparkwatch.store import Store

#: Every test here on one xdist worker (the suite runs with --dist loadgroup): the module's rig of engines,
#: agents and coordinators is set up once, not once on each worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_remote_write_engines")
NAMES = ("spark-1", "spark-2")
#: spark-2's wall clock runs this far ahead (libfaketime; its monotonic clock stays true): its samples'
#: own times are not what remote write stamps them with.
SKEW_S = 3.0
SPAN_S = 3600.0  # far wider than the test: every sample the engines hold
#: Series the engines must hold for each node (a sim GB10 with its spbm sensors).
EXPECTED = {
    "sparkwatch_gpu_power_watts",
    "sparkwatch_gpu_energy_joules_total",
    "sparkwatch_gpu_utilization_ratio",
    "sparkwatch_gpu_clock_event_active",
    "sparkwatch_memory_used_bytes",
    "sparkwatch_sensor_power_watts",
    "sparkwatch_gpu_info",
    "sparkwatch_field_supported",
    "sparkwatch_agent_info",
    "sparkwatch_agent_last_sample_timestamp_seconds",
}


@dataclass
class Stored:
    """A node's samples as its coordinator stored them, in order: GPU power, memory used, the agent's wall
    time (ms), and the times in ms remote write may have stamped it with (one per clock-probe round)."""

    power: list[float]
    memory: list[float]
    wall_ms: list[float]
    stamps_ms: list[set[int]]


@dataclass
class Rig:
    prometheus: Prometheus
    victoria: Victoria
    stored: dict[str, dict[str, Stored]]  # engine → node → what that engine's coordinator stored
    metrics: dict[str, str]  # engine → its coordinator's /metrics just before the stop


def read_store(db: pathlib.Path) -> dict[str, Stored]:
    """Through the store's own read path (the one the export uses), every boot of each node."""
    store = Store.read_only(db)
    try:
        out = {}
        for node in NAMES:
            boot = store.latest_boot(node)
            assert boot is not None, node
            block = store.boot_samples(node, boot[0]).read("t_wall_ns", 0, 2**63 - 1)
            c = block.columns
            assert list(c["gpu_n"]) == [1] * len(block)  # one GPU per sample
            rounds = store.offset_rounds(node, 0, 2**62)[boot[0]]
            monos = {r.mono_offset_ns for r in rounds}
            assert rounds and None not in monos, rounds  # every round measured the monotonic clock
            out[node] = Stored(
                list(map(float, c["gpu_power_w"])),
                list(map(float, c["mem_used_bytes"])),
                [int(t) / 1e6 for t in c["t_wall_ns"]],
                [{(int(t) + m) // 1_000_000 for m in monos} for t in c["t_mono_ns"]],  # type: ignore[operator]
            )
            assert len(block) == store.count_samples(node)
        return out
    finally:
        store.close()


def metrics_text(coord: Coordinator) -> str:
    with urllib.request.urlopen(f"{coord.url}/metrics", timeout=5) as r:
        return r.read().decode()


def counter(text: str, outcome: str) -> float:
    found = re.search(
        rf'^sparkwatch_coordinator_remote_write_samples_total\{{outcome="{outcome}"\}} (\S+)', text, re.M
    )
    assert found, text
    return float(found.group(1))


def wait_sent(coord: Coordinator, timeout_s: float = 20.0) -> str:
    """Until the coordinator has sent something and holds nothing back; its /metrics then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = metrics_text(coord)
        pending = re.search(r"^sparkwatch_coordinator_remote_write_pending_samples (\S+)", text, re.M)
        if counter(text, "sent") > 0 and pending and float(pending.group(1)) < 100:
            return text
        time.sleep(0.2)
    raise AssertionError(f"nothing sent: {text}")


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("remote_write")
    prometheus, victoria = start_receivers(tmp)
    sim = ["--backend", "sim", "--interval", "0.1", "--node"]
    set_fake_time(tmp / "skew.rc", f"{SKEW_S:+g}")
    envs = [dict(os.environ), dict(os.environ) | faketime_env(tmp / "skew.rc")]
    agents = [AgentProcess([*sim, n], env, free_port()) for n, env in zip(NAMES, envs, strict=True)]
    nodes = "".join(
        f'[nodes.{n}]\nurl = "ws://127.0.0.1:{a.port}"\n' for n, a in zip(NAMES, agents, strict=True)
    )
    coords: dict[str, Coordinator] = {}
    try:
        for engine in (prometheus, victoria):
            engine.wait_ready()
        for agent in agents:
            agent.wait_ready()
        for name, engine in (("prometheus", prometheus), ("victoriametrics", victoria)):
            (tmp / name).mkdir()
            coords[name] = Coordinator(tmp / name, nodes, args=["--remote-write", engine.write_url])
            coords[name].start()
        for coord in coords.values():
            wait_connected(coord, len(NAMES))
            # a run open: every clock-probe round is stored, so each stamp is one the store can name (an
            # idle link stores a round a minute and stamps with every round, within the probes' noise)
            coord.call("POST", "/v1/runs", {"name": "remote write", "interval_s": 0.1})
        for util in (0.8, 0.3):  # values that move
            for agent in agents:
                sim_load(agent, util)
            time.sleep(1.5)
        for coord in coords.values():
            wait_stored(coord, *agents)
        metrics = {name: wait_sent(coord) for name, coord in coords.items()}
        for coord in coords.values():
            coord.stop()  # graceful: the links stop, then what is queued is sent
        stored = {name: read_store(coord.db) for name, coord in coords.items()}
        victoria.settle('{__name__=~"sparkwatch_.*"}')
        yield Rig(prometheus, victoria, stored, metrics)
    finally:
        for coord in coords.values():
            coord.stop()
        for agent in agents:
            agent.stop()
        prometheus.stop()
        victoria.stop()


def prometheus_samples(rig: Rig, metric: str, node: str) -> dict[int, float]:
    """Raw samples by a range selector (Prometheus answers them as [seconds with ms, "value"])."""
    (series,) = rig.prometheus.query(f'{metric}{{node="{node}"}}[{SPAN_S:.0f}s]')
    return {round(float(t) * 1000): float(v) for t, v in series["values"]}


def victoria_samples(rig: Rig, metric: str, node: str) -> dict[int, float]:
    (series,) = rig.victoria.export(f'{metric}{{node="{node}"}}')
    pairs = list(zip(series["timestamps"], series["values"], strict=True))
    assert len({t for t, _ in pairs}) == len(pairs)  # no sample written twice
    return {int(t): float(v) for t, v in pairs}


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_every_stored_sample_is_in_the_engine_with_its_value_and_time(rig: Rig, engine: str) -> None:
    read = prometheus_samples if engine == "prometheus" else victoria_samples
    for node in NAMES:
        stored = rig.stored[engine][node]
        assert len(stored.power) > 20  # seconds of 10 Hz sampling
        power = sorted(read(rig, "sparkwatch_gpu_power_watts", node).items())
        memory = sorted(read(rig, "sparkwatch_memory_used_bytes", node).items())
        times = sorted(read(rig, "sparkwatch_agent_last_sample_timestamp_seconds", node).items())
        assert len(power) == len(memory) == len(times) == len(stored.power)  # one each, none other
        assert [v for _, v in power] == stored.power and [v for _, v in memory] == stored.memory
        for (t_ms, _), (m_ms, _), (s_ms, _), stamps in zip(
            power, memory, times, stored.stamps_ms, strict=True
        ):
            assert t_ms == m_ms == s_ms and t_ms in stamps, (t_ms, stamps)
        # the value is the agent's own wall time in s; VictoriaMetrics keeps it to about 12 digits (the ms)
        worst_ms = max(abs(v * 1000 - w) for (_, v), w in zip(times, stored.wall_ms, strict=True))
        assert worst_ms <= 1.0 + 1e-6, worst_ms


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_the_engine_holds_the_agents_series_and_the_coordinator_counted_no_drop(
    rig: Rig, engine: str
) -> None:
    if engine == "prometheus":
        names = set(rig.prometheus.api("/api/v1/label/__name__/values"))
        info = rig.prometheus.query('sparkwatch_gpu_info{node="spark-1"}')[0]["metric"]
    else:
        names = {s["metric"]["__name__"] for s in rig.victoria.export('{__name__=~"sparkwatch_.*"}')}
        info = rig.victoria.export('sparkwatch_gpu_info{node="spark-1"}')[0]["metric"]
    assert names >= EXPECTED
    assert info["memory_model"] == "unified" and info["gpu"] == "0" and info["uuid"]
    text = rig.metrics[engine]
    for outcome in ("dropped_queue_full", "dropped_rejected", "dropped_unreadable", "dropped_stopped"):
        assert counter(text, outcome) == 0, outcome
    assert "sparkwatch_coordinator_remote_write_capacity_samples 50000.0" in text


def test_an_agent_that_stops_goes_stale_in_prometheus_at_once(rig: Rig, tmp_path: pathlib.Path) -> None:
    """An agent stops while its coordinator remote-writes: its series end with Prometheus' staleness marker
    just after its last sample, so an instant query answers nothing for it (before, its last values for the
    5 min lookback: a dashboard showed a dead node drawing power); its samples stay, and the coordinator's
    own /metrics counts no drop."""
    agent = AgentProcess(
        ["--backend", "sim", "--interval", "0.1", "--node", "spark-9"], dict(os.environ), free_port()
    )
    coord = Coordinator(
        tmp_path,
        f'[nodes.spark-9]\nurl = "ws://127.0.0.1:{agent.port}"\n',
        args=["--remote-write", rig.prometheus.write_url],
    )
    try:
        agent.wait_ready()
        coord.start()
        wait_connected(coord, 1)
        wait_stored(coord, agent)
        wait_sent(coord)
        assert rig.prometheus.values('sparkwatch_gpu_power_watts{node="spark-9"}'), "no value while it runs"
        agent.stop()
        deadline = time.monotonic() + 20
        while (
            rig.prometheus.query('sparkwatch_gpu_power_watts{node="spark-9"}') and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert rig.prometheus.query('{node="spark-9", __name__=~"sparkwatch_gpu_.*"}') == []
        (series,) = rig.prometheus.query('sparkwatch_gpu_power_watts{node="spark-9"}[1h]')
        assert len(series["values"]) > 5  # what was sent is kept
        text = metrics_text(coord)
        for outcome in ("dropped_queue_full", "dropped_rejected", "dropped_unreadable"):
            assert counter(text, outcome) == 0, outcome
    finally:
        coord.stop()
        agent.stop()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--remote-write", "ftp://x/api/v1/write"], "must be an http:// or https:// URL"),
        (["--remote-write", "https://u:p@x/api/v1/write"], "credentials do not belong in the URL"),
        (
            ["--remote-write", "https://x/api/v1/write", "--remote-write-bearer-token-file", "/nonexistent"],
            "cannot read the remote-write bearer token file /nonexistent",
        ),
        (["--remote-write-bearer-token-file", "/nonexistent"], "need --remote-write URL"),
        (["--remote-write", "http://x:9090/api/v1/query/"], "is a read endpoint, not a receiver's write"),
        (
            ["--remote-write", "http://x/api/v1/write", "--remote-write", "http://y/api/v1/write"],
            "argument --remote-write: may be given only once",
        ),
    ],
)
def test_bad_remote_write_settings_end_the_start_with_one_line(
    tmp_path: pathlib.Path, flags: list[str], said: str
) -> None:
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.a]\nurl = "ws://127.0.0.1:9"\n')
    db = tmp_path / "c.db"
    argv = [sys.executable, "-m", "sparkwatch", "coordinator", "--nodes", str(nodes), "--db", str(db), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, input="")
    assert done.returncode != 0 and said in done.stderr, done.stderr
    # argparse's usage then its one error line, or the coordinator's one line
    assert "Traceback" not in done.stderr and said in done.stderr.strip().splitlines()[-1], done.stderr
    assert not db.exists()
