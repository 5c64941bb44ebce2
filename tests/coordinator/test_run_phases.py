"""A run's measured phases (issue 16): `POST /v1/runs` takes ``phases``, the run and its export show them, the
export measures the windows of those phases, a bad list is a 400 with a JSON reason, a database from before
the column migrates with every old run measuring its timed windows, and an offline re-export can name others.
All on a real coordinator over HTTP with SQLite files."""

from __future__ import annotations

import pathlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from helpers.frames import sample_frame
from helpers.inproc_api import inproc_api
from sparkwatch.client import CoordinatorClient, CoordinatorTarget
from sparkwatch.commands.export_cmd import offline_export
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.windows import Window
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store, StoreError
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.schema import MIGRATIONS
from sparkwatch.wire import SampleFrame

S = 1_000_000_000
T0 = 1_800_000_000 * S
#: The schema that added ``runs.phases``: a database at the one before it has no such column.
PHASES_SCHEMA = 6
#: One warm-up request of 1 s, then two timed ones of 2 s each, inside a 10 s run.
WINDOWS = [
    {"id": "warm", "phase": "warmup", "t_start_ns": T0 + S // 2, "t_end_ns": T0 + 3 * S // 2},
    {"id": "t1", "phase": "timed", "t_start_ns": T0 + 2 * S, "t_end_ns": T0 + 4 * S},
    {"id": "t2", "phase": "timed", "t_start_ns": T0 + 5 * S, "t_end_ns": T0 + 7 * S},
]


def sample(seq: int) -> SampleFrame:
    """Node n1 every 0.1 s after T0: 10 W by its energy counter (1 J per interval), busy: gated in."""
    return sample_frame(seq, {"power_w": 10.0, "energy_j": float(seq), "util_ratio": 0.9})


def with_samples(store: Store) -> None:
    """12 s of n1's samples on the coordinator's clock (its probe rounds say the clocks agree)."""
    store.record_hello("n1", {"boot_id": "b1", "capabilities": {"gpus": [{"uuid": "GPU-x", "fields": {}}]}})
    store.ingest("n1", "b1", [sample(i) for i in range(1, 121)])
    for t in (T0, T0 + 12 * S):
        store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=t)


@dataclass
class Api:
    client: TestClient[Any, Any]
    store: Store
    clock: list[int]

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = await self.client.request(method, path, json=body)
        return response.status, await response.json()

    async def measured_run(self, body: dict[str, Any]) -> dict[str, Any]:
        """Open a run with ``body`` at T0, post WINDOWS, end it at T0 + 10 s; its run JSON."""
        self.clock[0] = T0
        status, run = await self.call("POST", "/v1/runs", {"name": "phases", **body})
        assert status == 201, run
        status, stored = await self.call("POST", f"/v1/runs/{run['id']}/windows", {"windows": WINDOWS})
        assert (status, stored) == (201, {"stored": len(WINDOWS)})
        self.clock[0] = T0 + 10 * S
        status, ended = await self.call("POST", f"/v1/runs/{run['id']}/end")
        assert status == 200
        return dict(ended)


@pytest.fixture
async def api(tmp_path: pathlib.Path) -> AsyncIterator[Api]:
    async with inproc_api(tmp_path / "c.db", T0, ["n1"]) as (client, store, clock):
        yield Api(client, store, clock)


def in_scope(export: dict[str, Any]) -> dict[str, bool]:
    return {w["id"]: w["in_scope"] for w in export["windows"]}


async def test_a_run_opened_with_warmup_measures_its_warmup_windows_too(api: Api) -> None:
    default = await api.measured_run({})
    both = await api.measured_run({"phases": ["timed", "warmup"]})
    assert default["phases"] == ["timed"] and both["phases"] == ["timed", "warmup"]
    status, shown = await api.call("GET", f"/v1/runs/{both['id']}")
    assert status == 200 and shown["phases"] == ["timed", "warmup"] and shown["windows"] == 3
    status, listed = await api.call("GET", "/v1/runs")
    assert [r["phases"] for r in listed["runs"]] == [["timed"], ["timed", "warmup"]]

    status, plain = await api.call("GET", f"/v1/runs/{default['id']}/export")
    assert status == 200
    assert plain["method"]["phases"] == ["timed"] and plain["method"]["scope_s"] == pytest.approx(4.0)
    assert in_scope(plain) == {"warm": False, "t1": True, "t2": True}
    status, wider = await api.call("GET", f"/v1/runs/{both['id']}/export")
    assert status == 200
    assert wider["method"]["phases"] == ["timed", "warmup"] and wider["method"]["scope_s"] == pytest.approx(
        5.0
    )
    assert in_scope(wider) == {"warm": True, "t1": True, "t2": True}

    # with a node's samples: the warm-up second's energy (10 W) is in the run that measures it, not the other
    with_samples(api.store)
    for run, seconds in ((default, 4.0), (both, 5.0)):
        node = export_run(api.store, run["id"], ["n1"], lambda: T0 + 20 * S)["nodes"][0]
        assert node["samples"]["coverage_ratio"] == pytest.approx(1.0)
        assert node["energy_j"] == pytest.approx(10.0 * seconds)


async def test_a_phase_other_than_timed_alone_leaves_the_timed_windows_out(api: Api) -> None:
    run = await api.measured_run({"phases": ["warmup"]})
    status, export = await api.call("GET", f"/v1/runs/{run['id']}/export")
    assert status == 200 and export["method"]["phases"] == ["warmup"]
    assert in_scope(export) == {"warm": True, "t1": False, "t2": False}
    assert export["method"]["scope_s"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("phases", "loc", "words"),
    [
        ([], "phases", "at least 1 item"),
        ([f"p{i}" for i in range(17)], "phases", "at most 16 items"),
        (["timed", "warmup", "timed"], "phases", "named more than once: timed"),
        (["timed", "Warm-up"], "phases.1", "should match pattern"),
        (["timed\n"], "phases.0", "should match pattern"),
        ([""], "phases.0", "should match pattern"),
        (["x" * 33], "phases.0", "should match pattern"),
        ([1], "phases.0", "valid string"),
        ("timed", "phases", "valid array"),
        (None, "phases", "valid array"),
    ],
)
async def test_a_bad_phase_list_is_a_400_with_a_json_reason_and_opens_nothing(
    api: Api, phases: Any, loc: str, words: str
) -> None:
    status, answer = await api.call("POST", "/v1/runs", {"name": "bad", "phases": phases})
    assert status == 400 and answer["error"] == "invalid_body"
    assert [f["loc"] for f in answer["reason"]] == [loc], answer
    assert words in answer["reason"][0]["msg"]
    assert await api.call("GET", "/v1/runs") == (200, {"runs": [], "damaged": []})


def _database_before_phases(path: pathlib.Path) -> None:
    """A coordinator's file as the sparkwatch before ``runs.phases`` left it: one ended run with a warm-up
    window and a timed one, node n1's samples."""
    db = sqlite3.connect(path)
    for script in MIGRATIONS[: PHASES_SCHEMA - 1]:
        db.executescript(script)
    db.execute(f"PRAGMA user_version = {PHASES_SCHEMA - 1}")
    db.execute(
        "INSERT INTO runs (id, name, t_start_ns, t_end_ns, interval_s, gate_threshold, scope)"
        " VALUES ('old', 'before phases', ?, ?, 0.1, 0.5, 'request')",
        (T0, T0 + 10 * S),
    )
    for w in WINDOWS[:2]:
        db.execute(
            "INSERT INTO windows (run_id, id, phase, t_start_ns, t_end_ns, source)"
            " VALUES ('old', ?, ?, ?, ?, '{}')",
            (w["id"], w["phase"], w["t_start_ns"], w["t_end_ns"]),
        )
    db.commit()
    db.close()


def test_an_old_database_migrates_and_its_runs_measure_timed_windows(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "old.db"
    _database_before_phases(path)
    with pytest.raises(StoreError, match="from an older sparkwatch"):
        Store.read_only(path)  # an offline export cannot upgrade it: it says to start a coordinator first
    store = Store(path)
    try:
        assert store.schema_version == len(MIGRATIONS) >= PHASES_SCHEMA
        (old,) = store.runs()
        assert old.phases == ("timed",) and old.to_json()["phases"] == ["timed"]
        with_samples(store)
        export = export_run(store, "old", ["n1"], lambda: T0 + 20 * S)
        assert export["method"]["phases"] == ["timed"] and in_scope(export) == {"warm": False, "t1": True}
        assert export["nodes"][0]["energy_j"] == pytest.approx(20.0)  # the timed 2 s at 10 W, not warm-up
        store.create_run(RunRow("new", "after", T0 + 20 * S, None, 0.1, 0.5, "request", phases=("warmup",)))
        assert store.run("new").phases == ("warmup",) and store.run("old").phases == ("timed",)
    finally:
        store.close()
    reader = Store.read_only(path)  # now of this schema: readable offline
    try:
        assert [r.phases for r in reader.runs()] == [("timed",), ("warmup",)]
    finally:
        reader.close()


def test_phases_the_store_cannot_read_are_a_store_error(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "c.db")
    try:
        store.create_run(RunRow("r1", "run", T0, None, 0.1, 0.5, "request"))
        for stored in ('"timed"', "[]", "[1]", "not json"):
            sqlite3.connect(tmp_path / "c.db").execute(
                "UPDATE runs SET phases = ?", (stored,)
            ).connection.commit()
            with pytest.raises(StoreError, match="run r1 has unreadable phases"):
                store.run("r1")
    finally:
        store.close()


COMMAND_SAID = "is not a JSON object of argv (text) and exit_code (integer)"


@pytest.mark.parametrize(
    ("column", "stored", "said"),
    [
        ("interval_s", "abc", "interval_s 'abc' is not in [0.01, 60.0] seconds"),
        ("interval_s", 0.0, "interval_s 0.0 is not in [0.01, 60.0] seconds"),
        ("gate_threshold", 7, "gate_threshold 7.0 is not a number in [0, 1]"),
        ("gate_threshold", -0.5, "gate_threshold -0.5 is not a number in [0, 1]"),
        ("scope", "all", "scope 'all' is not one of request, decode, run"),
        ("t_start_ns", "x" * 60, "t_start_ns '" + "x" * 38 + "… is not an integer"),
        ("t_end_ns", T0 - 1, f"t_end_ns {T0 - 1} is not an integer at or after t_start_ns"),
        ("name", "", "name '' is not a name of 1-200 characters"),
        ("command", "[1]", "command '[1]' " + COMMAND_SAID),
        (
            "command",
            '{"argv": 5}',
            "command '{\"argv\": 5}' " + COMMAND_SAID,
        ),  # the export's schema refused it
        (
            "command",
            '{"argv": ["x"], "exit_code": "0"}',
            'command \'{"argv": ["x"], "exit_code": "0"}\' ' + COMMAND_SAID,
        ),
        (
            "command",
            '{"argv": ["x"], "exit_code": 1000}',  # past what the API takes (and what a process exits with)
            'command \'{"argv": ["x"], "exit_code": 1000}\' ' + COMMAND_SAID,
        ),
        # every figure was null; a phase repeated read as one
        ("phases", '["Timed"]', "phases '[\"Timed\"]': phase 'Timed' must match ^[a-z][a-z0-9_-]{0,31}$"),
        (
            "phases",
            '["timed", "timed"]',
            'phases \'["timed", "timed"]\': phases named more than once: timed',
        ),
    ],
)
def test_a_run_row_damaged_outside_sparkwatch_is_a_store_error(
    tmp_path: pathlib.Path, column: str, stored: object, said: str
) -> None:
    """Before, ``interval_s = 'abc'`` reached the export as a TypeError and a gate of 7 was measured."""
    store = Store(tmp_path / "c.db")
    try:
        store.create_run(RunRow("r1", "run", T0, T0 + S, 0.1, 0.5, "request"))
        assert store.run("r1").gate_threshold == 0.5
        db = sqlite3.connect(tmp_path / "c.db")
        db.execute(f"UPDATE runs SET {column} = ?", (stored,)).connection.commit()
        with pytest.raises(StoreError) as refused:
            store.run("r1")
        assert str(refused.value) == f"run r1 is damaged in the database: {said}"
        assert store.runs() == [] and str(store.damaged_runs()["r1"]) == str(refused.value)
    finally:
        store.close()


def test_a_run_ended_after_the_clock_stepped_back_ends_at_its_start(tmp_path: pathlib.Path) -> None:
    """Its end was stored before its start: a row no read takes, so the run (and retention) stopped."""
    store = Store(tmp_path / "c.db")
    try:
        store.create_run(RunRow("r1", "run", T0, None, 0.1, 0.5, "request"))
        assert store.end_run("r1", T0 - 5 * S).t_end_ns == T0
        assert [r.id for r in store.runs()] == ["r1"] and store.damaged_runs() == {}
    finally:
        store.close()


def test_an_offline_re_export_can_measure_other_phases(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    store = Store(path)
    store.set_nodes(["n1"])
    with_samples(store)
    store.create_run(RunRow("r1", "by hand", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window(**w) for w in WINDOWS])
    store.end_run("r1", T0 + 10 * S)
    store.close()
    said: list[str] = []
    common: dict[str, Any] = {"gate_threshold": None, "scope": None, "now_ns": lambda: T0 + 20 * S}
    own = offline_export(path, "r1", say=said.append, **common)
    assert own["method"]["phases"] == ["timed"] and not any("recomputed" in line for line in said)
    said.clear()
    again = offline_export(path, "r1", say=said.append, phases=["warmup", "timed"], **common)
    assert again["method"]["phases"] == ["timed", "warmup"]
    assert in_scope(again) == {"warm": True, "t1": True, "t2": True}
    assert again["nodes"][0]["energy_j"] == pytest.approx(50.0) and own["nodes"][0][
        "energy_j"
    ] == pytest.approx(40.0)
    assert (
        "recomputed with gate 0.5, scope request and phases warmup,timed"
        " (the run's own: gate 0.5, scope request, phases timed)"
    ) in said


async def test_the_client_sends_phases_only_when_given() -> None:
    bodies: list[dict[str, Any]] = []

    async def create(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        run = {"id": "r1", "name": "x", "open": True, "t_start_ns": 1, "t_end_ns": None, "interval_s": 0.1}
        return web.json_response(run, status=201)

    app = web.Application()
    app.router.add_post("/v1/runs", create)
    async with TestServer(app) as server:
        target = CoordinatorTarget(str(server.make_url("")).rstrip("/"), None)
        async with CoordinatorClient(target) as client:
            await client.create_run("plain")
            await client.create_run("wider", phases=("timed", "warmup"))
    assert "phases" not in bodies[0]
    assert bodies[1]["phases"] == ["timed", "warmup"]
