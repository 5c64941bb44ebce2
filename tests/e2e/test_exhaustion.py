"""Exhausted resources, against real processes on loopback (issue 14): an agent with few open files under a
flood of idle sockets stays reachable and quiet, slowloris sockets are closed by the agent and by the
coordinator, the units raise LimitNOFILE above what the servers may use, and a stream asked for a seq
beyond the newest ends the coordinator's link with the agent's reason instead of silence."""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from helpers.processes import AgentProcess, Coordinator, free_port
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkStatus
from sparkwatch.links.ws_link import WsLink
from sparkwatch.store import Store
from sparkwatch.wire import decode_lines
from sparkwatch_agent.shared.backoff import ExponentialBackoff
from sparkwatch_agent.shared.server_limits import DEFAULT_MAX_CONNECTIONS

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOFILE = 128
HEADER_TIMEOUT_S = 1.0
FLOOD = 3 * NOFILE
SIM_ARGS = ("--backend", "sim", "--node", "spark-x", "--interval", "0.1")
SLOWLORIS = b"GET /healthz HTTP/1.1\r\nHost: agent\r\nUser-Agent: slo"


class LimitedAgent(AgentProcess):
    """A sim agent whose open-file limit (soft and hard) is ``nofile``, like a unit's LimitNOFILE."""

    def __init__(self, env: dict[str, str], nofile: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # the limit is set in the agent's own interpreter before it imports anything (no preexec_fn)
        limit_then_run = (
            "import resource, runpy, sys; "
            f"resource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile})); "
            "runpy.run_module('sparkwatch_agent', run_name='__main__')"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", limit_then_run, "serve", "--listen", f"127.0.0.1:{self.port}", *SIM_ARGS],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def limited_agent() -> Iterator[Any]:
    started: list[LimitedAgent] = []

    def start(**env: str) -> LimitedAgent:
        full = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY"))}
        full.update({"SPARKWATCH_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S), **env})
        agent = LimitedAgent(full, NOFILE)
        started.append(agent)
        agent.wait_ready()
        return agent

    yield start
    for agent in started:
        agent.stop()


@contextlib.contextmanager
def idle_sockets(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that never send a byte (connect does not wait for the accept queue)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def healthz_within(url: str, deadline_s: float) -> float:
    """Seconds until /healthz answers 200 ok (each try may wait a second), or fail at the deadline."""
    t0 = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1.0) as r:
                if r.status == 200 and json.loads(r.read())["status"] == "ok":
                    return time.monotonic() - t0
        except (OSError, urllib.error.HTTPError):
            pass
        if time.monotonic() - t0 > deadline_s:
            raise AssertionError(f"/healthz did not answer within {deadline_s} s")
        time.sleep(0.05)


def slowloris_closed_after_s(port: int, timeout_s: float = 5.0) -> tuple[float, bytes]:
    """Send part of a header line and stall: how long until the server closes, and what it said."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(SLOWLORIS)
        t0 = time.monotonic()
        received = b""
        while chunk := s.recv(4096):
            received += chunk
        return time.monotonic() - t0, received


def test_idle_flood_beyond_the_open_files_leaves_the_agent_answering_and_quiet(limited_agent: Any) -> None:
    agent = limited_agent()
    with idle_sockets(agent.port, FLOOD):
        # at the cap (half the 128 open files), new connections push out the oldest idle ones
        assert healthz_within(agent.url, 4.0) < 2.5
        took_s, reply = slowloris_closed_after_s(agent.port)
        assert HEADER_TIMEOUT_S - 0.2 < took_s < HEADER_TIMEOUT_S + 1.0
        assert reply.startswith(b"HTTP/1.1 408 ") and b"request_timeout" in reply
        assert b"\r\nServer: sparkwatch-agent\r\n" in reply.partition(b"\r\n\r\n")[0]
        assert healthz_within(agent.url, 4.0) < 2.5
    stderr = agent.stop()
    assert "Traceback" not in stderr and "Too many open files" not in stderr, stderr[-2000:]
    assert len(stderr) < 4000 and stderr.count("at the cap of 64 connections") == 1, stderr


def test_out_of_file_descriptors_is_one_line_and_the_agent_recovers(limited_agent: Any) -> None:
    # a cap above what the open-file limit allows: accept() itself fails with EMFILE
    agent = limited_agent(SPARKWATCH_HTTP_MAX_CONNECTIONS="1000")
    with idle_sockets(agent.port, FLOOD):
        time.sleep(0.5)  # the agent accepts until its descriptors run out
        # the header deadline frees them; accept() is retried every second
        assert healthz_within(agent.url, 8.0) < HEADER_TIMEOUT_S + 4.0
    stderr = agent.stop()
    assert "Traceback" not in stderr, stderr[-3000:]
    # besides the start-up warning about the cap, one line (the next would come a minute later)
    loud = [line for line in stderr.splitlines() if not line.startswith("INFO ")]
    assert len(loud) == 2 and "up to 1000 connections leave few of the 128 open files" in loud[0], stderr
    assert loud[1].startswith(
        "ERROR sparkwatch_agent.shared.listener: cannot accept connections: Too many open"
    )


def test_the_coordinator_closes_a_slowloris_socket(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKWATCH_HTTP_HEADER_TIMEOUT_S", str(HEADER_TIMEOUT_S))
    coord = Coordinator(tmp_path, f'[nodes.away]\nurl = "ws://127.0.0.1:{free_port()}"\n')  # never up
    coord.start()
    try:
        took_s, reply = slowloris_closed_after_s(coord.port)
        assert HEADER_TIMEOUT_S - 0.2 < took_s < HEADER_TIMEOUT_S + 1.0
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert b"\r\nServer: sparkwatch-coordinator\r\n" in reply.partition(b"\r\n\r\n")[0]
        assert coord.call("GET", "/v1/nodes")[0] == 200
    finally:
        coord.stop()


def test_units_leave_room_for_the_connection_cap() -> None:
    for unit in ("sparkwatch-agent.service", "sparkwatch-coordinator.service"):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.read_string((ROOT / "deploy" / "systemd" / unit).read_text())
        nofile = int(parser["Service"]["LimitNOFILE"])
        assert nofile >= 4 * DEFAULT_MAX_CONNECTIONS, unit


async def _seed_store_beyond_newest(agent: AgentProcess, store: Store) -> tuple[str, int]:
    """Store the agent's hello and a sample of its boot at a seq far beyond its newest (a confused record)."""
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{agent.url}/v1/stream?after=0") as ws:
        text = (await ws.receive(timeout=5)).data + "\n" + (await ws.receive(timeout=5)).data
    lines = [json.loads(line) for line in text.split("\n")]
    hello = lines[0]
    sample = next(line for line in lines if line["type"] == "sample")
    sample["seq"] = far = 10**9
    store.record_hello("spark-1", hello)
    frames, rejected = decode_lines(json.dumps(sample))
    assert not rejected
    store.ingest("spark-1", hello["boot_id"], frames, [])  # type: ignore[arg-type]
    return hello["boot_id"], far


async def test_a_stream_after_beyond_the_newest_is_a_link_error_with_the_agents_reason(
    agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-1", "--interval", "0.05")
    store = Store(tmp_path / "c.db")
    boot, far = await _seed_store_beyond_newest(agent, store)
    async with aiohttp.ClientSession() as session:
        link = WsLink(
            NodeSpec(name="spark-1", url=agent.url.replace("http", "ws")),
            store,
            session,
            holder="test-coord",
            desired_interval=lambda: None,
            backoff=ExponentialBackoff(initial_s=0.05, maximum_s=0.2),
            probes=2,
        )
        task = asyncio.create_task(link.run())
        deadline = time.monotonic() + 5.0
        while link.state.reconnects < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        status, error = link.state.status, link.state.error or ""
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # refused at once with the agent's reason (before: silence, the link "streaming" and nothing stored)
    assert status is LinkStatus.DOWN and link.state.reconnects >= 2
    assert error.startswith(f"stream closed (4416): after={far} is beyond the newest seq"), error
    assert store.count_samples("spark-1") == 1  # nothing skipped, nothing stored under the confused record
    assert store.latest_boot("spark-1") == (boot, far)
    store.close()
