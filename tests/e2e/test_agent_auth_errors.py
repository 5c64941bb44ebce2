"""An agent that answers 401 is a mistake in nodes.toml or a token file: `sparkwatch nodes check` and
`sparkwatch hardware` say so at once, naming the node and the token file it sent (or that it sent none),
instead of waiting out `--wait` for a link that cannot come up."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from typing import Any

from helpers.processes import Coordinator, wait_connected

WAIT_S = 30
#: Well under WAIT_S, with room for a loaded machine's interpreter starts and a first hello.
QUICK_S = 12


def token_file(path: pathlib.Path, token: str) -> pathlib.Path:
    path.write_text(token)
    path.chmod(0o600)
    return path


def sparkwatch(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    t0 = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "sparkwatch", *args], capture_output=True, text=True, timeout=120, env=env
    )
    return result, time.monotonic() - t0


def guarded_agent(
    tmp_path: pathlib.Path, agent_factory: Any, name: str = "sim-1"
) -> tuple[Any, pathlib.Path]:
    """A sim agent that requires a token, and a file holding a different one."""
    right = token_file(tmp_path / "agent.token", "the-agents-own-token-0123456789")
    agent = agent_factory("--backend", "sim", "--node", name, "--token-file", str(right))
    return agent, token_file(tmp_path / "wrong.token", "not-the-agents-token-0123456789")


def guarded_agents(tmp_path: pathlib.Path, agent_factory: Any, count: int) -> tuple[list[Any], pathlib.Path]:
    """``count`` such agents sharing one token (one agent under several node names is refused as the
    nodes file is read: each node its own)."""
    agents = [guarded_agent(tmp_path, agent_factory, f"sim-{k + 1}")[0] for k in range(count)]
    return agents, tmp_path / "wrong.token"


def coordinated_agent(tmp_path: pathlib.Path, agent_factory: Any) -> tuple[Coordinator, pathlib.Path]:
    """A guarded agent and a started coordinator whose node reads the agent's token from its own copy."""
    agent, _ = guarded_agent(tmp_path, agent_factory)
    copy = token_file(tmp_path / "coordinator-copy.token", "the-agents-own-token-0123456789")
    node_toml = f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\ntoken_file = "{copy}"\n'
    coord = Coordinator(tmp_path, node_toml)
    coord.start()
    return coord, copy


def test_nodes_check_names_the_refused_token_file_at_once(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    (one, two), wrong = guarded_agents(tmp_path, agent_factory, 2)
    right = tmp_path / "agent.token"
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(
        f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{one.port}"\ntoken_file = "{right}"\n'
        f'[nodes.spark-2]\nurl = "ws://127.0.0.1:{two.port}"\ntoken_file = "{wrong}"\n'
    )
    result, took_s = sparkwatch("nodes", "check", "--nodes", str(nodes), "--wait", str(WAIT_S))
    assert result.returncode == 1, result.stdout + result.stderr
    assert took_s < QUICK_S, f"waited {took_s:.1f} s for a node that refused our token"
    assert f"PROBLEM spark-2: the agent refused the token in {wrong} (HTTP 401)" in result.stdout
    assert "PROBLEM spark-1" not in result.stdout  # the good node was still waited for, and is ready
    assert "1 of 2 node(s) ready to measure" in result.stdout
    # said once: the check's own coordinator does not log its links' state changes as well (it did: each
    # refused or unreachable node was said twice), unless --log-level debug asks for everything
    assert "link unauthorized" not in result.stderr and result.stdout.count("spark-2: the agent") == 1
    debug, _ = sparkwatch("nodes", "check", "--nodes", str(nodes), "--wait", str(WAIT_S), "--log-level=debug")
    assert (
        "ERROR sparkwatch.links.state: node spark-2: link unauthorized (ws): "
        f"the agent refused the token in {wrong}" in debug.stderr
    )


def test_nodes_check_says_when_no_token_file_was_set(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent, _ = guarded_agent(tmp_path, agent_factory)
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.spark-2]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    result, took_s = sparkwatch("nodes", "check", "--nodes", str(nodes), "--wait", str(WAIT_S), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert took_s < QUICK_S, f"waited {took_s:.1f} s for a node that refused our token"
    assert (
        '"problems": ["the agent requires a token (HTTP 401) and none is set; check token_file'
        in result.stdout
    )


def test_hardware_names_every_refused_node_at_once(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agents, wrong = guarded_agents(tmp_path, agent_factory, 3)
    right = tmp_path / "agent.token"
    nodes = tmp_path / "nodes.toml"
    url = [f'url = "ws://127.0.0.1:{agent.port}"\n' for agent in agents]
    nodes.write_text(
        f'[nodes.good]\n{url[0]}token_file = "{right}"\n'
        f'[nodes.wrong]\n{url[1]}token_file = "{wrong}"\n'
        f"[nodes.none]\n{url[2]}"
    )
    result, took_s = sparkwatch("hardware", "--nodes", str(nodes), "--wait", str(WAIT_S))
    assert result.returncode == 2, result.stdout + result.stderr
    assert took_s < QUICK_S, f"waited {took_s:.1f} s for nodes that refused our token"
    last = result.stderr.strip().splitlines()[-1]  # after the links' own log lines
    assert last == (
        "sparkwatch: error: node wrong: no hardware report: "
        f"the agent refused the token in {wrong} (HTTP 401); check token_file in nodes.toml; "
        "node none: no hardware report: "
        "the agent requires a token (HTTP 401) and none is set; check token_file in nodes.toml"
    )
    assert result.stdout == ""


def test_a_token_rotated_on_the_agent_alone_is_said_when_a_run_asks_for_its_interval(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """The agent reads its token file again when it changes; until the coordinator's copy is rotated too,
    the link's stream (let in with the old token) kept streaming while the run's interval lease was refused,
    logged at INFO: the run was sampled at the idle 1 s and the link said "streaming". The refused lease
    now ends the session: the link is `unauthorized`, with the file to fix."""
    coord, copy = coordinated_agent(tmp_path, agent_factory)
    try:
        wait_connected(coord, 1)
        staged = token_file(tmp_path / "agent.token.new", "a-rotated-agent-token-0123456789")
        staged.replace(tmp_path / "agent.token")  # the agent's file only
        status, run = coord.call("POST", "/v1/runs", {"name": "rotated", "interval_s": 0.1})
        assert status == 201, run
        deadline, node = time.monotonic() + QUICK_S, {}
        while time.monotonic() < deadline:
            (node,) = coord.call("GET", "/v1/nodes")[1]["nodes"]
            if node["status"] != "streaming":
                break
            time.sleep(0.1)
        assert node["status"] == "unauthorized", node
        assert f"the agent refused the token in {copy}" in node["error"]
    finally:
        coord.stop()


def test_a_token_rotated_on_both_sides_closes_the_old_stream_and_the_link_redials_with_the_new(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """The documented rotation, the coordinator's copy and then the agent's file: the stream the old token
    opened was left open (so a leaked token's stayed too). The agent closes it; the link redials with its
    copy's new token and streams again, its samples going on."""
    coord, copy = coordinated_agent(tmp_path, agent_factory)
    try:
        (before,) = wait_connected(coord, 1)
        new = "a-rotated-agent-token-0123456789"
        token_file(tmp_path / "copy.new", new).replace(copy)
        token_file(tmp_path / "agent.token.new", new).replace(tmp_path / "agent.token")
        deadline, node = time.monotonic() + QUICK_S, before
        while time.monotonic() < deadline:
            (node,) = coord.call("GET", "/v1/nodes")[1]["nodes"]
            redialled = node["reconnects"] > before["reconnects"] and node["status"] == "streaming"
            if redialled and node["samples_ingested"] > before["samples_ingested"] + 2:
                break
            time.sleep(0.2)
        assert node["reconnects"] == before["reconnects"] + 1, node  # closed by the agent, once
        assert node["status"] == "streaming", node
        assert node["samples_ingested"] > before["samples_ingested"] + 2, node
    finally:
        coord.stop()
