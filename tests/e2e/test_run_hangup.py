"""`sparkwatch run` in a terminal that hangs up (the SSH session to the head node dropped), and in a shell
that left a stop signal ignored. Before, SIGHUP killed `run` where it stood: exit 129, no export, the
run left open, the agents' 0.1 s leases held, and the benchmark (in its own process group, which a
hangup does not reach) ran on."""

from __future__ import annotations

import json
import os
import pathlib
import pty
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

from helpers.cli import nodes_toml
from helpers.processes import alive, wait_for_file

S_WAIT = 60.0


def _argv(tmp_path: pathlib.Path, nodes: pathlib.Path, command: str) -> list[str]:
    return [sys.executable, "-m", "sparkwatch", "run", "--nodes", str(nodes), "-o", str(tmp_path / "r.json"),
            "--", "sh", "-c", command]  # fmt: skip


def _env(tmp_path: pathlib.Path) -> dict[str, str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")},
        "TMPDIR": str(scratch),
    }


def _exit_status(pid: int) -> int:
    deadline = time.monotonic() + S_WAIT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        assert time.monotonic() < deadline, "run did not end"
        time.sleep(0.05)


def _leases(agent: Any) -> list[Any]:
    with urllib.request.urlopen(f"{agent.url}/v1/interval", timeout=5) as answer:
        leases: list[Any] = json.loads(answer.read())["leases"]
    return leases


def test_a_terminal_hangup_ends_the_run_with_its_export(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    nodes = nodes_toml(tmp_path, [agent])
    pid_file = tmp_path / "pid"
    argv = _argv(tmp_path, nodes, f"sleep 60 & echo $! > {pid_file}; wait")
    env = _env(tmp_path)
    pid, terminal = pty.fork()  # run leads a session whose controlling terminal is this pty, as over SSH
    if pid == 0:
        os.execve(argv[0], argv, env)
    try:
        wait_for_file(pid_file, S_WAIT)
        time.sleep(0.5)
    finally:
        os.close(terminal)  # the session drops: the kernel sends SIGHUP, and writes to the terminal fail
    time.sleep(0.3)  # the first one handled (two pending at once would be one)
    os.kill(pid, signal.SIGHUP)  # and the login shell's, to its jobs: a second hangup must not force a quit
    assert _exit_status(pid) == 130
    export = json.loads((tmp_path / "r.json").read_text())
    assert export["run"]["command"]["exit_code"] == 128 + signal.SIGHUP  # relayed to the command's group
    assert export["run"]["t_end_ns"] is not None
    sleeper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(sleeper):
        assert time.monotonic() < deadline, "the benchmark outlived the hangup"
        time.sleep(0.05)
    assert _leases(agent) == []
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == []  # the embedded database cleaned up


def test_a_signal_the_shell_left_ignored_stays_ignored(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    """A script's background job starts with SIGINT ignored (POSIX): it was ignored while `run` waited for
    the hellos and heeded once the command ran. Now it stays ignored throughout, and SIGTERM stops it."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    started = tmp_path / "started"
    argv = _argv(tmp_path, nodes_toml(tmp_path, [agent]), f"touch {started}; sleep 60")
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509 — as a shell does
    )
    wait_for_file(started, S_WAIT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # ignored, as it was before the command ran
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = proc.communicate(timeout=S_WAIT)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    export = json.loads((tmp_path / "r.json").read_text())
    assert export["run"]["command"]["exit_code"] == 128 + signal.SIGTERM
