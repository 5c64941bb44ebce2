"""Rows of the sample tables edited or damaged outside sparkwatch (``clock_offsets``, ``boots``,
``sample_blocks``): each a one-line refusal that names its table, row and column, never a traceback, a link
retrying for ever, an allocation of hundreds of GiB, or an export of nonsense with exit 0."""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
import sqlite3

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from helpers.cli import sparkwatch
from helpers.frames import T0, sample_frame
from helpers.inproc_api import inproc_api
from helpers.links import n1_link
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.windows import Window
from sparkwatch.store import Damaged, Store
from sparkwatch.store.row_values import shown_value
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.sample_store import MAX_COUNT
from sparkwatch.wire import SampleFrame
from sparkwatch_agent.shared.backoff import ExponentialBackoff

S = 1_000_000_000
OFFSET = "clock offset of node n1, boot b1 at t_ns 1800000000000000000 is damaged in the database: "
BOOT = "boot b1 of node n1 is damaged in the database: "
BLOCK = "sample block 1 of node n1, boot b1 is damaged in the database: "


def frames(first: int, end: int) -> list[SampleFrame]:
    return [sample_frame(i, {"power_w": 40.0, "util_ratio": 0.9}) for i in range(first, end)]


def stored(path: pathlib.Path) -> pathlib.Path:
    """A database written through the store: node n1's boot b1 with its hello, two blocks of samples (a
    read of both sizes its columns by their counts), a probe round, and run r1 with a window."""
    store = Store(path, now_ns=lambda: T0 + 30 * S)
    store.set_nodes(["n1"])
    store.record_hello("n1", {"type": "hello", "boot_id": "b1", "node": "n1", "hardware": {"gpus": []}})
    store.ingest("n1", "b1", frames(1, 150))
    store.ingest("n1", "b1", frames(150, 300))
    store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=T0)
    store.create_run(RunRow("r1", "damaged", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("w1", "timed", T0 + 5 * S, T0 + 9 * S)])
    store.end_run("r1", T0 + 29 * S)
    store.close()
    return path


def damaged(path: pathlib.Path, damage: str) -> pathlib.Path:
    db = sqlite3.connect(path)
    db.executescript(damage)
    db.commit()
    db.close()
    return path


WITHIN = " within ±2^62 (146 years)"


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("UPDATE clock_offsets SET offset_ns = 'abc'", OFFSET + "offset_ns 'abc' is not an integer" + WITHIN),
        (
            "UPDATE clock_offsets SET uncertainty_ns = 'abc'",
            OFFSET + "uncertainty_ns 'abc' is not an integer of 0 or more",
        ),
        (
            "UPDATE clock_offsets SET uncertainty_ns = -5",
            OFFSET + "uncertainty_ns -5 is not an integer of 0 or more",
        ),
        (
            "UPDATE clock_offsets SET mono_offset_ns = 'abc'",
            OFFSET + "mono_offset_ns 'abc' is not an integer within ±2^62 (146 years)",
        ),
        (
            "UPDATE clock_offsets SET mono_offset_ns = 1.5",
            OFFSET + "mono_offset_ns 1.5 is not an integer" + WITHIN,
        ),
        # 9e18 was exported as the node's offset: a sample's time plus it leaves 64 bits
        (
            "UPDATE clock_offsets SET offset_ns = 9000000000000000000",
            OFFSET + "offset_ns 9000000000000000000 is not an integer within ±2^62 (146 years)",
        ),
        (
            "UPDATE clock_offsets SET mono_offset_ns = -9000000000000000000",
            OFFSET + "mono_offset_ns -9000000000000000000 is not an integer within ±2^62 (146 years)",
        ),
        ("UPDATE boots SET hello = 'not json'", BOOT + "hello 'not json' is not a JSON object"),
        ("UPDATE boots SET hello = '[1,2]'", BOOT + "hello '[1,2]' is not a JSON object"),
        (
            """UPDATE boots SET hello = '{"boot_id": "b1", "hardware": "x"}'""",
            BOOT + "hello hardware must be an object",
        ),
        (
            "UPDATE sample_blocks SET count = 100000000000 WHERE id = 1",
            BLOCK + f"count 100000000000 is not a number of samples from 1 to {MAX_COUNT}",
        ),
        (
            "UPDATE sample_blocks SET count = -5 WHERE id = 1",
            BLOCK + f"count -5 is not a number of samples from 1 to {MAX_COUNT}",
        ),
        # the bounds a read finds a run's blocks by: text sorts after every number, a REAL falls anywhere
        (
            "UPDATE sample_blocks SET mono_first_ns = 'abc' WHERE id = 1",
            BLOCK + "mono_first_ns 'abc' is not an integer",
        ),
        (
            "UPDATE sample_blocks SET mono_first_ns = 1e30 WHERE id = 1",
            BLOCK + "mono_first_ns 1e+30 is not an integer",
        ),
        (
            "UPDATE clock_offsets SET mono_offset_ns = NULL;"  # a boot placed by its wall clock
            " UPDATE sample_blocks SET wall_first_ns = 'abc' WHERE id = 1",
            BLOCK + "wall_first_ns 'abc' is not an integer",
        ),
        (
            "UPDATE sample_blocks SET seq_first = 'abc' WHERE id = 1",
            BLOCK + "seq_first 'abc' is not an integer",
        ),
        ("UPDATE sample_blocks SET seq_first = 1.5 WHERE id = 1", BLOCK + "seq_first 1.5 is not an integer"),
        # a first bound past its last (the store writes extremes): the block was passed over, or read
        (
            "UPDATE sample_blocks SET mono_first_ns = mono_last_ns + 1 WHERE id = 1",
            BLOCK + "mono_first_ns 14900000001 is past mono_last_ns 14900000000",
        ),
        (
            "UPDATE clock_offsets SET mono_offset_ns = NULL;"
            " UPDATE sample_blocks SET wall_last_ns = wall_first_ns - 1 WHERE id = 1",
            BLOCK + "wall_first_ns 1800000000100000000 is past wall_last_ns 1800000000099999999",
        ),
        (
            "UPDATE sample_blocks SET seq_first = 500 WHERE id = 1",
            BLOCK + "seq_first 500 is past seq_last 149",
        ),
        ("UPDATE boots SET first_seen_ns = 'abc'", BOOT + "first_seen_ns 'abc' is not an integer"),
        ("UPDATE boots SET first_seen_ns = 1.5", BOOT + "first_seen_ns 1.5 is not an integer"),
    ],
)
def test_an_export_of_a_damaged_sample_row_is_one_line_and_writes_nothing(
    tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """Before: a traceback each (an allocation of 745 GiB for the count), or an export with exit 0 of a
    clock placing no sample ("no samples from n1"), an uncertainty of -5 ns, a block left out (a first
    bound of 'abc' or 1e30: "no samples from n1") or read though its seq range is not one, or of the hello
    of a boot read as the latest for a first_seen_ns of 'abc'."""
    path = damaged(stored(tmp_path / "c.db"), damage)
    out = tmp_path / "out.json"
    done = sparkwatch("export", "--db", str(path), "r1", "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1] == f"sparkwatch: error: {said}", done.stderr
    assert not out.exists()


def test_an_intact_database_exports(tmp_path: pathlib.Path) -> None:
    """What the store wrote itself reads: none of the checks above refuses it."""
    out = tmp_path / "out.json"
    done = sparkwatch("export", "--db", str(stored(tmp_path / "c.db")), "r1", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["nodes"][0]["power_w"]["gated_mean"] == 40.0
    dashed = sparkwatch("export", "--db", str(tmp_path / "c.db"), "r1", "-o", "-", cwd=tmp_path)
    assert dashed.returncode == 0 and json.loads(dashed.stdout) == json.loads(out.read_text())  # - is stdout
    assert not (tmp_path / "-").exists()  # not a file named -


def test_a_damaged_seq_range_refuses_ingest_and_resume(tmp_path: pathlib.Path) -> None:
    """A link resumes from the boot's highest seq and stores every batch past it: with a ``seq_last`` of
    'abc', each raised a ValueError and the link retried for ever, storing nothing."""
    path = damaged(stored(tmp_path / "c.db"), "UPDATE sample_blocks SET seq_last = 'abc' WHERE id = 2")
    store = Store(path, now_ns=lambda: T0 + 60 * S)  # after stored()'s hello: a later boot is the latest
    said = "sample block 2 of node n1, boot b1 is damaged in the database: seq_last 'abc' is not an integer"
    with pytest.raises(Damaged) as resume:
        store.latest_boot("n1")
    assert store.latest_boot_id("n1") == "b1"  # what the hello's readers ask: no seq, no refusal
    with pytest.raises(Damaged) as ingest:
        store.ingest("n1", "b1", frames(300, 310))
    assert str(resume.value) == str(ingest.value) == said
    assert store.count_samples("n1") == 299  # nothing of the refused batch
    store.record_hello("n1", {"type": "hello", "boot_id": "b2", "node": "n1", "hardware": {"gpus": []}})
    assert store.latest_boot("n1") == ("b2", 0)  # the agent's next boot resumes from its start, not refused
    store.close()


def test_blocks_merged_from_small_ones_and_rounds_without_a_monotonic_offset_read(
    tmp_path: pathlib.Path,
) -> None:
    """The largest blocks the store writes (small ones merged once they add up) and the rounds of stores
    written before monotonic offsets were kept are not damage."""
    store = Store(tmp_path / "c.db")
    for seq in range(1, 1200, 3):  # a live link's few frames at a time
        store.ingest("n1", "b1", frames(seq, seq + 3))
    store.add_offset("n1", "b1", ClockOffset(0, 0, 5, 8), t_ns=T0)
    counts = [n for (n,) in sqlite3.connect(tmp_path / "c.db").execute("SELECT count FROM sample_blocks")]
    assert max(counts) > 1000 and max(counts) <= MAX_COUNT
    assert len(store.boot_samples("n1", "b1").read("t_mono_ns", 0, 10**12)) == 1200
    assert store.offset_rounds("n1", T0, T0)["b1"][0].mono_offset_ns is None
    store.close()


def test_a_damaged_hello_at_the_coordinators_start_is_a_warning_and_no_hello(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Where a missing hello is safe (a metered node's series labelled with its nodes.toml name until its
    agent says hello), a damaged one must not stop the coordinator: one warning line, read as none."""
    path = damaged(stored(tmp_path / "c.db"), "UPDATE boots SET hello = 'not json'")
    store = Store(path)
    with caplog.at_level(logging.WARNING, logger="sparkwatch.store.db"):
        assert store.latest_hello_or_absent("n1") is None
    assert [r.getMessage() for r in caplog.records] == [
        BOOT + "hello 'not json' is not a JSON object; read as no hello"
    ]
    assert store.latest_hello_or_absent("n2") is None  # no such node: no warning
    assert len(caplog.records) == 1
    damaged(path, "UPDATE boots SET first_seen_ns = 'abc'")
    with caplog.at_level(logging.WARNING, logger="sparkwatch.store.db"):
        assert (
            store.latest_hello_or_absent("n1") is None
        )  # it stopped the start of a metered node's coordinator
    assert caplog.records[-1].getMessage() == BOOT + "first_seen_ns 'abc' is not an integer; read as no hello"
    store.close()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            "UPDATE sample_blocks SET mono_first_ns = 'abc' WHERE id = 1",
            BLOCK + "mono_first_ns 'abc' is not an integer",
        ),
        (
            "UPDATE sample_blocks SET seq_first = 'abc' WHERE id = 1",
            BLOCK + "seq_first 'abc' is not an integer",
        ),
        ("UPDATE boots SET first_seen_ns = 'abc'", BOOT + "first_seen_ns 'abc' is not an integer"),
    ],
)
async def test_the_api_refuses_the_export_with_409_and_the_line(
    tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """The coordinator's export answers the refusal (it was a 200 of a run missing a block's samples)."""
    path = damaged(stored(tmp_path / "c.db"), damage)
    async with inproc_api(path, T0 + 60 * S, ["n1"]) as (client, _, _):
        response = await client.get("/v1/runs/r1/export")
        assert response.status == 409
        assert (await response.json()) == {"error": "damaged", "reason": said}


def test_a_seq_range_damaged_while_the_store_is_open_refuses_a_batch_sent_again(
    tmp_path: pathlib.Path,
) -> None:
    """A resumed link (or a replayed ring) sends samples the store has: which it has is found by the blocks'
    seq ranges, and one edited to text after this connection's first batch of the boot passed its block over
    (its 50 samples of the batch were stored a second time)."""
    path = stored(tmp_path / "c.db")
    store = Store(path)
    store.ingest("n1", "b1", frames(300, 310))  # the boot's highest seq, remembered from here on
    damaged(path, "UPDATE sample_blocks SET seq_first = 'abc' WHERE id = 1")
    with pytest.raises(Damaged) as refused:
        store.ingest("n1", "b1", frames(100, 320))
    assert str(refused.value) == BLOCK + "seq_first 'abc' is not an integer"
    assert store.count_samples("n1") == 309
    store.close()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            "UPDATE boots SET first_seen_ns = 'abc' WHERE boot_id = 'b1'",
            BOOT + "first_seen_ns 'abc' is not an integer",
        ),
        (
            "UPDATE boots SET first_seen_ns = 1.5 WHERE boot_id = 'b2'",
            "boot b2 of node n1 is damaged in the database: first_seen_ns 1.5 is not an integer",
        ),
    ],
)
def test_a_damaged_first_seen_refuses_the_latest_boot(tmp_path: pathlib.Path, damage: str, said: str) -> None:
    """Before: b1 read as the latest of b1 and b2 ('abc' sorts after every number, 1.5 before them)."""
    path = stored(tmp_path / "c.db")
    store = Store(path, now_ns=lambda: T0 + 60 * S)
    store.record_hello("n1", {"type": "hello", "boot_id": "b2", "node": "n1", "hardware": {"gpus": []}})
    assert store.latest_boot_id("n1") == "b2"
    damaged(path, damage)
    with pytest.raises(Damaged) as refused:
        store.latest_boot_id("n1")
    assert str(refused.value) == said
    store.close()


async def test_a_link_to_a_node_whose_latest_boot_is_unknown_resumes_its_agents_boot_with_one_warning(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A link resumes the agent's boot after its last stored seq where that boot is the node's latest. With
    b1's first_seen_ns 'abc' which boot is latest is unknown: the link still resumes b1 (the agent's) after
    its own last stored seq, and says why once, not at every session: collection goes on."""
    asked: list[str] = []

    async def time_probe(_r: web.Request) -> web.Response:
        return web.json_response({"t_wall_ns": T0, "t_mono_ns": 1, "boot_id": "b1"})

    async def stream(request: web.Request) -> web.Response:
        asked.append(request.query["after"])
        return web.Response(status=500)

    app = web.Application()
    app.router.add_get("/v1/time", time_probe)
    app.router.add_get("/v1/stream", stream)
    server = TestServer(app)
    await server.start_server()
    path = stored(tmp_path / "c.db")
    store = Store(path, now_ns=lambda: T0 + 60 * S)
    store.record_hello("n1", {"type": "hello", "boot_id": "b2", "node": "n1", "hardware": {"gpus": []}})
    last = store.last_seq("n1", "b1")
    damaged(path, "UPDATE boots SET first_seen_ns = 'abc' WHERE boot_id = 'b1'")
    async with aiohttp.ClientSession() as session:
        link = n1_link(
            store,
            session,
            str(server.make_url("")),
            ExponentialBackoff(initial_s=0.01, maximum_s=0.02),
            probes=1,
        )
        with caplog.at_level(logging.WARNING, logger="sparkwatch.links.ws_link"):
            task = asyncio.create_task(link.run())
            await asyncio.sleep(0.3)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    said = f"node n1: {BOOT}first_seen_ns 'abc' is not an integer; boot b1 resumes after its last stored seq"
    assert last > 0 and len(asked) >= 2 and set(asked) == {str(last)}
    warned = [r.getMessage() for r in caplog.records if r.name == "sparkwatch.links.ws_link"]
    assert warned == [said]
    await server.close()
    store.close()


def test_counts_past_sqlites_integers_stop_no_ingest_and_are_refused_by_name(tmp_path: pathlib.Path) -> None:
    """Two counts of -(2**63 - 1), summed as the boot's small blocks, raised SQLite's integer overflow: every
    batch of the boot failed as "the database cannot take a write" (a link retrying for ever), and counting
    the samples was a traceback. A damaged count says nothing of which samples are stored: ingest goes on,
    small blocks merge without it (a merge rewrote the row unseen), and what reads a count refuses it."""
    path = damaged(stored(tmp_path / "c.db"), f"UPDATE sample_blocks SET count = {-(2**63 - 1)}")
    said = BLOCK + f"count {-(2**63 - 1)} is not a number of samples from 1 to {MAX_COUNT}"
    store = Store(path)
    assert store.ingest("n1", "b1", frames(300, 305)) == 5
    assert store.ingest("n1", "b1", frames(305, 310)) == 5
    assert sum(store.retention_steps(10**18)) == 0  # the two small blocks merged, no block dropped
    with pytest.raises(Damaged) as counted:
        store.count_samples("n1")
    assert str(counted.value) == said
    store.close()
    rows = sqlite3.connect(path).execute("SELECT id, count FROM sample_blocks ORDER BY id").fetchall()
    assert rows[:2] == [(1, -(2**63 - 1)), (2, -(2**63 - 1))] and [n for _, n in rows[2:]] == [10]
    done = sparkwatch("export", "--db", str(path), "r1", "-o", str(tmp_path / "out.json"))
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"sparkwatch: error: {said}", done.stderr


def test_a_seq_range_past_itself_refuses_ingest_and_resume(tmp_path: pathlib.Path) -> None:
    """A block whose first seq is past its last is passed over when a batch's stored seqs are looked for:
    a replay of its samples would be stored twice. The boot is refused as a text bound is."""
    path = damaged(stored(tmp_path / "c.db"), "UPDATE sample_blocks SET seq_first = 400 WHERE id = 2")
    store = Store(path, now_ns=lambda: T0 + 60 * S)
    said = "sample block 2 of node n1, boot b1 is damaged in the database: seq_first 400 is past seq_last 299"
    with pytest.raises(Damaged) as resume:
        store.latest_boot("n1")
    with pytest.raises(Damaged) as ingest:
        store.ingest("n1", "b1", frames(150, 160))  # block 2's own seqs again
    assert str(resume.value) == str(ingest.value) == said
    assert store.count_samples("n1") == 299
    store.close()


def test_a_long_damaged_value_is_quoted_short() -> None:
    """A refusal quotes 40 characters of a damaged column's value, the last an ellipsis where cut."""
    assert shown_value(b"x" * 100) == "b'" + "x" * 37 + "…" and len(shown_value("y" * 41)) == 40
    assert shown_value("y" * 38) == "'" + "y" * 38 + "'"  # 40 with its quotes: whole
