"""A throttled window is flagged end to end: a sim agent (GB10: max SM clock 3003 MHz, busy at 2418) runs one
timed window clean and one under a scripted power brake at 700 MHz; the export keeps both windows' numbers,
passes the first and makes the second low_confidence with its reasons, and the agent's /metrics shows the
reason while it lasts."""

from __future__ import annotations

import os
import pathlib
import re
import time
import urllib.request
from collections.abc import Iterator

import pytest

from helpers.processes import AgentProcess, Coordinator, free_port, sim_load, wait_connected, wait_stored

POWER_BRAKE = 0x80
BRAKE_ACTIVE = r'^sparkwatch_gpu_clock_event_active\{[^}]*reason="hw_power_brake"[^}]*\}'


@pytest.fixture
def sim(tmp_path: pathlib.Path) -> Iterator[tuple[AgentProcess, Coordinator]]:
    agent = AgentProcess(
        ["--backend", "sim", "--node", "spark-1", "--interval", "0.1"], dict(os.environ), free_port()
    )
    coord = None
    try:
        agent.wait_ready()
        (tmp_path / "coordinator").mkdir()
        coord = Coordinator(
            tmp_path / "coordinator", f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n'
        )
        coord.start()
        wait_connected(coord, 1)
        yield agent, coord
    finally:
        if coord is not None:
            coord.stop()
        agent.stop()


def _metrics(agent: AgentProcess) -> str:
    with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as r:
        return r.read().decode()


def test_a_power_braked_window_is_flagged_and_a_clean_one_is_not(
    sim: tuple[AgentProcess, Coordinator],
) -> None:
    agent, coord = sim
    status, run = coord.call("POST", "/v1/runs", {"name": "throttle", "interval_s": 0.1})
    assert status == 201
    sim_load(agent, 0.8)
    time.sleep(0.5)
    clean = (time.time_ns(), None)
    time.sleep(2.0)
    clean = (clean[0], time.time_ns())
    sim_load(agent, 0.8, throttle={"reasons": POWER_BRAKE, "sm_clock_mhz": 700})
    time.sleep(0.5)
    assert "sparkwatch_gpu_clock_event_active{" in _metrics(agent)
    assert re.search(BRAKE_ACTIVE + r" 1\.0$", _metrics(agent), re.M)
    braked = (time.time_ns(), None)
    time.sleep(2.0)
    braked = (braked[0], time.time_ns())
    sim_load(agent, 0.8, throttle=None)
    time.sleep(0.5)
    assert re.search(BRAKE_ACTIVE + r" 0\.0$", _metrics(agent), re.M)
    windows = [
        {"id": name, "phase": "timed", "t_start_ns": a, "t_end_ns": b, "completion_tokens": 10}
        for name, (a, b) in (("clean", clean), ("braked", braked))
    ]
    assert coord.call("POST", f"/v1/runs/{run['id']}/windows", {"windows": windows})[0] == 201
    wait_stored(coord, agent)
    assert coord.call("POST", f"/v1/runs/{run['id']}/end")[0] == 200
    status, export = coord.call("GET", f"/v1/runs/{run['id']}/export")
    assert status == 200
    by_id = {w["id"]: w for w in export["windows"]}
    ok, bad = by_id["clean"], by_id["braked"]
    # ok; or, where the other worker of a loaded 2-core machine starved the sampler (stalls of 130-300 ms
    # in CI stores), incomplete with coverage reasons only: never a throttle reason
    coverage_only = all(r.startswith("coverage ") or ": coverage " in r for r in ok["reasons"])
    assert ok["verdict"] == "ok" or (ok["verdict"] == "incomplete" and coverage_only), ok["reasons"]
    (entry,) = ok["nodes"]
    assert entry["throttle"] == [] and entry["sm_clock_ratio"] == pytest.approx(2418 / 3003, abs=0.001)
    assert bad["verdict"] == "low_confidence"
    assert any(r.startswith("spark-1: throttled:hw_power_brake (") for r in bad["reasons"]), bad["reasons"]
    assert any(r.startswith("spark-1: throttled:sm_clock (mean 0.23") for r in bad["reasons"]), bad["reasons"]
    (entry,) = bad["nodes"]
    assert entry["clock_event_reasons"] == ["hw_power_brake"] and entry["sm_clock_hz_mean"] == 700_000_000
    assert entry["power_w_gated_mean"] is not None  # the numbers stay; the verdict says what to think of them
