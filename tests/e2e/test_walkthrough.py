"""docs/walkthrough.md's script, run by `bash -e` as the page says (its ports moved to free ones): two sim
agents, a standing coordinator with a token, `sim-model --agents` keeping their GPUs busy while it
generates, `nodes check` and `run` through the proxy against that coordinator. The run's gated figures are
the simulation's truth, its windows ok, and every process the script started is gone at its end."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers.processes import free_port
from sparkwatch.commands.sim_drive import warm_util
from sparkwatch_agent.hardware.sim import SimSpec

DOC = pathlib.Path(__file__).parents[2] / "docs" / "walkthrough.md"
PORTS = ("9464", "9465", "8750", "8000", "8899")


def block() -> str:
    return DOC.read_text().split("```sh\n", 1)[1].split("```", 1)[0]


def moved(script: str, ports: dict[str, str]) -> str:
    """The block with its ports moved as ``ports`` says: in its check that each is free, and in each URL."""
    check = f"for port in {' '.join(PORTS)}; do"
    assert check in script
    script = script.replace(check, f"for port in {' '.join(ports.values())}; do")
    for port, new in ports.items():
        assert f"127.0.0.1:{port}" in script, port
        script = script.replace(f"127.0.0.1:{port}", f"127.0.0.1:{new}")
    return script


def stopped_within(group: int, timeout_s: float) -> list[str]:
    """The processes of ``group`` still running once they have had ``timeout_s`` to stop (the block's
    `kill` asks them to; each takes a moment to close its connections and files)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = subprocess.run(["pgrep", "-g", str(group)], capture_output=True, text=True).stdout.split()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_the_walkthrough_script_runs_as_the_page_says(tmp_path: pathlib.Path) -> None:
    script = moved(block(), {port: str(free_port()) for port in PORTS})
    bin_dir = pathlib.Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        # files, not pipes: a background job the block failed to stop would hold a pipe open
        proc = subprocess.Popen(
            ["bash", "-e", "-c", script],
            stdout=out_file,
            stderr=err_file,
            cwd=tmp_path,
            env=env,
            start_new_session=True,  # its background jobs in its own group: killed below if it fails
        )
        try:
            proc.wait(timeout=150)
        finally:
            left = stopped_within(proc.pid, 15.0 if proc.returncode == 0 else 0.0)
            if left:
                os.killpg(proc.pid, signal.SIGKILL)
    out, err = out_path.read_text(), err_path.read_text()
    logs = "".join(f"\n{p.name}: {p.read_text()[-2000:]}" for p in tmp_path.glob("*.log"))
    assert proc.returncode == 0, err + logs
    assert left == [], "the block's background jobs outlived its kill"
    assert "2 of 2 node(s) ready to measure" in out and "no --proxy-upstream" not in err
    assert "measurement: 3 of 3 timed windows ok on 2 of 2 nodes" in out
    assert "completion tokens 384," in out  # 3 timed requests × max_tokens 128, from the usage chunk
    assert "  try   ended  " in out  # runs list: the run, ended, in the coordinator's database

    export = json.loads((tmp_path / "try.json").read_text())
    assert (tmp_path / "try.report.html").stat().st_size > 0
    spec = SimSpec()
    for i, node in enumerate(export["nodes"]):
        truth_w = spec.resident_idle_w + spec.busy_slope_w * warm_util(i)
        assert node["node"] == f"spark-{i + 1}"
        assert node["power_w"]["gated_mean"] == pytest.approx(truth_w, rel=0.02), node["node"]
    assert "API: open to every local user" in (tmp_path / "spark-1.log").read_text()
    assert "API: bearer token required" in (tmp_path / "coordinator.log").read_text()
    assert "driving 2 sim agent(s)" in (tmp_path / "model.log").read_text()


def test_the_block_says_which_port_is_in_use_before_it_starts_anything(tmp_path: pathlib.Path) -> None:
    """A new user's agent already on the block's first port answered the block's wait, and was measured
    in place of the block's own (which could not listen): the block stops at once, naming the port."""
    ports = {port: str(free_port()) for port in PORTS}
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", int(ports["8750"])))
        busy.listen()
        result = subprocess.run(
            ["bash", "-e", "-c", moved(block(), ports)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
    assert result.returncode != 0 and f"port {ports['8750']} is in use" in result.stderr, result
    assert not list(tmp_path.glob("*.log"))  # nothing was started
