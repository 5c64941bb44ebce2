"""A run's export is of the nodes it was opened with (``runs.nodes``, schema 11), not of the nodes file the
coordinator has at the export: a node added since made an ended run's windows incomplete (coverage 0 on
it), a node removed since left it out of the run's export, and `export --db` did the same from the file."""

from __future__ import annotations

import json
import pathlib
import sqlite3
from typing import Any

import pytest

from helpers.cli import sparkwatch as cli
from helpers.frames import T0
from helpers.inproc_api import inproc_api

S = 1_000_000_000


async def call(
    db: pathlib.Path, names: list[str], clock: list[int], method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    """One request to a coordinator started with the nodes file ``names``, at ``clock[0]``, as a restart
    with that file makes it (the store's nodes are the file's)."""
    async with inproc_api(db, clock[0], names) as (client, _, _):
        response = await client.request(method, path, json=body)
        return response.status, await response.json()


async def opened_and_ended(db: pathlib.Path, names: list[str]) -> str:
    clock = [T0]
    status, run = await call(db, names, clock, "POST", "/v1/runs", {"name": "r"})
    assert status == 201, run
    clock[0] = T0 + 30 * S
    assert (await call(db, names, clock, "POST", f"/v1/runs/{run['id']}/end"))[0] == 200
    return str(run["id"])


def exported_nodes(export: dict[str, Any]) -> list[str]:
    return [node["node"] for node in export["nodes"]]


async def test_a_runs_export_keeps_its_nodes_after_the_nodes_file_changes(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "c.db"
    run = await opened_and_ended(db, ["spark-1", "spark-2"])
    later = [T0 + 60 * S]
    for names in (["spark-1", "spark-3"], ["spark-2", "spark-1", "spark-9"], []):
        status, export = await call(db, names, later, "GET", f"/v1/runs/{run}/export")
        assert status == 200 and exported_nodes(export) == ["spark-1", "spark-2"], names
        status, shown = await call(db, names, later, "GET", f"/v1/runs/{run}")
        assert status == 200 and shown["nodes"] == ["spark-1", "spark-2"], names  # what it measures
    out = tmp_path / "out.json"
    done = cli("export", "--db", str(db), run, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert exported_nodes(json.loads(out.read_text())) == ["spark-1", "spark-2"]


async def test_a_run_stored_before_its_nodes_were_kept_takes_the_coordinators(tmp_path: pathlib.Path) -> None:
    """A run of schema 10 or before has no nodes: its export is of the coordinator's, as it always was."""
    db = tmp_path / "c.db"
    run = await opened_and_ended(db, ["spark-1", "spark-2"])
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET nodes = NULL")
    conn.close()
    status, export = await call(db, ["spark-3"], [T0 + 60 * S], "GET", f"/v1/runs/{run}/export")
    assert status == 200 and exported_nodes(export) == ["spark-3"]
    status, shown = await call(db, ["spark-3"], [T0 + 60 * S], "GET", f"/v1/runs/{run}")
    assert status == 200 and shown["nodes"] is None  # not kept: the coordinator's, whichever they are then


@pytest.mark.parametrize(
    ("stored", "shown"),
    [("'abc'", "'abc'"), ("'[1]'", "'[1]'"), ('\'["a", "a"]\'', '\'["a", "a"]\''), ("7", "'7'")],
)
async def test_damaged_nodes_are_refused_with_one_line(
    tmp_path: pathlib.Path, stored: str, shown: str
) -> None:
    db = tmp_path / "c.db"
    run = await opened_and_ended(db, ["spark-1"])
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE runs SET nodes = {stored}")
    conn.close()
    said = f"run {run} is damaged in the database: nodes {shown} is not a JSON array of node names"
    status, refusal = await call(db, ["spark-1"], [T0 + 60 * S], "GET", f"/v1/runs/{run}/export")
    assert (status, refusal) == (409, {"error": "damaged", "reason": said})
    # a run whose every read refuses it is listed as damaged, not as a sound run (nor the newest to export)
    status, listed = await call(db, ["spark-1"], [T0 + 60 * S], "GET", "/v1/runs")
    assert status == 200 and listed == {"runs": [], "damaged": [{"id": run, "reason": said}]}
    assert await call(db, ["spark-1"], [T0 + 60 * S], "GET", f"/v1/runs/{run}") == (409, refusal)
    out = tmp_path / "out.json"
    done = cli("export", "--db", str(db), run, "-o", str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines()[-1] == f"sparkwatch: error: {said}"


async def test_an_open_run_whose_nodes_are_damaged_can_be_deleted(tmp_path: pathlib.Path) -> None:
    """Its row does not read, so it cannot be ended; deleting it is the way out."""
    db = tmp_path / "c.db"
    clock = [T0]
    status, run = await call(db, ["spark-1"], clock, "POST", "/v1/runs", {"name": "r"})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET nodes = 'abc'")
    conn.close()
    assert (await call(db, ["spark-1"], clock, "POST", f"/v1/runs/{run['id']}/end"))[0] == 409
    status, answer = await call(db, ["spark-1"], clock, "DELETE", f"/v1/runs/{run['id']}")
    assert status == 202 and answer["deleted"] == run["id"]


async def test_a_restart_with_another_nodes_file_says_what_an_open_run_measures(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The open run keeps measuring the nodes it was opened with: the start says so, once per open run,
    rather than the export leaving an added node out in silence. An ended run, or the same nodes, say
    nothing."""
    db, clock = tmp_path / "c.db", [T0]
    _, ended = await call(db, ["spark-1", "spark-2"], clock, "POST", "/v1/runs", {"name": "ended"})
    assert (await call(db, ["spark-1", "spark-2"], clock, "POST", f"/v1/runs/{ended['id']}/end"))[0] == 200
    _, run = await call(db, ["spark-1", "spark-2"], clock, "POST", "/v1/runs", {"name": "open"})
    caplog.clear()
    assert (await call(db, ["spark-1", "spark-2"], clock, "GET", "/v1/runs"))[0] == 200
    assert not [r for r in caplog.records if "measures the nodes" in r.getMessage()]
    status, shown = await call(db, ["spark-3", "spark-1"], clock, "GET", f"/v1/runs/{run['id']}")
    (said,) = [r.getMessage() for r in caplog.records if "measures the nodes" in r.getMessage()]
    assert said == (
        f"run {run['id']} (open) measures the nodes it was opened with (spark-1, spark-2): spark-3 (added to"
        " the nodes file since) not in its export; spark-2 (no longer in the nodes file) still in it, and its"
        " windows from now on incomplete there; end it and open another to measure this nodes file's"
    )
    assert status == 200 and shown["nodes"] == ["spark-1", "spark-2"]
