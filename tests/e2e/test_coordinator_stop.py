"""A coordinator stopped (SIGTERM) while clients keep asking: before, it closed its databases while the
API still took requests, and those in flight were a 500 with "Cannot operate on a closed database" and a
traceback in the log (3 in 3 stops in a sweep). The API stops first now: a request is answered, or its
connection refused or cut, never a 500."""

from __future__ import annotations

import http.client
import pathlib
import threading
import time
from typing import Any

from helpers.processes import Coordinator


def _hammer(coord: Coordinator, stop: threading.Event, statuses: list[int]) -> None:
    """Open a run, mark it, end it, again and again, noting each answer's status."""
    while not stop.is_set():
        try:
            status, run = coord.call("POST", "/v1/runs", {"name": "load"})
            statuses.append(status)
            if status == 201:
                statuses.append(
                    coord.call("POST", f"/v1/runs/{run['id']}/marks", {"name": "m", "event": "begin"})[0]
                )
                statuses.append(coord.call("POST", f"/v1/runs/{run['id']}/end", {})[0])
        except (OSError, http.client.HTTPException, ValueError):  # refused, cut or empty: the server is gone
            time.sleep(0.01)


def test_a_stop_under_load_answers_no_request_with_a_500(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    for attempt in range(3):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        coord = Coordinator(folder, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
        coord.start()
        stop, statuses = threading.Event(), list[int]()
        threads = [threading.Thread(target=_hammer, args=(coord, stop, statuses)) for _ in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert coord.proc is not None
        coord.proc.terminate()
        coord.proc.wait(15)
        stop.set()
        for thread in threads:
            thread.join(10)
        stderr = coord.proc.stderr.read() if coord.proc.stderr else ""
        assert coord.proc.returncode == 0, stderr
        assert statuses and 500 not in statuses, sorted(set(statuses))
        assert "Traceback" not in stderr and "Error handling request" not in stderr, stderr[-3000:]
