"""Real sparkwatch processes on loopback ports: an agent, a coordinator, and the calls tests make to them."""

from __future__ import annotations

import json
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

#: Where :func:`free_port` looks: below Linux's default ephemeral range (32768-60999).
PORTS_BELOW_EPHEMERAL = range(20000, 32768)


def free_port() -> int:
    """A loopback port free now, for a server a test starts later. Not one the kernel hands out itself: a
    port it gave us (bind to 0) and we freed went back to the ephemeral pool, where any client's outgoing
    connection could take it as its source port before the server bound it (CI saw VictoriaMetrics fail
    with "address already in use" that way)."""
    candidates = range(PORTS_BELOW_EPHEMERAL.start, min(PORTS_BELOW_EPHEMERAL.stop, _ephemeral_low()))
    if not candidates:  # an unusual ephemeral range: the kernel's pick, as before
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.choice(candidates)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # someone listens there
            return port
    raise AssertionError(f"no free loopback port in {candidates}")


def _ephemeral_low() -> int:
    """Where this machine's ephemeral ports begin."""
    try:
        return int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return PORTS_BELOW_EPHEMERAL.stop


class AgentProcess:
    """A real `sparkwatch-agent serve` subprocess on a loopback port."""

    def __init__(self, args: list[str], env: dict[str, str], port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkwatch_agent", "serve", "--listen", f"127.0.0.1:{port}", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"agent exited early: {self.proc.stderr.read() if self.proc.stderr else ''}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/metrics", timeout=1) as r:
                    # ready = the first sample exists (the server answers, with a count of 0, before it)
                    if re.search(rb"^sparkwatch_agent_samples_total\{[^}]*\} [1-9]", r.read(), re.M):
                        return
                time.sleep(0.02)
            except OSError:
                time.sleep(0.05)
        raise AssertionError("agent did not become ready")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""


TOKEN = "coordinator-token-0123456789"


class Coordinator:
    def __init__(
        self, tmp: pathlib.Path, nodes_toml: str, port: int | None = None, args: Sequence[str] = ()
    ) -> None:
        self.args = list(args)  # more `sparkwatch coordinator` flags (e.g. --remote-write URL)
        self.nodes = tmp / "nodes.toml"
        self.nodes.write_text(nodes_toml)
        self.token = tmp / "token"
        self.token.write_text(TOKEN)
        self.token.chmod(0o600)
        self.db = tmp / "coord.db"
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sparkwatch",
                "coordinator",
                "--nodes",
                str(self.nodes),
                "--db",
                str(self.db),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--token-file",
                str(self.token),
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if self.call("GET", "/v1/nodes")[0] == 200:
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        said = self.proc.stderr.read() if self.proc.poll() is not None and self.proc.stderr else ""
        raise AssertionError(f"coordinator did not start: {said[-2000:]}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)

    def call(
        self, method: str, path: str, body: Any = None, token: str | None = TOKEN, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")


def wait_connected(coord: Coordinator, count: int, timeout_s: float = 15) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, body = coord.call("GET", "/v1/nodes")
        if sum(n["connected"] and n["samples_ingested"] > 0 for n in body["nodes"]) == count:
            return list(body["nodes"])
        time.sleep(0.1)
    raise AssertionError(f"nodes did not connect: {body}")


def wait_stored(coord: Coordinator, *agents: AgentProcess, timeout_s: float = 30.0) -> None:
    """Until the coordinator has stored every sample the agents had taken when this was called: the stream
    flushes about once a second, and a loaded machine may take longer (a fixed sleep would make an export
    that misses the last samples, honestly, and a flaky test)."""
    targets = {}
    for agent in agents:
        with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as r:
            found = re.search(rb'^sparkwatch_agent_samples_total\{node="([^"]+)"\} (\S+)', r.read(), re.M)
        assert found, "the agent's /metrics has no sample count"
        targets[found.group(1).decode()] = int(float(found.group(2)))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, body = coord.call("GET", "/v1/nodes")
        stored = {n["node"]: n["last_seq"] for n in body["nodes"]}
        if all(stored.get(node, 0) >= seq for node, seq in targets.items()):
            return
        time.sleep(0.05)
    raise AssertionError(f"the coordinator did not store up to {targets}: {stored}")


def sim_load(agent: Any, util: float, **more: Any) -> None:
    """Drive a sim agent's GPU (``throttle={"reasons": …, "sm_clock_mhz": …}`` or ``throttle=None`` too)."""
    req = urllib.request.Request(
        f"{agent.url}/v1/sim/load",
        data=json.dumps({"util_ratio": util, **more}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=5).read()


def wait_listening(port: int, timeout_s: float = 15.0) -> None:
    """Until something accepts connections on loopback ``port`` (a server process started)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def wait_for_file(path: pathlib.Path, timeout_s: float = 30.0) -> None:
    """Until ``path`` exists (a wrapped command's marker that it has started)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
