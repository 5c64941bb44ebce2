"""One sparkwatch service's address given where another's belongs (a new user gave the agent's port as
``--coordinator`` and read only ``HTTP 404: no route for GET /v1/runs``): each server names itself in its
``Server`` header, so the CLI says which service it reached, and a coordinator whose nodes.toml names
another coordinator's port says so at once instead of redialling a 404 on the backoff schedule. A token a
coordinator refuses is named by the file it came from. Real processes: a sim agent, a coordinator."""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
import urllib.request
from typing import Any

from helpers.cli import sparkwatch
from helpers.processes import Coordinator, wait_connected

#: Well under the 30 s --wait given, with room for a loaded machine's interpreter starts.
QUICK_S = 15


def one_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def served_by(url: str) -> str:
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as r:
        return str(r.headers["Server"])


def test_the_cli_and_the_links_say_which_service_answered(agent_factory: Any, tmp_path: pathlib.Path) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-1")
    coord = Coordinator(tmp_path, f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    try:
        wait_connected(coord, 1)
        agent_url = f"http://127.0.0.1:{agent.port}"
        assert (served_by(agent_url), served_by(coord.url)) == ("sparkwatch-agent", "sparkwatch-coordinator")

        said = one_line(sparkwatch("runs", "list", "--coordinator", agent_url))
        assert f"GET {agent_url}/v1/runs: HTTP 404: no route for GET /v1/runs" in said
        assert f"({agent_url} is a sparkwatch-agent, not the coordinator: the coordinator listens on" in said
        assert "8750 unless its --listen says otherwise)" in said

        wrong = tmp_path / "wrong.token"
        wrong.write_text("not-the-coordinators-token-0123")
        wrong.chmod(0o600)
        said = one_line(sparkwatch("runs", "list", "--coordinator", coord.url, "--token-file", str(wrong)))
        assert "HTTP 401: the bearer token sent is not this server's" in said
        assert f"(the token sent is the one in {wrong}: give the file the coordinator's --token-file" in said
        right = sparkwatch("runs", "list", "--coordinator", coord.url, "--token-file", str(coord.token))
        assert right.returncode == 0, right

        # the coordinator given as a TSDB: its 401 was said as "the engine wants credentials"
        windows = tmp_path / "windows.json"
        one = {"id": "w", "phase": "timed", "t_start_ns": 1796400010 * 10**9, "t_end_ns": 1796400020 * 10**9}
        windows.write_text(json.dumps({"windows": [one]}))
        span = ["--start", "1796400000", "--end", "1796400060", "--engine", "prometheus"]
        said = one_line(sparkwatch("export", "--prometheus", coord.url, "--windows", str(windows), *span))
        assert f"({coord.url} is a sparkwatch-coordinator, not a Prometheus-compatible engine:" in said, said
        assert "wants credentials" not in said

        # nodes.toml naming the coordinator's port for a node: the embedded coordinator's link says so
        nodes = tmp_path / "mixed.toml"
        nodes.write_text(
            f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n'
            f'[nodes.spark-2]\nurl = "ws://127.0.0.1:{coord.port}"\n'
        )
        t0 = time.monotonic()
        checked = sparkwatch("nodes", "check", "--nodes", str(nodes), "--wait", "30")
        took_s = time.monotonic() - t0
    finally:
        coord.stop()
    # and each says in its listening line who may use its API
    assert coord.proc is not None and coord.proc.stderr is not None
    assert f"coordinator listening on {coord.url} (1 node, db" in (logged := coord.proc.stderr.read())
    assert "; API: bearer token required)" in logged
    assert "(node spark-1, backend sim; API: open to every local user, no --token-file)" in agent.stop()
    assert checked.returncode == 1, checked
    assert took_s < QUICK_S, f"waited {took_s:.1f} s for a node whose address is a coordinator's"
    assert (
        f"PROBLEM spark-2: a sparkwatch-coordinator answers at url ws://127.0.0.1:{coord.port}, not an agent:"
        " check nodes.toml (an agent listens on 9464" in checked.stdout
    ), checked.stdout
    assert "PROBLEM spark-1" not in checked.stdout and "1 of 2 node(s) ready to measure" in checked.stdout


def test_the_simulated_model_given_as_the_coordinator_is_named(sim_model: str) -> None:
    """Its 404 is aiohttp's plain text, no JSON reason: the header still says what answered."""
    said = one_line(sparkwatch("runs", "list", "--coordinator", sim_model))
    assert f"GET {sim_model}/v1/runs: HTTP 404: Not Found (" in said  # not aiohttp's "404: 404: Not Found"
    assert f"({sim_model} is a sparkwatch-sim-model, not the coordinator" in said
