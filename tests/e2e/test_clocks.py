"""Clocks that lie, end to end: an agent whose wall clock steps or drifts mid-run (libfaketime) is still
measured on the coordinator's clock to the sample, the step is reported, and only the window that spans it
loses its ok."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pytest

from helpers.clocks import faketime_env
from helpers.processes import Coordinator, sim_load, wait_connected

S = 1_000_000_000
BUSY_W = 45.0  # the simulated GB10 at utilisation 0.8 with no model resident: 5 W + 50 W × 0.8


def window(name: str, seconds: float, during: Any = None) -> dict[str, Any]:
    """A request window of ``seconds`` on this host's (the coordinator's) clock; ``during`` runs halfway."""
    start = time.time_ns()
    time.sleep(seconds / 2)
    if during is not None:
        during()
    time.sleep(seconds / 2)
    return {"id": name, "phase": "timed", "t_start_ns": start, "t_end_ns": time.time_ns()}


@pytest.mark.parametrize("change", ["-20", "+20", "-1", "+1", "+0 x1.00005"])
def test_a_wall_clock_that_steps_or_drifts_moves_no_sample(
    change: str, agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    control = tmp_path / "faketime.rc"
    agent = agent_factory(
        "--backend", "sim", "--node", "stepper", "--interval", "0.05", env=faketime_env(control)
    )
    coord = Coordinator(tmp_path, f'[nodes.stepper]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    try:
        wait_connected(coord, 1)
        _, run = coord.call("POST", "/v1/runs", {"name": f"clock {change}", "interval_s": 0.05})
        sim_load(agent, 0.8)
        time.sleep(0.4)
        windows = [window("before", 0.8)]
        windows.append(window("across", 1.2, during=lambda: control.write_text(change + "\n")))
        windows.append(window("after", 0.8))
        time.sleep(0.3)  # the busy period outlasts the windows by some sampling intervals
        sim_load(agent, 0.0)
        assert coord.call("POST", f"/v1/runs/{run['id']}/windows", {"windows": windows})[0] == 201
        time.sleep(2.0)  # the stream flushes once a second
        coord.call("POST", f"/v1/runs/{run['id']}/end")
        status, export = coord.call("GET", f"/v1/runs/{run['id']}/export")
    finally:
        coord.stop()
    assert status == 200
    node = export["nodes"][0]
    assert node["power_w"]["gated_mean"] == pytest.approx(BUSY_W, rel=2e-3)
    assert node["energy_j"] == pytest.approx(BUSY_W * export["method"]["scope_s"], rel=3e-3)
    assert node["samples"]["coverage_ratio"] == pytest.approx(1.0, abs=1e-3)
    assert node["clock"]["method"] == "monotonic"
    by_id = {w["id"]: w for w in export["windows"]}
    for w in by_id.values():
        assert w["nodes"][0]["power_w_gated_mean"] == pytest.approx(BUSY_W, rel=3e-3), w["id"]
    assert by_id["before"]["verdict"] == by_id["after"]["verdict"] == "ok"
    if "x" in change:  # slewing, not a step
        assert node["clock"]["steps"] == [] and by_id["across"]["verdict"] == "ok"
        return
    (step,) = node["clock"]["steps"]
    assert step["size_ns"] == pytest.approx(int(change) * S, abs=50_000_000)
    assert by_id["across"]["t_start_ns"] <= step["t_ns"] <= by_id["across"]["t_end_ns"]
    assert by_id["across"]["verdict"] == "low_confidence"
    assert by_id["across"]["reasons"] == [
        f"stepper: wall clock stepped {step['size_ns'] / S:+.3f} s inside the window"
    ]
