"""The agent's command line as a user meets it: errors, probe, stdio stream, signals, systemd notify."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any

import aiohttp
import pytest

from helpers.processes import free_port
from sparkwatch_agent.serving import stdio
from sparkwatch_agent.shared.units import lmx_gb

AGENT = [sys.executable, "-m", "sparkwatch_agent"]


def run_agent(
    *args: str, timeout: float = 20, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--interval", "0"], "--interval: interval must be within"),
        (["serve", "--listen", "nonsense"], "--listen must be HOST:PORT"),
        (["serve", "--listen", "[::1]"], "--listen must be HOST:PORT or [IPV6]:PORT, got '[::1]'"),
        (["serve", "--node", ""], "--node must be a name of 1 to 128 printable characters"),
        (["serve", "--node", "n" * 500], "--node must be a name of 1 to 128 printable characters"),
        (["serve", "--listen", "0.0.0.0:9464"], "refusing to listen on 0.0.0.0 without a token"),
        (["serve", "--config", "/nonexistent.toml"], "cannot read config file"),
        (["serve", "--token-file", "/nonexistent"], "cannot read token file"),
    ],
)
def test_user_errors_are_one_line(args: list[str], message: str) -> None:
    result = run_agent(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkwatch-agent: error: ") and message in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_flag_is_argparse_usage_error() -> None:
    result = run_agent("serve", "--backend", "cuda")
    assert result.returncode == 2 and "invalid choice" in result.stderr and "Traceback" not in result.stderr


def test_config_file_errors(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent]\ninterval = 'fast'\n")
    assert "interval must be of type float" in run_agent("serve", "--config", str(bad)).stderr
    bad.write_text("[agent]\ninterval = inf\n")  # named where it was set: not "--interval", never typed
    assert (
        "error: interval (config file): interval must be within"
        in run_agent("serve", "--config", str(bad)).stderr
    )
    bad.write_text('[agent]\nlisten = "127.0.0.1:99999"\n')
    said = run_agent("serve", "--config", str(bad)).stderr
    assert "error: listen (config file) port must be within 0..65535, got 99999" in said, said
    bad.write_text("[agent]\nintervall = 1.0\n")
    assert "unknown keys intervall" in run_agent("serve", "--config", str(bad)).stderr
    bad.write_text("[agent\n")
    assert "is not valid TOML" in run_agent("serve", "--config", str(bad)).stderr
    bad.write_bytes(b"\xff\xfe[agent]\n")
    said = run_agent("serve", "--config", str(bad))
    assert said.returncode == 2 and "is not valid TOML: not UTF-8 text (byte 0xff at offset 0)" in said.stderr
    assert "Traceback" not in said.stderr
    # what tomllib raises besides TOMLDecodeError: a RecursionError, a ValueError of int's digit limit
    for text, why in (
        ("a = " + "[" * 2000 + "]" * 2000, "nested too deep to read"),
        ("a = " + "1" * 5000, "an integer too long to read"),
    ):
        bad.write_text(text)
        said = run_agent("probe", "--backend", "sim", "--config", str(bad))
        assert said.returncode == 2 and "Traceback" not in said.stderr, said.stderr
        assert said.stderr.strip().endswith(f"is not valid TOML: {why}"), said.stderr


def test_token_file_must_be_private(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o644)
    result = run_agent("serve", "--token-file", str(token))
    assert result.returncode == 2 and "chmod 600" in result.stderr


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run_agent("serve", "--backend", "sim", "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 75 and f"cannot listen on 127.0.0.1:{port}" in result.stderr  # may pass
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("listen", "code", "said"),
    [
        # not this host's address (yet: a NIC up after the network target at boot): the unit starts it again
        ("192.0.2.1:9464", 75, "cannot listen on 192.0.2.1:9464: Cannot assign requested address"),
        ("[2001:db8::1]:9464", 75, "cannot listen on [2001:db8::1]:9464: Cannot assign requested address"),
    ],
)
def test_an_address_that_may_come_exits_75_not_2(
    tmp_path: pathlib.Path, listen: str, code: int, said: str
) -> None:
    """Exit 2 is a mistake the units do not restart (RestartPreventExitStatus=2): an agent started before
    its address was assigned stayed down for good (a sweep). An IPv6 address keeps its brackets."""
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o600)
    result = run_agent("serve", "--backend", "sim", "--listen", listen, "--token-file", str(token))
    assert result.returncode == code and result.stderr == f"sparkwatch-agent: error: {said}\n", result.stderr


def test_config_file_sets_the_same_options(tmp_path: pathlib.Path) -> None:
    cfg = tmp_path / "agent.toml"
    cfg.write_text('[agent]\nnode = "from-file"\nbackend = "sim"\ninterval = 0.5\n')
    out = json.loads(run_agent("probe", "--config", str(cfg)).stdout)
    assert out["node"] == "from-file" and out["sample"]["interval_s"] == 0.5


def test_probe_sim_prints_capabilities_hardware_and_lmx_object() -> None:
    result = run_agent("probe", "--backend", "sim", "--node", "spark-9")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["memory_model"] == "unified" and out["hardware"]["simulated"] is True
    lmx = out["hardware"]["lmx"]
    assert lmx["hwClass"] == "UNIFIED" and lmx["chipVendor"] == "NVIDIA" and lmx["chipFamily"] == "GB10"
    assert lmx["unifiedMemoryGb"] == round(125_000_000 * 1024 / 2**30, 1)
    assert os.uname().release in lmx["os"]  # kernel read at probe time
    assert lmx["driverVersion"] == "580.95.05"
    assert out["capabilities"]["gpus"][0]["fields"]["memory_info"]["reason"] == "NOT_SUPPORTED"
    assert out["sample"]["gpus"][0]["power_w"] == 5.0


def test_probe_with_fake_nvml_discrete(fake_nvml_dir: pathlib.Path) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": "discrete"}
    out = json.loads(run_agent("probe", env=env).stdout)
    lmx = out["hardware"]["lmx"]
    assert lmx["hwClass"] == "DISCRETE_GPU" and len(lmx["gpus"]) == 2
    assert "lmx_hardware" not in out  # once, inside hardware
    # the fields lmx's own nvidia-smi detector writes (cmd/lmx/main.go, applyNvidiaSMIHardware)
    sizes = [g["memory_total_bytes"] for g in out["hardware"]["gpus"]]
    assert (
        lmx["gpuCount"] == 2
        and lmx["gpuName"] == lmx["gpus"][0]["name"] == out["hardware"]["gpus"][0]["name"]
    )
    assert lmx["vramGb"] == lmx["gpus"][0]["vramGb"] == lmx_gb(sizes[0])
    assert lmx["totalVramGb"] == lmx_gb(sum(sizes))  # the bytes summed, rounded once


def test_stream_stdio_emits_hello_then_samples_and_takes_commands() -> None:
    proc = subprocess.Popen(
        [*AGENT, "stream", "--stdio", "--backend", "sim", "--node", "ssh-node", "--interval", "0.5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = json.loads(proc.stdout.readline())
        assert hello["type"] == "hello" and hello["node"] == "ssh-node"
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "sample" and first["seq"] == 1
        twice = '{"type": "interval", "holder": "c", "interval_s": 0.02, "holder": "d"}'  # refused, said
        proc.stdin.write(
            twice
            + "\n"
            + json.dumps({"type": "interval", "holder": "c", "interval_s": 0.02, "ttl_s": 60})
            + "\n"
        )
        proc.stdin.flush()
        t0 = time.monotonic()
        seqs = [json.loads(proc.stdout.readline())["seq"] for _ in range(20)]
        assert time.monotonic() - t0 < 3  # 20 samples at 0.02 s, not at 0.5 s
        assert seqs == list(range(2, 22))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(5)
    assert proc.returncode == 0
    assert proc.stderr is not None and 'names the key "holder" twice in one object' in proc.stderr.read()


def test_a_stdin_line_too_long_is_dropped_whole_not_its_tail_applied(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A line past MAX_COMMAND_BYTES is no command, however it is split; its tail (a valid command here)
    was kept and applied. The lines around it are read as ever."""
    applied: list[str] = []
    monkeypatch.setattr(stdio, "_apply_command", lambda _s, line, _r, _w: applied.append(line))
    command = '{"type": "interval", "holder": "x", "interval_s": 0.05}'
    tail = command.replace("x", "y")  # two lines too long: one past a read's worth, one ending in the next
    feed = f"{command}\nNOT JSON {' ' * 300_000}{command}\n{' ' * 90_000}{command}\n{tail}\n".encode()
    read, write = os.pipe()
    with open(write, "wb") as w:  # in pieces the size of a pipe's reads and smaller
        for at in range(0, len(feed), 40_000):
            w.write(feed[at : at + 40_000])
            w.flush()
            if at == 0:
                reader = threading.Thread(target=stdio._read_commands, args=(None, read, None, None))
                reader.start()
    reader.join(5)
    os.close(read)
    assert applied == [command, tail]
    said = [r.getMessage() for r in caplog.records if "stdin line over" in r.getMessage()]
    assert said == [f"ignored a stdin line over {stdio.MAX_COMMAND_BYTES} bytes: no command is that long"] * 2


def test_stream_stdio_writes_each_sample_right_after_its_tick() -> None:
    """Frames are not held back for a batch: each arrives within a fraction of the interval of the
    moment it was taken (the sample's own monotonic stamp; same host, same clock)."""
    proc = subprocess.Popen(
        [*AGENT, "stream", "--stdio", "--backend", "sim", "--interval", "0.2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lags_s: list[float] = []
    seqs: list[int] = []
    try:
        assert json.loads(proc.stdout.readline())["type"] == "hello"
        while len(lags_s) < 10:
            frame = json.loads(proc.stdout.readline())
            lags_s.append((time.monotonic_ns() - frame["t_mono_ns"]) / 1e9)
            seqs.append(frame["seq"])
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=5)
    assert proc.returncode == 0
    assert sorted(lags_s)[len(lags_s) // 2] < 0.1, lags_s  # batching every 0.5 s would give ~0.25 s
    seqs += [json.loads(line)["seq"] for line in rest.splitlines()]  # whole lines to the last one
    assert seqs == list(range(1, len(seqs) + 1))


def test_sigterm_stops_serving_agent_within_two_seconds(agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--interval", "0.1")
    ws_url = f"{agent.url}/v1/stream"  # an open stream must not hold up shutdown

    async def hold_stream_then_term() -> float:
        async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
            await ws.receive()
            t0 = time.monotonic()
            agent.proc.send_signal(signal.SIGTERM)
            await asyncio.get_running_loop().run_in_executor(None, agent.proc.wait, 5)
            return time.monotonic() - t0

    elapsed = asyncio.run(hold_stream_then_term())
    assert agent.proc.returncode == 0 and elapsed < 2.0


def test_systemd_notify_ready_and_watchdog(tmp_path: pathlib.Path) -> None:
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(10)
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "400000"}
    port = free_port()
    proc = subprocess.Popen(
        [*AGENT, "serve", "--backend", "sim", "--interval", "0.05", "--listen", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        messages, watchdog_at = [], []
        while len(watchdog_at) < 3:
            messages.append(sock.recv(4096))
            if messages[-1] == b"WATCHDOG=1":
                watchdog_at.append(time.monotonic())
        ready = [m for m in messages if m.startswith(b"READY=1")]
        assert len(ready) == 1 and b"STATUS=sampling every 0.05 s" in ready[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            assert r.status == 200  # READY came after the server was listening
    finally:
        proc.terminate()
        proc.wait(5)
        sock.close()
    # WATCHDOG_USEC=400 ms -> one ping per 200 ms although the sampler ticks every 50 ms
    assert watchdog_at[2] - watchdog_at[0] >= 0.35
    assert proc.returncode == 0


def test_promtool_check_metrics_is_clean(agent_factory: Any, fake_nvml_dir: pathlib.Path) -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool missing: install the Debian package prometheus (.ci/run does)")
    sim = agent_factory("--backend", "sim", "--node", "s")
    gb10 = agent_factory(
        "--node", "g", env={"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": "gb10"}
    )
    for agent in (sim, gb10):
        with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as r:
            text = r.read()
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
        assert check.returncode == 0 and check.stdout == b"" and check.stderr == b"", check.stderr


def test_a_client_that_drops_its_connection_mid_body_is_no_error(agent_factory: Any) -> None:
    """A body announced at 100 bytes, 10 sent, the socket closed (a killed curl): before, the agent logged
    an ERROR with a traceback (ConnectionResetError out of request.read); the coordinator, whose servers
    share the middleware, did the same."""
    agent = agent_factory("--backend", "sim", "--node", "n")
    for method, path in (("PUT", "/v1/interval"), ("POST", "/v1/sim/load")):
        with socket.create_connection(("127.0.0.1", agent.port)) as sock:
            head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
            sock.sendall(head.encode() + b'{"interval')
            time.sleep(0.2)
    time.sleep(0.5)
    said = agent.stop()
    assert "Error handling request" not in said and "Traceback" not in said, said
