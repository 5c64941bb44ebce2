"""Rows of the sample tables edited or damaged outside sparkwatch (``clock_offsets``, ``boots.hello``,
``sample_blocks``): each a one-line refusal that names its table, row and column, never a traceback, a link
retrying for ever, an allocation of hundreds of GiB, or an export of nonsense with exit 0."""

from __future__ import annotations

import json
import logging
import pathlib
import sqlite3

import pytest

from helpers.cli import sparkwatch
from helpers.frames import T0, sample_frame
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.windows import Window
from sparkwatch.store import Damaged, Store
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.sample_store import MAX_COUNT
from sparkwatch.wire import SampleFrame

S = 1_000_000_000
OFFSET = "clock offset of node n1, boot b1 at t_ns 1800000000000000000 is damaged in the database: "
HELLO = "boot b1 of node n1 is damaged in the database: "
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
    db.execute(damage)
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("UPDATE clock_offsets SET offset_ns = 'abc'", OFFSET + "offset_ns 'abc' is not an integer"),
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
            OFFSET + "mono_offset_ns 'abc' is not an integer",
        ),
        ("UPDATE clock_offsets SET mono_offset_ns = 1.5", OFFSET + "mono_offset_ns 1.5 is not an integer"),
        ("UPDATE boots SET hello = 'not json'", HELLO + "hello 'not json' is not a JSON object"),
        ("UPDATE boots SET hello = '[1,2]'", HELLO + "hello '[1,2]' is not a JSON object"),
        (
            """UPDATE boots SET hello = '{"boot_id": "b1", "hardware": "x"}'""",
            HELLO + "hello hardware must be an object",
        ),
        (
            "UPDATE sample_blocks SET count = 100000000000 WHERE id = 1",
            BLOCK + f"count 100000000000 is not a number of samples from 1 to {MAX_COUNT}",
        ),
        (
            "UPDATE sample_blocks SET count = -5 WHERE id = 1",
            BLOCK + f"count -5 is not a number of samples from 1 to {MAX_COUNT}",
        ),
    ],
)
def test_an_export_of_a_damaged_sample_row_is_one_line_and_writes_nothing(
    tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """Before: a traceback each (an allocation of 745 GiB for the count), or an export with exit 0 of a
    clock placing no sample ("no samples from n1") or an uncertainty of -5 ns."""
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
        assert store.hello_or_absent("n1", "b1") is None
    assert [r.getMessage() for r in caplog.records] == [
        HELLO + "hello 'not json' is not a JSON object; read as no hello"
    ]
    assert store.hello_or_absent("n1", "b2") is None  # no such boot: no warning
    assert len(caplog.records) == 1
    store.close()
