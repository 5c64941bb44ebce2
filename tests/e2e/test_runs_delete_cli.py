"""`sparkwatch runs delete` through the real entry point, against a real coordinator and sim agent: an open
run is refused in one line, an ended one goes with its windows (online and in an offline export) and the
samples its span holds (no other run covers them); the node's later samples stay."""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess
import time
from typing import Any

from helpers.cli import sparkwatch as cli
from helpers.processes import Coordinator, wait_connected

S = 1_000_000_000


def one_line_refusal(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, result
    assert result.stderr.startswith("sparkwatch: error: ") and result.stderr.count("\n") == 1, result.stderr
    for part in parts:
        assert part in result.stderr, (part, result.stderr)


def rows_of(db: pathlib.Path, run_id: str) -> tuple[int, int]:
    """The run's rows and window rows left in the file."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (runs,) = conn.execute("SELECT COUNT(*) FROM runs WHERE id = ?", (run_id,)).fetchone()
        (windows,) = conn.execute("SELECT COUNT(*) FROM windows WHERE run_id = ?", (run_id,)).fetchone()
    return int(runs), int(windows)


def test_runs_delete_refuses_an_open_run_and_deletes_an_ended_one(
    agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-1")
    coord = Coordinator(tmp_path, f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    try:
        wait_connected(coord, 1)
        env = {"SPARKWATCH_COORDINATOR": coord.url, "SPARKWATCH_TOKEN_FILE": str(coord.token)}
        run_id = cli("runs", "open", "--name", "doomed", env=env).stdout.strip()
        start = coord.call("GET", f"/v1/runs/{run_id}")[1]["t_start_ns"]
        body = {
            "windows": [
                {"id": f"w{i}", "phase": "timed", "t_start_ns": start, "t_end_ns": start + S}
                for i in range(3)
            ]
        }
        assert coord.call("POST", f"/v1/runs/{run_id}/windows", body)[0] == 201

        refused = cli("runs", "delete", run_id, env=env)
        one_line_refusal(refused, "HTTP 409", f"run {run_id} is open: end it first")
        assert coord.call("GET", f"/v1/runs/{run_id}")[1]["windows"] == 3
        assert cli("runs", "end", run_id, env=env).returncode == 0
        end = coord.call("GET", f"/v1/runs/{run_id}")[1]["t_end_ns"]
        size = {r["id"]: r["size_bytes"] for r in coord.call("GET", "/v1/runs")[1]["runs"]}[run_id]
        assert size > 0 and blocks_between(coord.db, start, end) > 0

        deleted = cli("runs", "delete", run_id, env=env)
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout == f"deleted run {run_id} (3 windows)\n"
        one_line_refusal(cli("runs", "show", run_id, env=env), "HTTP 404", f"no run {run_id}")
        one_line_refusal(cli("runs", "delete", run_id, env=env), "HTTP 404", f"no run {run_id}")
        assert cli("runs", "list", env=env).stdout == f"no runs on {coord.url}\n"
        one_line_refusal(cli("export", "--db", str(coord.db), run_id), f"no run {run_id} in {coord.db}")
        deadline = time.monotonic() + 10
        # the rows, then the samples, follow in the background
        while rows_of(coord.db, run_id) != (0, 0) or blocks_between(coord.db, start, end):
            assert time.monotonic() < deadline, (
                rows_of(coord.db, run_id),
                blocks_between(coord.db, start, end),
            )
            time.sleep(0.05)
        seq = coord.call("GET", "/v1/nodes")[1]["nodes"][0]["last_seq"]
        while blocks_between(coord.db, end + 1, 2**63 - 1) == 0:  # the node goes on storing after the run
            assert time.monotonic() < deadline, seq
            time.sleep(0.05)
    finally:
        coord.stop()


def blocks_between(db: pathlib.Path, t_from_ns: int, t_to_ns: int) -> int:
    """Sample blocks with a sample stamped in [t_from_ns, t_to_ns] (agent and coordinator share a clock)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (count,) = conn.execute(
            "SELECT COUNT(*) FROM sample_blocks WHERE wall_last_ns >= ? AND wall_first_ns <= ?",
            (t_from_ns, t_to_ns),
        ).fetchone()
    return int(count)
