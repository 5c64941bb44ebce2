"""`sparkwatch import` against a real coordinator: an import lands whole or not at all — a file that goes
wrong after thousands of posted windows, and a client killed half-way, leave the run as it was."""

from __future__ import annotations

import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import time
from typing import Any

from helpers.processes import Coordinator

CLI = [sys.executable, "-m", "sparkwatch", "import", "plain"]


def plain_csv(path: pathlib.Path, rows: int, bad_last_row: bool = False, ago_s: float = 1.9) -> pathlib.Path:
    """``rows`` windows from ``ago_s`` ago (by default inside a run opened just before, give or take 2 s)."""
    t0 = time.time_ns() - int(ago_s * 1e9)
    lines = ["id,phase,t_start_ns,t_end_ns,completion_tokens"]
    lines += [f"req-{i},timed,{t0 + i * 10**4},{t0 + i * 10**4 + 10**8},7" for i in range(rows)]
    if bad_last_row:
        lines.append(f"req-bad,timed,{t0},not-a-number,7")
    path.write_text("\n".join(lines) + "\n")
    return path


def _started(tmp_path: pathlib.Path, agent_factory: Any) -> tuple[Coordinator, dict[str, str]]:
    """A coordinator of one sim node, started, and the environment that points the CLI at it."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    coord = Coordinator(tmp_path, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    return coord, {
        **os.environ,
        "SPARKWATCH_COORDINATOR": coord.url,
        "SPARKWATCH_TOKEN_FILE": str(coord.token),
    }


def staged(coord: Coordinator) -> int:
    """Windows in the database, committed or not (what a client has posted so far)."""
    with sqlite3.connect(coord.db, timeout=10) as db:
        return int(db.execute("SELECT COUNT(*) FROM windows").fetchone()[0])


def test_an_import_that_fails_late_or_is_killed_leaves_the_run_as_it_was(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    coord, env = _started(tmp_path, agent_factory)
    try:
        _, run = coord.call("POST", "/v1/runs", {"name": "imports"})
        late = plain_csv(tmp_path / "late.csv", 25_000, bad_last_row=True)  # three batches go out first
        failed = subprocess.run(
            [*CLI, str(late), "--run", run["id"]], capture_output=True, text=True, env=env
        )
        after_failure = coord.call("GET", f"/v1/runs/{run['id']}")[1]["windows"], staged(coord)

        big = plain_csv(tmp_path / "big.csv", 150_000)
        client = subprocess.Popen([*CLI, str(big), "--run", run["id"]], env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while staged(coord) == 0 and time.monotonic() < deadline and client.poll() is None:
            time.sleep(0.02)
        client.send_signal(signal.SIGKILL)  # no chance to abort: the coordinator must not show any of it
        client.wait()
        while_killed = coord.call("GET", f"/v1/runs/{run['id']}")[1]["windows"], staged(coord)
        coord.stop()
        coord.start()  # a restart drops what no client can still commit
        after_restart = staged(coord)
        again = subprocess.run([*CLI, str(big), "--run", run["id"]], capture_output=True, text=True, env=env)
        final = coord.call("GET", f"/v1/runs/{run['id']}")[1]["windows"]
    finally:
        coord.stop()
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert failed.stderr.startswith(f"sparkwatch: error: {late}: row 25002: t_end_ns must be")
    assert after_failure == (0, 0)  # nothing visible, and the client's abort took the staged batches back
    assert while_killed[0] == 0 and while_killed[1] > 0  # staged, invisible
    assert after_restart == 0
    assert again.returncode == 0, again.stderr
    assert final == 150_000


def test_an_import_stopped_by_sigterm_is_aborted_and_a_stale_file_is_not_taken_into_an_open_run(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """SIGTERM (timeout, a CI cancel, systemd) unwinds as Ctrl-C does: the staged windows are taken back
    (they were left staged, and a retry was refused for 10 minutes as repeating them). A file whose windows
    lie before the open run (one an earlier run left behind) is refused, as `run --import` and an ended run
    refuse it: its windows were measured on the samples of a time before the run."""
    coord, env = _started(tmp_path, agent_factory)
    try:
        _, run = coord.call("POST", "/v1/runs", {"name": "imports"})
        big = plain_csv(tmp_path / "big.csv", 150_000)
        client = subprocess.Popen([*CLI, str(big), "--run", run["id"]], env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while staged(coord) == 0 and time.monotonic() < deadline and client.poll() is None:
            time.sleep(0.02)
        client.send_signal(signal.SIGTERM)
        _, said = client.communicate(timeout=30)
        after_term = staged(coord)
        again = subprocess.run([*CLI, str(big), "--run", run["id"]], capture_output=True, text=True, env=env)
        stale = plain_csv(tmp_path / "stale.csv", 3, ago_s=3600)  # an hour before the run opened
        refused = subprocess.run(
            [*CLI, str(stale), "--run", run["id"]], capture_output=True, text=True, env=env
        )
        final = coord.call("GET", f"/v1/runs/{run['id']}")[1]["windows"], staged(coord)
    finally:
        coord.stop()
    assert client.returncode == 130 and b"interrupted" in said, said
    assert after_term == 0  # aborted: nothing staged is left behind
    assert again.returncode == 0, again.stderr
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "lies outside this run" in refused.stderr and "an earlier run left behind" in refused.stderr
    assert final == (150_000, 150_000)
