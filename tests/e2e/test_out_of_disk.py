"""A real coordinator process that runs out of room for its database (its file-size limit, RLIMIT_FSIZE,
lowered under it: every write past it fails as on a full disk), then gets room again."""

from __future__ import annotations

import resource
import sqlite3
import time
from typing import Any

import pytest

from helpers.processes import Coordinator, wait_connected


def node(coord: Coordinator) -> dict[str, Any]:
    _, body = coord.call("GET", "/v1/nodes")
    return dict(body["nodes"][0])


def wait_for(check: Any, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_out_of_disk_is_503_and_a_slowing_redial_and_nothing_is_lost(
    agent_factory: Any, tmp_path: pytest.TempPathFactory
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n1", "--interval", "0.05")
    coord = Coordinator(tmp_path, f'[nodes.n1]\nurl = "ws://127.0.0.1:{agent.port}"\n')  # type: ignore[arg-type]
    coord.start()
    assert coord.proc is not None
    try:
        wait_connected(coord, 1)
        _, run = coord.call("POST", "/v1/runs", {"name": "full"})
        wal = coord.db.with_name(coord.db.name + "-wal")
        # every file the coordinator writes may now grow by only a few more pages
        resource.prlimit(
            coord.proc.pid, resource.RLIMIT_FSIZE, (wal.stat().st_size + 65536, resource.RLIM_INFINITY)
        )
        down = wait_for(lambda: (n := node(coord))["status"] == "down" and n)
        assert "the database cannot take a write" in down["error"]
        t0, dials0 = time.monotonic(), node(coord)["reconnects"]
        now = time.time_ns()
        # more than the room left (a failed write can leave room that a small one still fits in)
        batch = {
            "windows": [
                {"id": f"{i:05d}-" + "w" * 150, "phase": "timed", "t_start_ns": now - 10**9, "t_end_ns": now}
                for i in range(2000)
            ]
        }
        refused = coord.call("POST", f"/v1/runs/{run['id']}/windows", batch)
        healthz = coord.call("GET", "/healthz", token=None)
        time.sleep(max(0.0, 5.0 - (time.monotonic() - t0)))
        dials = node(coord)["reconnects"] - dials0
        resource.prlimit(
            coord.proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        )
        wait_for(lambda: node(coord)["status"] == "streaming", timeout_s=20)
        stored = coord.call("POST", f"/v1/runs/{run['id']}/windows", batch)
        wait_for(lambda: node(coord)["lag_s"] is not None and node(coord)["lag_s"] < 1.0)
    finally:
        coord.stop()
    stderr = coord.proc.stderr.read() if coord.proc.stderr else ""
    assert refused[0] == 503 and refused[1]["error"] == "unavailable", refused
    assert "the database cannot take a write" in refused[1]["reason"]
    assert healthz[0] == 503 and healthz[1]["disconnected"] == ["n1"]
    # backing off: 0.5 s doubling (jittered by up to half) is at most 5 dials in 5 s; redialling every
    # half second would be 10 to 20
    assert 1 <= dials <= 5, dials
    assert stored == (201, {"stored": 2000})
    db = sqlite3.connect(coord.db)
    first, last, count = db.execute(
        "SELECT MIN(seq_first), MAX(seq_last), SUM(count) FROM sample_blocks WHERE node = 'n1'"
    ).fetchone()
    assert count == last - first + 1  # the agent's ring kept what the coordinator could not write
    assert db.execute("SELECT COUNT(*) FROM gaps").fetchone()[0] == 0
    assert "Traceback" not in stderr
