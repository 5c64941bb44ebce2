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
from helpers.processes import Coordinator, free_port, wait_connected

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
    assert f"coordinator listening on {coord.url} (1 nodes, db" in (logged := coord.proc.stderr.read())
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


def test_a_node_whose_agent_is_not_there_is_named_while_run_waits_and_not_waited_for_at_the_end(
    agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    """A new user's `run` with a mistyped port sat silent for 15 s (the hello wait), and after the command
    5 s more for samples that could never come. Now the wait says at once which node and why (in the
    system's words, not aiohttp's "ssl:default"), and the end does not wait on a node never heard from."""
    agent = agent_factory("--backend", "sim", "--node", "spark-1")
    dead = free_port()
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(
        f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n[nodes.ghost]\nurl = "ws://127.0.0.1:{dead}"\n'
    )
    result = sparkwatch(
        "run", "--nodes", str(nodes), "--no-report", "-o", str(tmp_path / "r.json"), "--", "true"
    )
    assert result.returncode == 0, result.stderr
    why = f"cannot connect to 127.0.0.1:{dead}: Connection refused"
    assert f"sparkwatch: waiting up to 13 s more for node ghost to say hello (down: {why})" in result.stderr
    assert f"sparkwatch: warning: node ghost has not said hello after 15 s (down: {why})" in result.stderr
    assert "never caught up: ghost" in result.stdout + result.stderr  # still said in the quality line
    assert "have not caught up" not in result.stderr  # the end's wait did not wait on it
    # nothing can make windows (no proxy, no import, and with --nodes the command cannot post marks): said
    # before the command runs, not only after it
    note = "sparkwatch: note: no --proxy-upstream and no --import: with --nodes the command cannot post marks"
    assert result.stderr.index(" open on http://") < result.stderr.index(note)


def test_strict_does_not_start_the_command_when_a_node_was_never_heard_from(
    agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    """`--strict` with a node down ran the whole benchmark, then exited 3: now it exits 3 before it."""
    agent = agent_factory("--backend", "sim", "--node", "spark-1")
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(
        f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n'
        f'[nodes.ghost]\nurl = "ws://127.0.0.1:{free_port()}"\n'
    )
    ran = tmp_path / "ran"
    result = sparkwatch("run", "--nodes", str(nodes), "--strict", "--json", "--", "touch", str(ran))
    assert result.returncode == 3, result.stderr
    assert (
        "sparkwatch: --strict: the command was not started: node(s) ghost have not said hello"
        in result.stderr
    )
    assert not ran.exists()
    assert (
        "node ghost has not said hello after 15 s" in result.stderr
        and "--strict does not start" in result.stderr
    )
    outcome = json.loads(result.stdout)
    assert (outcome["exit_code"], outcome["export"], outcome["run_id"]) == (3, None, None)
    assert outcome["quality"]["sound"] is False and outcome["quality"]["nodes_ok"] == 1
    assert outcome["quality"]["problems"] == ["not started: no hello from ghost"]
