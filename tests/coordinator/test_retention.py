"""Retention and deletion (store/retention.py, coordinator/housekeeping.py) on real SQLite files: idle samples
go after the retention age, a run's stay until it is deleted and then go with it, the freed pages go back to
the file system while the store keeps taking samples, and each run shows its size."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import re
import sqlite3
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from helpers.frames import T0, sample_frame
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.clock import ClockOffset
from sparkwatch.store import Damaged, Store, retention
from sparkwatch.store.meters import MeterReading
from sparkwatch.store.retention import MARGIN_NS
from sparkwatch.store.run_rows import RunRow
from sparkwatch.wire import SampleFrame

S = 1_000_000_000
HOUR = 3600 * S
DAY = 24 * HOUR
WEEK = 7 * DAY


def sample(seq: int) -> SampleFrame:
    """One sample a second from T0 on."""
    return sample_frame(
        seq, {"power_w": 50.0 + seq % 3, "energy_j": 1.0 * seq, "util_ratio": 0.9}, interval_s=1.0
    )


def stored_seqs(store: Store) -> list[int]:
    return store.boot_samples("n1", "b1").read("t_wall_ns", 0, 2**62).seq.tolist()


def rows(path: pathlib.Path, table: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def ingest_hours(store: Store, first_hour: int, hours: int, offset_ns: int = 0) -> None:
    """A node at 1 Hz with a clock-probe round every 10 s and a meter reading a minute; ``offset_ns``: how
    far the coordinator's clock is ahead of the agent's wall clock (its samples' stamps)."""
    for h in range(first_hour, first_hour + hours):
        seqs = range(h * 3600 + 1, (h + 1) * 3600 + 1)
        store.ingest("n1", "b1", [sample(s) for s in seqs])
        for s in seqs[::10]:
            offset = ClockOffset(offset_ns, 10**6, 5, 8, mono_offset_ns=T0 + offset_ns)
            store.add_offset("n1", "b1", offset, t_ns=T0 + s * S + offset_ns)
        for s in seqs[::60]:
            reading = MeterReading("wall", "meter:shelly", 1.0, T0 + s * S, 100.0, None, 10**6)
            store.add_meter_reading("n1", reading)


def retain(store: Store, age_ns: int) -> int:
    return sum(store.retention_steps(age_ns))


def four_hours_with_a_run_over_the_third(path: pathlib.Path, clock: list[int]) -> Store:
    store = Store(path, now_ns=lambda: clock[0])
    ingest_hours(store, 0, 4)
    store.create_run(RunRow("r1", "kept", T0 + 2 * HOUR, None, 1.0, 0.5, "request"))
    store.end_run("r1", T0 + 3 * HOUR)
    return store


async def first_pass(coordinator: Coordinator) -> None:
    """Until the coordinator's first retention pass (it runs one at its start) is over."""
    for _ in range(300):
        if coordinator.housekeeping.passes:
            return
        await asyncio.sleep(0.02)


def test_idle_samples_go_after_the_retention_age_and_a_runs_stay(tmp_path: pathlib.Path) -> None:
    clock = [T0]
    store = Store(tmp_path / "sw.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 6)
    # a run over hour 2, ended: its samples (and a margin around them) stay whatever their age
    store.create_run(RunRow("r1", "kept", T0 + 2 * HOUR, None, 1.0, 0.5, "request"))
    store.end_run("r1", T0 + 3 * HOUR)
    clock[0] = T0 + 6 * HOUR + WEEK  # a week after the last sample
    assert retain(store, WEEK + 3 * HOUR) > 0  # idle samples older than hour 3 (+ a week) go
    seqs = stored_seqs(store)
    kept_from = (2 * HOUR - MARGIN_NS) // S
    assert seqs[0] <= kept_from and set(range(2 * 3600, 3 * 3600 + 1)) <= set(seqs)  # the run's, whole
    assert 3 * 3600 + 1 < len(seqs) < 6 * 3600 - 3600  # hours 0-1 went (but a margin), hours 3+ stay
    assert all(s > 3 * 3600 for s in seqs if s > (3 * HOUR + MARGIN_NS) // S + 1000)
    with sqlite3.connect(f"file:{store.path}?mode=ro", uri=True) as db:
        first_offset = db.execute("SELECT MIN(t_ns) FROM clock_offsets").fetchone()[0]
        first_meter = db.execute("SELECT MIN(t_ns) FROM meter_samples").fetchone()[0]
    assert first_offset >= T0 + 2 * HOUR - MARGIN_NS and first_meter >= T0 + 2 * HOUR - MARGIN_NS
    store.close()


def test_a_run_on_an_agent_whose_clock_is_an_hour_behind_keeps_its_samples(tmp_path: pathlib.Path) -> None:
    """Runs are on the coordinator's clock, samples on the agent's: retention places each block by its boot's
    clock offset before it asks whether a run covers it."""
    clock = [T0]
    store = Store(tmp_path / "sw.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 4, offset_ns=HOUR)  # stamped an hour behind the coordinator
    store.create_run(RunRow("r1", "kept", T0 + 3 * HOUR, None, 1.0, 0.5, "request"))  # = agent hour 2
    store.end_run("r1", T0 + 4 * HOUR)
    clock[0] = T0 + 5 * HOUR + WEEK
    retain(store, WEEK)
    seqs = set(stored_seqs(store))
    assert set(range(2 * 3600 + 1, 3 * 3600 + 1)) <= seqs  # the run's hour, by the agent's clock
    assert not seqs & set(range(1, 3600))  # an hour no run covers went
    store.close()


def test_a_run_over_an_ntp_step_keeps_its_samples_on_both_sides(tmp_path: pathlib.Path) -> None:
    """An agent two hours behind for the run's first hour, then stepped right by NTP (same boot): the
    export places both halves by the monotonic fit; retention must not drop the first."""
    clock = [T0]
    store = Store(tmp_path / "sw.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 1, offset_ns=2 * HOUR)  # coordinator hour 2, stamped hour 0
    ingest_hours(store, 3, 1)  # coordinator hour 3, stamped hour 3
    store.create_run(RunRow("r1", "stepped", T0 + 2 * HOUR, None, 1.0, 0.5, "request"))
    store.end_run("r1", T0 + 4 * HOUR)
    clock[0] = T0 + 4 * HOUR + WEEK + DAY
    retain(store, WEEK)
    assert set(range(1, 3601)) | set(range(3 * 3600 + 1, 4 * 3600 + 1)) == set(stored_seqs(store))
    store.close()


def test_deleting_two_runs_close_together_leaves_neither_ones_samples(tmp_path: pathlib.Path) -> None:
    """A's samples near B stay while B covers them; deleting B then takes them too (it left them behind
    for ever: only idle retention, a week later or never, would have)."""
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0 + 3 * HOUR)
    ingest_hours(store, 0, 2)
    spans = {"a": (T0, T0 + 1800 * S), "b": (T0 + 2100 * S, T0 + 3000 * S)}  # 5 minutes apart
    for run, (start, end) in spans.items():
        store.create_run(RunRow(run, run, start, None, 1.0, 0.5, "request"))
        store.end_run(run, end)
    for run in ("a", "b"):
        store.delete_run(run)
        while not store.purge_step(run):
            pass
        sum(store.drop_run_samples(spans[run]))
        if run == "a":  # what B's widened span covers stays: the last minutes before it
            assert (2100 * S - MARGIN_NS) // S + 1 in stored_seqs(store)
    seqs = stored_seqs(store)
    assert not [s for s in seqs if s <= 3000]  # neither run's samples are left
    assert seqs[-1] == 2 * 3600 and len(seqs) > 1000  # later idle samples stay (whole blocks go, or stay)
    store.close()


def test_retention_works_with_more_runs_than_sqlite_has_expression_depth(tmp_path: pathlib.Path) -> None:
    """One condition per run outgrew SQLite's expression tree at 998 runs: every pass then failed."""
    clock = [T0]
    store = Store(tmp_path / "sw.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 1)
    for k in range(1100):  # runs far after the samples
        store.create_run(RunRow(f"r{k}", "many", T0 + (10 + k) * HOUR, None, 1.0, 0.5, "request"))
        store.end_run(f"r{k}", T0 + (10 + k) * HOUR + S)
    clock[0] = T0 + 2 * HOUR + WEEK
    retain(store, WEEK)
    assert store.count_samples() == 0 and rows(store.path, "clock_offsets") == 0
    assert rows(store.path, "meter_samples") == 0
    store.close()


def test_a_week_of_idle_ingest_with_retention_keeps_the_file_flat(tmp_path: pathlib.Path) -> None:
    """Simulated time, scaled down (a 'day' of 2 h at 1 Hz, a retention age of two of them, a pass each):
    once the age has passed the file stops growing (freed pages are reused, and handed back)."""
    clock = [T0]
    path = tmp_path / "sw.db"
    store = Store(path, now_ns=lambda: clock[0])
    day, age = 2 * HOUR, 4 * HOUR
    sizes = []
    for d in range(7):
        ingest_hours(store, d * 2, 2)
        clock[0] = T0 + (d + 1) * day
        retain(store, age)
        sizes.append(path.stat().st_size)
    assert age // S <= store.count_samples() <= age // S + 1000  # the age's worth, and a block
    assert max(sizes[3:]) <= 1.05 * sizes[2], sizes  # flat (within a page or two) once the age has passed
    store.close()


async def test_a_deleted_runs_samples_go_and_runs_show_their_size(tmp_path: pathlib.Path) -> None:
    clock = [T0]
    store = Store(tmp_path / "c.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 3)
    coordinator = Coordinator([], store, now_ns=lambda: clock[0])
    client = TestClient(TestServer(make_app(coordinator, None)))
    await client.start_server()
    try:
        runs = []
        for hour in (0, 2):
            clock[0] = T0 + hour * HOUR
            run = (await (await client.post("/v1/runs", json={"name": f"h{hour}"})).json())["id"]
            clock[0] = T0 + hour * HOUR + HOUR // 2
            assert (await client.post(f"/v1/runs/{run}/end")).status == 200
            runs.append(run)
        listed: dict[str, Any] = {r["id"]: r for r in (await (await client.get("/v1/runs")).json())["runs"]}
        sizes = {run: listed[run]["size_bytes"] for run in runs}
        assert all(size > 0 for size in sizes.values()) and len(stored_seqs(store)) == 3 * 3600
        assert (await client.delete(f"/v1/runs/{runs[0]}")).status == 202
        for _ in range(200):  # the purge and the drop run in the background
            if len(stored_seqs(store)) < 3 * 3600:
                break
            await asyncio.sleep(0.02)
        seqs = stored_seqs(store)
        assert not set(range(1, 1800)) & set(seqs)  # the deleted run's half hour went
        assert set(range(2 * 3600 + 1, 2 * 3600 + 1800)) <= set(seqs)  # the other run's stayed
        assert 1800 < len(seqs) < 3 * 3600
        with sqlite3.connect(f"file:{store.path}?mode=ro", uri=True) as db:
            assert db.execute("PRAGMA freelist_count").fetchone()[0] == 0  # pages handed back
        after = (await (await client.get("/v1/runs")).json())["runs"]
        assert [(r["id"], r["size_bytes"]) for r in after] == [(runs[1], sizes[runs[1]])]
    finally:
        await client.close()
        await coordinator.stop()
        store.close()


async def test_the_coordinator_runs_a_retention_pass_at_start(tmp_path: pathlib.Path) -> None:
    clock = [T0]
    store = Store(tmp_path / "c.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 2)
    clock[0] = T0 + 2 * HOUR + WEEK + S  # the last sample is a week and a second old
    coordinator = Coordinator([], store, now_ns=lambda: clock[0], retain_idle_s=WEEK / S)
    await coordinator.start()
    try:
        await first_pass(coordinator)
        assert coordinator.housekeeping.passes == 1 and store.count_samples() == 0
        assert rows(store.path, "clock_offsets") == 0 and rows(store.path, "meter_samples") == 0
    finally:
        await coordinator.stop()
        store.close()


@pytest.mark.parametrize(
    ("column", "stored", "said"),
    [
        ("t_start_ns", "abc", "t_start_ns 'abc' is not an integer"),
        ("t_end_ns", T0 + 2 * HOUR - S, f"t_end_ns {T0 + 2 * HOUR - S} is before t_start_ns {T0 + 2 * HOUR}"),
    ],
)
async def test_a_live_runs_row_damaged_outside_sparkwatch_makes_retention_drop_nothing(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, column: str, stored: object, said: str
) -> None:
    """A run's span read from a row edited by hand: 'abc' was a ValueError traceback in the log at every
    pass, and an end an hour before the start a span of a second, so the run's hour of samples went."""
    clock = [T0]
    store = four_hours_with_a_run_over_the_third(tmp_path / "c.db", clock)
    with sqlite3.connect(store.path) as db:
        db.execute(f"UPDATE runs SET {column} = ?", (stored,))
    clock[0] = T0 + 4 * HOUR + WEEK
    with pytest.raises(Damaged, match=f"^run r1 is damaged in the database: {said}$"):
        retain(store, WEEK)
    assert len(stored_seqs(store)) == 4 * 3600  # nothing went
    coordinator = Coordinator([], store, now_ns=lambda: clock[0], retain_idle_s=WEEK / S)
    await coordinator.start()
    try:
        await first_pass(coordinator)
        warned = [r for r in caplog.records if r.name.endswith("housekeeping")]
        assert [(r.getMessage(), r.exc_info) for r in warned] == [
            (
                f"retention waits, dropping nothing: run r1 is damaged in the database: {said}"
                " (mend the row, or delete the run)",
                None,
            )
        ]
    finally:
        await coordinator.stop()
    assert len(stored_seqs(store)) == 4 * 3600
    with sqlite3.connect(store.path) as db:  # mended: the next pass drops what no run covers
        db.execute("UPDATE runs SET t_start_ns = ?, t_end_ns = ?", (T0 + 2 * HOUR, T0 + 3 * HOUR))
    assert retain(store, WEEK) > 0 and set(range(2 * 3600, 3 * 3600 + 1)) <= set(stored_seqs(store))
    store.close()


@pytest.mark.parametrize("column", ["wall_first_ns", "wall_last_ns"])
def test_a_block_whose_stamps_were_edited_to_text_is_kept(tmp_path: pathlib.Path, column: str) -> None:
    """SQLite's arithmetic takes 'abc' as 0: a run's block whose last stamp read 'abc' seemed to end in
    1970, outside every run, and went with the idle samples."""
    clock = [T0]
    store = four_hours_with_a_run_over_the_third(tmp_path / "c.db", clock)
    with sqlite3.connect(store.path) as db:
        db.execute(f"UPDATE sample_blocks SET {column} = 'abc' WHERE seq_first <= 9000 AND seq_last >= 9000")
    clock[0] = T0 + 4 * HOUR + WEEK
    with sqlite3.connect(store.path) as db:
        (before,) = db.execute("SELECT COUNT(*) FROM sample_blocks").fetchone()
    assert retain(store, WEEK) > 0
    with sqlite3.connect(store.path) as db:
        kept = db.execute("SELECT seq_first, seq_last FROM sample_blocks ORDER BY seq_first").fetchall()
    assert len(kept) < before and any(first <= 9000 <= last for first, last in kept)
    assert kept[0][0] > 3600  # hour 0 went as idle
    store.close()


def test_handing_pages_back_counts_no_sample_block(tmp_path: pathlib.Path) -> None:
    """The passes log how many sample blocks they dropped: the vacuum's steps said how many pages were
    still free, and a pass that dropped 28 blocks said 17 578."""
    db = sqlite3.connect(tmp_path / "v.db")
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    db.execute("CREATE TABLE t (x BLOB)")
    db.executemany("INSERT INTO t VALUES (?)", [(b"x" * 4000,) for _ in range(2000)])
    db.commit()
    db.execute("DELETE FROM t")
    db.commit()
    assert db.execute("PRAGMA freelist_count").fetchone()[0] > 1000
    steps = list(retention.vacuum_steps(db))
    assert len(steps) > 1 and set(steps) == {0}
    assert db.execute("PRAGMA freelist_count").fetchone()[0] == 0
    db.close()


def test_a_run_opened_while_a_deleted_runs_samples_go_keeps_its_lead(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`runs delete X && runs open Y`: the drop's steps knew the runs of their start only, and took the 11
    minutes before Y (its memory baseline, its clock rounds) with X's widened span. Each step now looks at
    the runs again (one block per step here, so Y opens between steps)."""
    monkeypatch.setattr(retention, "DROP_BLOCKS", 1)
    clock = [T0]
    store = Store(tmp_path / "sw.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 1)
    store.create_run(RunRow("x", "x", T0, None, 1.0, 0.5, "request"))
    store.end_run("x", T0 + 3000 * S)
    clock[0] = T0 + 3600 * S  # ten minutes after X: deleted, and Y opened at once
    store.delete_run("x")
    steps = store.drop_run_samples(store.deleted_run_span("x") or (0, 0))
    assert next(steps) == 1  # the oldest block has gone when Y opens
    store.create_run(RunRow("y", "y", clock[0], None, 1.0, 0.5, "request"))
    sum(steps)
    seqs = stored_seqs(store)
    lead = (3600 * S - MARGIN_NS) // S
    assert set(range(lead + 1, 3601)) <= set(seqs)  # Y's lead, whole
    assert (
        min(seqs) > lead - 1000
    )  # X's samples went, but for a block reaching into Y's lead (blocks go whole)
    assert rows(store.path, "clock_offsets") >= MARGIN_NS // (10 * S)  # Y's clock rounds before it
    store.close()


async def test_a_stop_after_a_deleted_runs_rows_went_still_drops_its_samples_at_the_next_start(
    tmp_path: pathlib.Path,
) -> None:
    """The run row went with the last of its rows, before its samples: a stop then (a delete of a run with
    few windows is almost all sample drop) left them for ever, and the next start knew of no deletion."""
    clock = [T0 + 3 * HOUR]
    store = Store(tmp_path / "c.db", now_ns=lambda: clock[0])
    ingest_hours(store, 0, 2)
    store.create_run(RunRow("x", "x", T0, None, 1.0, 0.5, "request"))
    store.end_run("x", T0 + 1800 * S)
    store.delete_run("x")
    while not store.purge_step("x"):  # its rows went; the coordinator stopped before its samples did
        pass
    assert len(stored_seqs(store)) == 2 * 3600 and store.deleted_runs() == ["x"]
    coordinator = Coordinator([], store, now_ns=lambda: clock[0])
    await coordinator.start()
    try:
        for _ in range(250):
            if not store.deleted_runs():
                break
            await asyncio.sleep(0.02)
        assert store.deleted_runs() == [] and rows(store.path, "runs") == 0
        assert min(stored_seqs(store)) > (1800 * S + MARGIN_NS) // S - 1000  # blocks go whole
    finally:
        await coordinator.stop()
        store.close()


@pytest.mark.parametrize("dropped_by", ["delete", "retention"])
def test_a_link_resumes_after_the_highest_seq_ever_stored_not_the_highest_left(
    tmp_path: pathlib.Path, dropped_by: str
) -> None:
    """A run ended and deleted, the coordinator killed before its next block: it restarted resuming after
    the highest seq still stored (or 0), and the agent replayed the deleted run's samples (and those
    retention had dropped) from its ring, stored again for a week. The boot keeps its high-water seq."""
    path = tmp_path / "sw.db"
    store = Store(path, now_ns=lambda: T0 + 3 * HOUR)
    store.record_hello("n1", {"type": "hello", "boot_id": "b1", "node": "n1", "hardware": {"gpus": []}})
    ingest_hours(store, 0, 2)
    top = 2 * 3600
    if dropped_by == "delete":  # the run over the last hour: its samples are the newest
        store.create_run(RunRow("r", "r", T0 + 3600 * S, None, 1.0, 0.5, "request"))
        store.end_run("r", T0 + top * S)
        store.delete_run("r")
        while not store.purge_step("r"):
            pass
        sum(store.drop_run_samples((T0 + 3600 * S, T0 + top * S)))
    else:
        retain(store, 0)  # every idle sample is older than 0 s
    assert not stored_seqs(store) or stored_seqs(store)[-1] < top  # the newest block is gone
    store.close()  # as a crash leaves it: nothing but the file
    again = Store(path)
    assert again.last_seq("n1", "b1") == top
    again.close()


def test_a_damaged_seq_is_said_as_damage_beside_a_kept_top(tmp_path: pathlib.Path) -> None:
    """A block's seq_last edited to text outside sparkwatch, beside a kept high-water seq: a TypeError
    (text against an integer) in the first take of it, where the store says damage in one line."""
    path = tmp_path / "sw.db"
    store = Store(path, now_ns=lambda: T0 + 3 * HOUR)
    store.record_hello("n1", {"type": "hello", "boot_id": "b1", "node": "n1", "hardware": {"gpus": []}})
    ingest_hours(store, 0, 1)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE boots SET seq_dropped = 40")
        db.execute("UPDATE sample_blocks SET seq_last = 'abc' WHERE id = (SELECT MIN(id) FROM sample_blocks)")
    db.close()
    again = Store(path)
    with pytest.raises(Damaged):
        again.last_seq("n1", "b1")
    again.close()


def test_a_block_whose_id_was_taken_again_between_steps_is_not_dropped(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass chooses its blocks, then drops them a step at a time; a link merging its small blocks in
    between may get a freed id for the merged block (no AUTOINCREMENT), which a later step then dropped by
    that id, fresh samples and all. A block is dropped only while it is still the one chosen."""
    monkeypatch.setattr(retention, "DROP_BLOCKS", 1)  # a step per block: room to change one in between
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0 + 3 * HOUR)
    ingest_hours(store, 0, 2)
    db = store._db
    ids = [i for (i,) in db.execute("SELECT id FROM sample_blocks ORDER BY id")]
    assert len(ids) >= 3
    steps = retention.drop_idle(db, before_ns=T0 + 10 * HOUR)
    assert next(steps) == 1  # the first chosen block dropped
    with db:  # the last chosen id now holds another block (other bounds), as a merge would leave it
        db.execute("UPDATE sample_blocks SET wall_first_ns = wall_first_ns + 1 WHERE id = ?", (ids[-1],))
    dropped = 1 + sum(steps)
    assert [i for (i,) in db.execute("SELECT id FROM sample_blocks")] == [ids[-1]]
    assert dropped == len(ids) - 1
    store.close()


def test_a_small_block_that_does_not_decode_stays_alone_and_retention_goes_on(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A live link's small blocks are merged at each retention pass: one damaged blob failed the merge and
    cut every pass short at the same place, so idle samples were never dropped (the file grew for good),
    and an export of its span said a "conflict" naming no block."""
    clock = [T0]
    store = Store(tmp_path / "c.db", now_ns=lambda: clock[0])
    for seq in range(1, 41):  # a frame at a time, as a live link stores them: small blocks
        store.ingest("n1", "b1", [sample(seq)])
    with sqlite3.connect(store.path) as db:
        (damaged,) = db.execute("SELECT id FROM sample_blocks WHERE seq_first = 20").fetchone()
        db.execute("UPDATE sample_blocks SET data = ? WHERE id = ?", (b"SWJ1not zlib", damaged))
    said = f"damaged sample block {damaged} of node n1 (boot b1)"
    with pytest.raises(Damaged, match=re.escape(said)):
        stored_seqs(store)  # the span's read names the block
    with caplog.at_level(logging.WARNING, logger="sparkwatch.store.sample_store"):
        for _ in range(2):  # nothing old enough to drop yet: the merges alone
            retain(store, WEEK)
    with sqlite3.connect(store.path) as db:
        left = db.execute("SELECT id, count FROM sample_blocks ORDER BY seq_first").fetchall()
    assert [count for block_id, count in left if block_id != damaged] == [39]  # the others, merged
    assert (damaged, 1) in left  # left as it is
    warned = [r.getMessage() for r in caplog.records if said in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith("; left as it is, not merged"), (
        warned
    )  # once, not per pass
    clock[0] = T0 + 2 * WEEK
    assert retain(store, WEEK) > 0  # and the idle samples go, the damaged block with them (by its bounds)
    assert rows(store.path, "sample_blocks") == 0
    store.close()
