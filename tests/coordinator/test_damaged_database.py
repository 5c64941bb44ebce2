"""A coordinator whose SQLite file is damaged (real SQLITE_CORRUPT: tests/helpers/broken_store.damage) or full
says so in one line wherever it meets it — its start, the API, a link, retention, a run's purge — and every
background task goes on: never a traceback, never a task that ends for good, nothing written."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import pathlib
import resource
import signal
import sqlite3
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from helpers.broken_store import damage, fill
from helpers.cli import sparkwatch
from helpers.engine_replay import VLLM, capture
from helpers.export_api import T0, Api, S, ended_run, node_api, with_node
from helpers.links import n1_link
from helpers.loopback import served
from sparkwatch.coordinator.housekeeping import Housekeeping
from sparkwatch.engines.poller import EnginePoller
from sparkwatch.engines.spec import EngineSpec
from sparkwatch.meters.poller import MeterPoller, Reading
from sparkwatch.meters.spec import MeterSpec
from sparkwatch.store import Corrupt, Store, StoreError, Unavailable, corrupt_or_none, unavailable_now
from sparkwatch.store.engine_samples import EngineRow
from sparkwatch.store.meters import MeterReading
from sparkwatch.store.run_rows import RunRow
from sparkwatch_agent.shared.backoff import ExponentialBackoff

MALFORMED = "database disk image is malformed"


def _held(tmp_path: pathlib.Path) -> pathlib.Path:
    """A database holding 12 s of node n1's samples, closed."""
    store, _ = with_node(tmp_path / "c.db", [T0])
    store.close()
    return tmp_path / "c.db"


def _pages(path: pathlib.Path) -> bytes:
    """The file but for SQLite's own change counters in its header (bytes 24-27 and 92-95), which a
    connection's close may step without writing anything of the database's."""
    data = bytearray(path.read_bytes())
    data[24:28] = data[92:96] = b"\0\0\0\0"
    return bytes(data)


def test_damage_is_told_from_a_locked_file_and_from_a_bug(tmp_path: pathlib.Path) -> None:
    path = _held(tmp_path)
    damage(path)
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError) as malformed:
        db.execute("SELECT count(*) FROM sample_blocks").fetchall()
    corrupt = corrupt_or_none(malformed.value, path)
    assert isinstance(corrupt, Corrupt) and str(corrupt).startswith(f"the database {path} is damaged")
    assert MALFORMED in str(corrupt) and f"sqlite3 {path} .recover" in str(corrupt)
    db.close()
    text = tmp_path / "notes.db"
    text.write_text("not a database, but long enough to have a header of sorts " * 4)
    with pytest.raises(sqlite3.DatabaseError) as not_a_db:
        sqlite3.connect(text).execute("SELECT * FROM sqlite_master").fetchall()
    assert "file is not a database" in str(corrupt_or_none(not_a_db.value))
    good = tmp_path / "good.db"
    holder, waiter = sqlite3.connect(good, isolation_level=None), sqlite3.connect(good, timeout=0)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError) as locked:
        waiter.execute("SELECT * FROM t").fetchall()
    holder.close()
    waiter.close()
    with pytest.raises(sqlite3.ProgrammingError) as closed:
        waiter.execute("SELECT 1")
    assert [corrupt_or_none(e) for e in (locked.value, closed.value, ValueError(MALFORMED))] == [None] * 3
    with pytest.raises(sqlite3.OperationalError) as no_column:  # SQLITE_ERROR: a bug's, not a busy file's
        sqlite3.connect(good).execute("SELECT nope FROM t")
    # what the API answers 503 for (a retry may find it served), and not: damage, a bug
    assert [unavailable_now(e) for e in (locked.value, no_column.value, malformed.value)] == [
        True,
        False,
        False,
    ]


def test_a_write_to_a_damaged_file_is_said_as_damage_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    path = _held(tmp_path)
    damage(path)
    before = _pages(path)
    store = Store(path)
    with pytest.raises(Corrupt, match=MALFORMED):
        store.set_nodes(["n1", "n2"])
    store.close()
    assert _pages(path) == before


def test_a_coordinator_on_a_damaged_file_does_not_start_and_says_why_in_one_line(
    tmp_path: pathlib.Path,
) -> None:
    path = _held(tmp_path)
    damage(path)
    before = _pages(path)
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.n1]\nurl = "ws://127.0.0.1:1"\n')
    done = sparkwatch("coordinator", "--nodes", str(nodes), "--db", str(path), "--listen", "127.0.0.1:0")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"sparkwatch: error: the database {path} is damaged (SQLite: {MALFORMED})")
    assert _pages(path) == before and not path.with_name("c.db.lock").exists()
    exported = sparkwatch("export", "--db", str(path), "run-x", "-o", str(tmp_path / "out.json"))
    assert exported.returncode == 2 and "Traceback" not in exported.stderr, exported.stderr
    last = exported.stderr.strip().splitlines()[-1]
    assert MALFORMED in last and not (tmp_path / "out.json").exists()
    assert f"sqlite3 {path} .recover" in last, last  # how to recover it, wherever it is met


async def test_the_api_answers_a_500_with_its_reason_when_the_file_is_damaged_under_it(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with node_api(tmp_path / "c.db") as api:
        client, store, clock = api.client, api.store, api.clock
        run_id = await ended_run(Api(client, store, clock))
        assert (await client.get("/healthz")).status == 200
        damage(tmp_path / "c.db")  # the export and the windows read on connections of their own
        with caplog.at_level(logging.INFO, logger="sparkwatch"):
            for path in (f"/v1/runs/{run_id}/export", f"/v1/runs/{run_id}/windows"):
                response = await client.get(path)
                body = await response.json()
                assert response.status == 500 and body["error"] == "database_damaged", body
                assert body["reason"].startswith(f"the database {tmp_path / 'c.db'} is damaged")
            health = await client.get("/healthz")  # it was 200 "ok" while every export failed
            said = await health.json()
        assert health.status == 503 and said["status"] == "degraded" and said["disconnected"] == []
        assert said["database"] == "damaged"  # open to all: the path and SQLite's words are in the log
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 2 and all(MALFORMED in r.getMessage() and not r.exc_info for r in said)


async def test_retention_and_a_runs_purge_on_a_damaged_file_say_so_in_one_line_and_go_on(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _held(tmp_path)
    store = Store(path)
    store.delete_run(_ended(store))
    damage(path)

    async def in_thread(work: Any) -> Any:
        return await asyncio.to_thread(work, store)

    keeping = Housekeeping(in_thread, retain_idle_s=60.0, every_s=0.01, store_path=path)
    with caplog.at_level(logging.INFO, logger="sparkwatch"):
        task = asyncio.create_task(keeping.run())
        while keeping.passes < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await keeping.purge_run("gone")  # said, not raised: it runs as a task of its own
    store.close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any(r.exc_info for r in caplog.records)
    assert said[0].startswith(f"retention waits, dropping nothing: the database {path} is damaged")
    assert MALFORMED in said[0]
    assert said[-1].startswith(f"run gone: its rows are not all removed yet (the database {path} is damaged")


def _ended(store: Store) -> str:
    store.create_run(RunRow("gone", "to delete", T0, None, 0.1, 0.5, "request"))
    store.end_run("gone", T0 + 10 * S)
    return "gone"


async def test_a_link_to_a_damaged_file_goes_down_with_one_line(
    agent_factory: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n1", "--interval", "0.05")
    path = _held(tmp_path)
    damage(path)
    store = Store(path)
    async with aiohttp.ClientSession() as session:
        link = n1_link(
            store,
            session,
            agent.url,
            ExponentialBackoff(initial_s=0.05, factor=2.0, maximum_s=0.2, jitter=0.0),
            probes=2,
        )
        with caplog.at_level(logging.DEBUG, logger="sparkwatch.links"):
            task = asyncio.create_task(link.run())
            while link.state.reconnects < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    store.close()
    downs = [r.getMessage() for r in caplog.records if "link down" in r.getMessage()]
    assert downs and f"the database {path} is damaged (SQLite: {MALFORMED})" in downs[0], downs
    assert not any(r.exc_info for r in caplog.records)
    assert store.damage is not None and store.damage in downs[0]  # the coordinator's /healthz says it


class _Steady:
    """A meter that reads 120 W every time."""

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        return Reading(power_w=120.0, energy_j=None)

    def waiting_for(self) -> str | None:
        return None

    async def close(self, session: aiohttp.ClientSession) -> None:
        pass


async def test_a_meter_whose_readings_the_store_cannot_take_goes_on_polling(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tmp_path / "full.db")
    store.set_nodes(["n1"])
    fill(store)
    earlier = itertools.count(T0 - 10**6 * S, S)
    with contextlib.suppress(Unavailable):  # till the meter table's last page is full too
        while True:
            store.add_meter_reading(
                "n1", MeterReading("wall", "meter:shelly", 1.0, next(earlier), 1.0, None, 0)
            )
    spec = MeterSpec(kind="shelly", url="http://unused", interval_s=1.0)
    ticks = iter(range(T0, T0 + 100 * S, S // 10))
    poller = MeterPoller("n1", spec, _Steady(), store, now_ns=lambda: next(ticks))
    async with aiohttp.ClientSession() as session:
        with caplog.at_level(logging.INFO, logger="sparkwatch"):
            await poller.poll_once(session)  # the reading is lost: a gap, said
            full = poller.state.error
            store._db.execute("PRAGMA max_page_count = 1073741823")  # room again
            await poller.poll_once(session)
    assert full is not None and full.startswith("read, not stored: the database cannot take a write")
    assert "full" in full and poller.state.failures == 1 and poller.state.error is None
    assert store.meter_rows("n1", T0, T0 + 100 * S).power_w.tolist() == [120.0]
    assert not any(r.exc_info for r in caplog.records)
    store.close()


async def test_a_meters_reading_a_damaged_file_cannot_take_names_the_file(tmp_path: pathlib.Path) -> None:
    """A poller's write knows no path: its line said `sqlite3 FILE .recover`, for the user to find which."""
    path = _held(tmp_path)
    damage(path)
    store = Store(path)
    spec = MeterSpec(kind="shelly", url="http://unused", interval_s=1.0)
    poller = MeterPoller("n1", spec, _Steady(), store, now_ns=itertools.count(T0, S).__next__)
    async with aiohttp.ClientSession() as session:
        await poller.poll_once(session)
    store.close()
    error = poller.state.error
    assert error is not None and error.startswith(f"read, not stored: the database {path} is damaged"), error
    assert f"`sqlite3 {path} .recover`" in error and poller.state.failures == 1


async def test_an_engine_scrape_the_store_cannot_take_does_not_end_the_scraping(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text=capture(VLLM))

    app = web.Application()
    app.router.add_get("/metrics", page)
    store = Store(tmp_path / "full.db")
    fill(store)
    earlier = itertools.count(T0 - 10**6 * S, S)
    with contextlib.suppress(Unavailable):  # till the engine table's last page is full too
        while True:
            store.add_engine_sample(
                EngineRow(next(earlier), "vllm", 1.0, {"running_requests": 1.0}, {}, ()), 0
            )
    clock = [T0]
    async for url in served(app, "/metrics"):
        poller = EnginePoller(EngineSpec(url), store, now_ns=lambda: clock[0])
        async with aiohttp.ClientSession() as session:
            with caplog.at_level(logging.INFO, logger="sparkwatch"):
                await poller.scrape_once(session)
                full = poller.state.error
                store._db.execute("PRAGMA max_page_count = 1073741823")
                clock[0] += S
                await poller.scrape_once(session)
    assert full is not None and full.startswith("scraped, not stored: the database cannot take a write")
    assert poller.state.error is None and [r.t_ns for r in store.engine_rows(T0, T0 + 9 * S)] == [T0 + S]
    assert not any(r.exc_info for r in caplog.records)
    store.close()


async def test_exports_read_the_file_without_writing_and_one_that_cannot_open_is_a_503(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each export opened its own connection to write (pragmas, migrations): a file that took no writes
    (made immutable while the coordinator ran) failed every export, of ended runs too, with 409 "conflict".
    It reads on a read-only connection now; one it cannot open is 503 unavailable, as a read that cannot
    be served is."""
    refusals: list[str] = []  # what each export's connection said to a write
    read_only = Store.read_only

    def spied(path: pathlib.Path, *, live: bool = False) -> Store:
        assert live  # its writer has it open: never read as immutable
        store = read_only(path, live=live)
        try:
            store._db.execute("CREATE TABLE x (y)")
        except sqlite3.OperationalError as exc:
            refusals.append(str(exc))
        return store

    async with node_api(tmp_path / "c.db") as api:
        run_id = await ended_run(api)
        monkeypatch.setattr(Store, "read_only", staticmethod(spied))
        for path in (f"/v1/runs/{run_id}/export", f"/v1/runs/{run_id}/windows"):
            status, body = await api.get(path)
            assert status == 200 and body["run"]["id"] == run_id, (path, body)
        assert refusals == ["attempt to write a readonly database"] * 2

        def refused(path: pathlib.Path, *, live: bool = False) -> Store:
            raise StoreError(f"cannot read database {path}: attempt to write a readonly database")

        monkeypatch.setattr(Store, "read_only", staticmethod(refused))
        status, body = await api.get(f"/v1/runs/{run_id}/export")
    assert status == 503 and body["error"] == "unavailable", body
    assert body["reason"].startswith("the database cannot be read now: cannot read database ")


def test_a_coordinator_that_cannot_write_its_file_now_exits_75_for_a_restart(tmp_path: pathlib.Path) -> None:
    """A full file system at start was exit 2, which the unit's RestartPreventExitStatus keeps down for good
    (a host that booted with its disk full left the coordinator failed after room was made); what may pass
    is 75 now, as a listen address still held is. The file size limit stands in for the full disk: the
    same refused write, said by SQLite as an I/O error."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.n1]\nurl = "ws://127.0.0.1:1"\n')
    path = tmp_path / "c.db"

    def small_files() -> None:  # in the child: writes past 4 KiB fail (EFBIG) instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    done = subprocess.run(
        [sys.executable, "-m", "sparkwatch", "coordinator", "--nodes", str(nodes), "--db", str(path),
         "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, preexec_fn=small_files,
    )  # fmt: skip
    assert done.returncode == 75 and "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"sparkwatch: error: cannot use database {path} now: "), last
    assert "KiB free where it is: make room, and it starts again" in last, last
