"""`DELETE /v1/runs/{id}` on a real coordinator over HTTP with a SQLite file: an ended run goes from every
read at once and its rows in short transactions afterwards; an open run is refused and left as it was; a run
deleted by a coordinator that stopped before its rows were gone is invisible, also offline, and its rows go
at the next start. Samples belong to nodes and stay."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from helpers.frames import sample_frame
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.windows import Window
from sparkwatch.sources.store import export_run, run_windows
from sparkwatch.store import NotFound, Store
from sparkwatch.store.deletion import PURGE_ROWS
from sparkwatch.store.run_rows import RunRow
from sparkwatch.wire import SampleFrame

S = 1_000_000_000
T0 = 1_800_000_000 * S
RUN_S = 100
DIRECT = 2 * PURGE_ROWS + 37  # more windows than one purge transaction takes


def owned_rows(db: pathlib.Path, run_id: str) -> dict[str, int]:
    """What the file holds of the run, table by table (staged windows and the tombstoned row included)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        counts = {
            table: int(
                conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = ?", (run_id,)).fetchone()[0]
            )
            for table in ("windows", "marks", "imports")
        }
        counts["runs"] = int(conn.execute("SELECT COUNT(*) FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
    return counts


def samples_in(db: pathlib.Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT SUM(count) FROM sample_blocks").fetchone()[0] or 0)


async def purged(db: pathlib.Path, run_id: str, timeout_s: float = 10.0) -> None:
    """Until the background purge has removed every row of the run."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while any(owned_rows(db, run_id).values()):
        assert asyncio.get_running_loop().time() < deadline, owned_rows(db, run_id)
        await asyncio.sleep(0.02)


def sample(seq: int) -> SampleFrame:
    return sample_frame(seq, {"power_w": 50.0, "energy_j": 10.0 + seq, "util_ratio": 0.9}, interval_s=1.0)


def window(wid: str, start_s: float = 1) -> dict[str, Any]:
    start = T0 + int(start_s * S)
    return {"id": wid, "phase": "timed", "t_start_ns": start, "t_end_ns": start + S}


@dataclass
class Api:
    client: TestClient[Any, Any]
    coordinator: Coordinator
    db: pathlib.Path
    clock: list[int]

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = await self.client.request(method, path, json=body)
        return response.status, await response.json()

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = await self.call(method, path, body)
        assert 200 <= status < 300, (status, answer)
        return answer

    async def run_with_rows(self, name: str, end: bool = True) -> str:
        """A run with direct windows, a committed and a staged import, and a mark still open at its end (a
        row the end dropped, put back as a store written by an older coordinator holds it)."""
        self.clock[0] = T0
        run = str((await self.ok("POST", "/v1/runs", {"name": name}))["id"])
        direct = [window(f"w{i}", 1 + i / 100) for i in range(DIRECT)]
        await self.ok("POST", f"/v1/runs/{run}/windows", {"windows": direct})
        await self.ok("POST", f"/v1/runs/{run}/marks", {"name": "left-open", "event": "begin"})
        for commit in (True, False):
            imp = (await self.ok("POST", f"/v1/runs/{run}/imports", {}))["import_id"]
            staged = {"windows": [window(f"{imp}-{i}", 2) for i in range(3)], "import_id": imp}
            await self.ok("POST", f"/v1/runs/{run}/windows", staged)
            if commit:
                await self.ok("POST", f"/v1/runs/{run}/imports/{imp}/commit", {})
        if end:
            self.clock[0] = T0 + RUN_S * S
            ended = await self.ok("POST", f"/v1/runs/{run}/end")
            assert ended["dropped_marks"] == ["left-open"]  # today's end drops it; put back as a store
            conn = sqlite3.connect(self.db)  # written by an earlier sparkwatch (which kept it) holds it
            with conn:
                conn.execute("INSERT INTO marks VALUES (?, 'left-open', 'timed', ?)", (run, T0 + S))
            conn.close()
        self.clock[0] = T0 + 2 * RUN_S * S
        return run


async def serve(db: pathlib.Path, clock: list[int]) -> tuple[Api, Store]:
    now: Callable[[], int] = lambda: clock[0]  # noqa: E731
    store = Store(db, now_ns=now)
    coordinator = Coordinator([], store, now_ns=now)
    client = TestClient(TestServer(make_app(coordinator, None)))
    await client.start_server()
    return Api(client, coordinator, db, clock), store


async def shut(api: Api, store: Store) -> None:
    await api.client.close()
    await api.coordinator.stop()
    store.close()


@pytest.fixture
async def api(tmp_path: pathlib.Path) -> AsyncIterator[Api]:
    served, store = await serve(tmp_path / "c.db", [T0])
    store.ingest("n1", "b1", [sample(i) for i in range(1, 51)])
    try:
        yield served
    finally:
        await shut(served, store)


async def test_an_ended_run_is_gone_from_every_read_and_its_rows_follow(api: Api) -> None:
    kept = await api.run_with_rows("kept")
    run = await api.run_with_rows("deleted")
    before_kept = owned_rows(api.db, kept)
    assert (await api.call("GET", f"/v1/runs/{run}/export"))[0] == 200
    pending = (await api.ok("POST", f"/v1/runs/{run}/imports", {}))["import_id"]  # begun, not committed

    status, answer = await api.call("DELETE", f"/v1/runs/{run}")
    assert status == 202 and answer == {"deleted": run, "windows": DIRECT + 3}  # staged ones never counted
    assert [r["id"] for r in (await api.ok("GET", "/v1/runs"))["runs"]] == [kept]
    for method, path, body in [
        ("GET", f"/v1/runs/{run}", None),
        ("GET", f"/v1/runs/{run}/export", None),
        ("POST", f"/v1/runs/{run}/windows", {"windows": [window("late", 3)]}),
        ("POST", f"/v1/runs/{run}/imports", {}),
        ("POST", f"/v1/runs/{run}/marks", {"name": "left-open", "event": "end"}),
        ("DELETE", f"/v1/runs/{run}", None),
        ("POST", f"/v1/runs/{run}/imports/{pending}/commit", {}),  # was "no import … (aborted, or …?)"
        ("DELETE", f"/v1/runs/{run}/imports/{pending}", None),
    ]:
        status, refusal = await api.call(method, path, body)
        assert status == 404 and refusal["error"] == "not_found", (method, path, refusal)
        assert "import" not in refusal["reason"], refusal
        assert (
            run in refusal["reason"]
        )  # "no run RUN" (an open mark: "no open mark … in run RUN" once purged)

    await purged(api.db, run)
    assert owned_rows(api.db, kept) == before_kept and before_kept["marks"] == 1
    assert (await api.ok("GET", f"/v1/runs/{kept}"))["windows"] == DIRECT + 3
    assert samples_in(api.db) == 50  # the kept run covers the same span: its samples stay


async def test_an_open_run_is_refused_and_unchanged(api: Api) -> None:
    run = await api.run_with_rows("still open", end=False)
    before = owned_rows(api.db, run)
    status, refusal = await api.call("DELETE", f"/v1/runs/{run}")
    assert status == 409 and refusal["error"] == "conflict"
    assert refusal["reason"] == f"run {run} is open: end it first (sparkwatch runs end {run}), then delete it"
    shown = await api.ok("GET", f"/v1/runs/{run}")
    assert shown["open"] and shown["windows"] == DIRECT + 3
    await asyncio.sleep(0.1)  # no purge was started either
    assert owned_rows(api.db, run) == before
    # once ended it can go
    await api.ok("POST", f"/v1/runs/{run}/end")
    assert (await api.ok("DELETE", f"/v1/runs/{run}"))["windows"] == DIRECT + 3


async def test_an_unknown_run_is_a_404(api: Api) -> None:
    status, refusal = await api.call("DELETE", "/v1/runs/run-nope")
    assert status == 404 and refusal == {"error": "not_found", "reason": "no run run-nope"}


def test_the_purge_goes_in_short_transactions_and_the_run_row_is_forgotten_last(
    tmp_path: pathlib.Path,
) -> None:
    store = Store(tmp_path / "c.db", now_ns=lambda: T0 + 2 * RUN_S * S)
    store.create_run(RunRow("r1", "r", T0, T0 + RUN_S * S, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window(f"w{i}", "timed", T0 + S, T0 + 2 * S) for i in range(DIRECT)])
    assert store.delete_run("r1") == DIRECT
    seen = [owned_rows(tmp_path / "c.db", "r1")]
    while not store.purge_step("r1"):
        seen.append(owned_rows(tmp_path / "c.db", "r1"))
    assert [s["windows"] for s in seen] == [DIRECT, DIRECT - PURGE_ROWS, DIRECT - 2 * PURGE_ROWS, 0]
    assert all(s["runs"] == 1 for s in seen) and owned_rows(tmp_path / "c.db", "r1")["runs"] == 1
    assert store.deleted_runs() == ["r1"]  # a stop now (before its samples went) is finished at the start
    store.forget_run("r1")
    assert owned_rows(tmp_path / "c.db", "r1")["runs"] == 0 and store.deleted_runs() == []
    assert store.purge_step("r1")  # gone already: nothing to do
    store.close()


async def test_a_delete_cut_short_is_invisible_and_finished_at_the_next_start(tmp_path: pathlib.Path) -> None:
    db, clock = tmp_path / "c.db", [T0]
    first, store = await serve(db, clock)
    run = await first.run_with_rows("crashed")
    kept = await first.run_with_rows("kept")
    await shut(first, store)
    crashed = Store(db, now_ns=lambda: clock[0])
    assert crashed.delete_run(run) == DIRECT + 3  # step 1 only: the coordinator died before its purge
    crashed.close()
    assert owned_rows(db, run)["windows"] == DIRECT + 6  # every row is still in the file

    offline = Store.read_only(db)  # `sparkwatch export --db` does not see it either
    try:
        assert [r.id for r in offline.runs()] == [kept]
        with pytest.raises(NotFound, match=f"no run {run}"):
            export_run(offline, run, [], lambda: clock[0])
        assert offline.windows(run) == [] and offline.count_windows(run) == 0
    finally:
        offline.close()

    second, store = await serve(db, clock)
    try:
        assert (await second.call("GET", f"/v1/runs/{run}"))[0] == 404
        await second.coordinator.start()  # its staged import is the purge's, not the import cleanup's
        await purged(db, run)
        assert [r["id"] for r in (await second.ok("GET", "/v1/runs"))["runs"]] == [kept]
        assert (await second.ok("GET", f"/v1/runs/{kept}"))["windows"] == DIRECT + 3
    finally:
        await shut(second, store)


async def test_a_run_whose_row_was_damaged_outside_sparkwatch_can_still_be_deleted(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """The way out of a 409 "damaged in the database": the run's deletion reads its span to drop its
    samples, and a `t_start_ns` of 'abc' made that a ValueError that ended the purge, so the run was
    hidden but its rows stayed for good (and every later start failed at it again)."""
    run = str(
        (await api.ok("POST", "/v1/runs", {"name": "edited"}))["id"]
    )  # no window: its span is its row's
    api.clock[0] = T0 + RUN_S * S
    await api.ok("POST", f"/v1/runs/{run}/end")
    conn = sqlite3.connect(api.db)
    with conn:
        conn.execute("UPDATE runs SET t_start_ns = 'abc' WHERE id = ?", (run,))
    conn.close()
    listed = await api.ok("GET", "/v1/runs")  # the list was a 409 for the one row: no run shown at all
    assert listed["runs"] == [] and listed["damaged"] == [
        {"id": run, "reason": f"run {run} is damaged in the database: t_start_ns 'abc' is not an integer"}
    ]
    status, refusal = await api.call("GET", f"/v1/runs/{run}")
    assert status == 409 and refusal["reason"] == listed["damaged"][0]["reason"]
    status, answer = await api.call("DELETE", f"/v1/runs/{run}")
    assert status == 202 and answer["deleted"] == run
    await purged(api.db, run)
    assert await api.ok("GET", "/v1/runs") == {"runs": [], "damaged": []}
    assert samples_in(api.db) == 50  # no span to trust: left to idle retention, not dropped by a guess
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"run {run}: run {run} is damaged in the database: t_start_ns 'abc' is not an integer;" in said[-1]


async def test_an_open_run_whose_row_was_damaged_can_be_deleted_and_the_refusals_say_damaged(
    api: Api,
) -> None:
    """Such a run could be neither ended (its row does not read: 409) nor deleted (open: 409, "end it
    first"), so it stayed for good. Deleting is the way out; its refusals say ``damaged``, not ``conflict``
    (no retry mends them). Its start and windows read, so its samples go with it as any deleted run's: it
    ends where it is deleted, not never (an open end dropped every later sample no live run covered)."""
    run = await api.run_with_rows("edited while open", end=False)
    api.coordinator.store.ingest("n1", "b1", [sample(seq) for seq in range(1000, 1010)])  # 800 s later
    with sqlite3.connect(api.db) as conn:
        conn.execute("UPDATE runs SET interval_s = 'abc' WHERE id = ?", (run,))
    conn.close()
    said = f"run {run} is damaged in the database: interval_s 'abc' is not in [0.01, 60.0] seconds"
    for method, path in (("POST", f"/v1/runs/{run}/end"), ("GET", f"/v1/runs/{run}/export")):
        assert await api.call(method, path) == (409, {"error": "damaged", "reason": said})
    assert (await api.ok("DELETE", f"/v1/runs/{run}")) == {"deleted": run, "windows": DIRECT + 3}
    await purged(api.db, run)
    assert await api.ok("GET", "/v1/runs") == {"runs": [], "damaged": []}
    assert owned_rows(api.db, run) == {"windows": 0, "marks": 0, "imports": 0, "runs": 0}
    assert samples_in(api.db) == 10  # the run's 50 went; those of 800 s after its deletion stay


@pytest.mark.parametrize("read", ["export", "windows"])
def test_a_run_deleted_while_it_is_read_is_no_run_not_a_run_of_no_windows(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """A `DELETE` that lands between the run's row and its windows being read (3 in 4 tries of four requests
    at once) gave a 200 export of no windows ("no timed window was recorded") and an empty window list."""
    store = Store(tmp_path / "c.db", now_ns=lambda: T0 + 2 * RUN_S * S)
    store.create_run(RunRow("r1", "r", T0, T0 + RUN_S * S, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window(f"w{i}", "timed", T0 + S, T0 + 2 * S) for i in range(3)])
    reader = Store.read_only(tmp_path / "c.db")
    windows = reader.windows

    def deleted_first(run_id: str) -> list[Window]:
        store.delete_run(run_id)  # the coordinator's DELETE, on its own connection
        return windows(run_id)

    monkeypatch.setattr(reader, "windows", deleted_first)
    with pytest.raises(NotFound, match="no run r1"):
        if read == "export":
            export_run(reader, "r1", [], lambda: T0)
        else:
            run_windows(reader, "r1")
    reader.close()
    store.close()
