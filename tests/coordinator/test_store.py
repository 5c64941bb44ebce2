"""The SQLite store on real files: migrations, idempotent ingest, restarts, runs, all-or-nothing windows."""

from __future__ import annotations

import os
import pathlib
import re
import sqlite3
import stat

import numpy as np
import pytest

from helpers.frames import sample_frame
from sparkwatch.core.clock import ClockOffset, OffsetRound
from sparkwatch.core.windows import Window
from sparkwatch.store import NotFound, Store, StoreError
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.schema import MIGRATIONS
from sparkwatch.store.windows import CHUNK_ROWS, STALE_IMPORT_NS
from sparkwatch.wire import GapFrame, SampleFrame

S = 1_000_000_000
T0 = 1_800_000_000 * S


def sample(seq: int, boot: str = "b1", power: float | None = 5.0) -> SampleFrame:
    gpu = {"power_w": power, "energy_j": 10.0 + seq, "util_ratio": 0.5}
    return sample_frame(seq, gpu, used_bytes=1000 + seq, boot=boot)


def test_schema_version_and_wal(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    assert store.schema_version == len(MIGRATIONS) == 13
    store.close()
    mode = sqlite3.connect(tmp_path / "sw.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_version_1_database_is_migrated_keeping_its_windows(tmp_path: pathlib.Path) -> None:
    db = sqlite3.connect(tmp_path / "sw.db")
    db.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    db.execute("INSERT INTO runs VALUES ('r1', 'old', ?, NULL, 0.1, 0.5, 'request')", (T0,))
    db.execute(
        "INSERT INTO windows VALUES ('r1', 'w1', 'timed', ?, NULL, NULL, NULL, ?, 3, 7, NULL, '{}')",
        (T0, T0 + S),
    )
    db.commit()
    db.close()
    store = Store(tmp_path / "sw.db")
    assert store.schema_version == len(MIGRATIONS) == 13
    (old,) = store.windows("r1")
    assert (old.prompt_tokens, old.completion_tokens, old.reasoning_tokens, old.http_status) == (
        3,
        7,
        None,
        None,
    )
    new = Window("w2", "timed", T0, T0 + S, reasoning_tokens=4, http_status=200, finish_reason="stop")
    store.add_windows("r1", [new])
    assert store.windows("r1")[1] == new


def test_newer_schema_is_refused_unchanged(tmp_path: pathlib.Path) -> None:
    """It was refused after the pragmas had switched it to WAL and bumped its change counter."""
    db = sqlite3.connect(tmp_path / "sw.db")
    db.execute("PRAGMA user_version = 99")
    db.close()
    before = (tmp_path / "sw.db").read_bytes()
    with pytest.raises(StoreError, match="newer"):
        Store(tmp_path / "sw.db")
    assert (tmp_path / "sw.db").read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["sw.db"]


def test_a_database_with_two_names_is_refused(tmp_path: pathlib.Path) -> None:
    """A hard link let a second coordinator start on the same file: the writer lock and SQLite's WAL are
    named after the path."""
    Store(tmp_path / "sw.db").close()
    os.link(tmp_path / "sw.db", tmp_path / "again.db")
    with pytest.raises(StoreError, match=r"it has 2 hard links: .* give it one name"):
        Store(tmp_path / "again.db")


def test_a_read_only_database_refused_leaves_no_file_beside_it(tmp_path: pathlib.Path) -> None:
    """Its start refused ("attempt to write a readonly database"), an empty -wal and a -shm stayed behind."""
    store = Store(tmp_path / "sw.db")
    store.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    db_file = tmp_path / "sw.db"
    real_connect = sqlite3.connect

    def read_only(path: object, *args: object, **kwargs: object) -> sqlite3.Connection:
        return real_connect(f"file:{path}?mode=ro", *args, uri=True, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite3, "connect", read_only)
        with pytest.raises(StoreError, match="readonly"):
            Store(db_file)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_ingest_is_idempotent_and_survives_restart(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    store.record_hello("n1", {"type": "hello", "boot_id": "b1"})
    assert store.ingest("n1", "b1", [sample(i) for i in range(1, 11)]) == 10
    assert store.ingest("n1", "b1", [sample(i) for i in range(5, 16)]) == 5  # replayed overlap ignored
    store.close()
    reopened = Store(tmp_path / "sw.db")
    assert reopened.count_samples("n1") == 15
    assert reopened.latest_boot("n1") == ("b1", 15)
    boot = reopened.boot_samples("n1", "b1")
    block = boot.read("t_mono_ns", 0, S)  # seq k was taken at monotonic k/10 s
    assert block.seq.tolist() == list(range(1, 11))
    assert boot.read("t_wall_ns", T0 + S // 10, T0 + S).seq.tolist() == list(range(1, 11))
    assert len(boot.read("t_mono_ns", 2 * S, 3 * S)) == 0
    rows = block.gpu_rows()
    first = int(np.argmin(rows.t_mono_ns))
    assert len(rows.uuid) == 10 and rows.power_w[first] == 5.0 and rows.energy_j[first] == 11.0
    assert (
        rows.uuid[first] == "GPU-x"
        and rows.interval_s[first] == 0.1
        and rows.t_wall_ns[first] == T0 + S // 10
    )
    memory = block.mem_rows()
    assert memory.used_bytes.tolist() == [1000 + k for k in range(1, 11)]  # in seq order


def test_the_largest_seq_a_frame_may_carry_is_read_back(tmp_path: pathlib.Path) -> None:
    """A boot whose last seq is 2^63 − 1 (the decoder's bound) is stored and read back (the export of such
    a node once answered 500), and a replay of it is still recognised."""
    store = Store(tmp_path / "sw.db")
    top = 2**63 - 1
    frames = [sample(k)._replace(seq=seq) for k, seq in ((1, top - 1), (2, top))]
    assert store.ingest("n1", "b1", frames) == 2
    assert store.ingest("n1", "b1", frames) == 0
    block = store.boot_samples("n1", "b1").read("t_mono_ns", 0, S)
    assert block.seq.tolist() == [top - 1, top]
    assert block.mem_rows().used_bytes.tolist() == [1001, 1002]
    assert len(block.gpu_rows().uuid) == 2


def test_new_boot_and_gap_are_recorded(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    store.record_hello("n1", {"boot_id": "b1"})
    store.ingest("n1", "b1", [sample(1), sample(2)])
    store.ingest("n1", "b1", [sample(43)], [GapFrame(after=2, missing=40)])
    store.record_hello("n1", {"boot_id": "b2"})
    store.ingest("n1", "b2", [sample(1, boot="b2")])
    assert store.gaps("n1") == [("b1", 2, 40)]
    assert store.latest_boot("n1") == ("b2", 1)
    assert store.last_seq("n1", "b1") == 43


def test_unknown_power_is_stored_as_null(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    store.ingest("n1", "b1", [sample(1, power=None)])
    rows = store.boot_samples("n1", "b1").read("t_mono_ns", 0, S).gpu_rows()
    assert len(rows.power_w) == 1 and np.isnan(rows.power_w).all()  # unknown: never a number


def test_runs_windows_all_or_nothing(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    store.create_run(RunRow("r1", "demo", T0, None, 0.1, 0.5, "request"))
    with pytest.raises(StoreError, match="already exists"):
        store.create_run(RunRow("r1", "again", T0, None, 0.1, 0.5, "request"))
    good = [Window("a", "timed", T0, T0 + S, completion_tokens=5, source={"kind": "api"})]
    assert store.add_windows("r1", good) == 1
    batch = [Window("b", "timed", T0, T0 + S), Window("a", "timed", T0, T0 + S)]  # "a" is a duplicate
    with pytest.raises(StoreError, match="unique"):
        store.add_windows("r1", batch)
    assert [w.id for w in store.windows("r1")] == ["a"]  # "b" was not stored either
    assert store.windows("r1")[0].source == {"kind": "api"}
    with pytest.raises(StoreError, match="no run"):
        store.add_windows("nope", good)
    ended = store.end_run("r1", T0 + 5 * S)
    assert not ended.open and ended.t_end_ns == T0 + 5 * S
    with pytest.raises(StoreError, match="already ended"):
        store.end_run("r1", T0 + 6 * S)


def many(prefix: str, count: int) -> list[Window]:
    return [Window(f"{prefix}{i}", "timed", T0, T0 + S) for i in range(count)]


def test_a_batch_larger_than_a_chunk_is_still_all_or_nothing(tmp_path: pathlib.Path) -> None:
    """Big batches are written in short transactions (CHUNK_ROWS); a duplicate in the last chunk must still
    leave nothing of the batch, and a batch that goes in is seen whole."""
    store = Store(tmp_path / "sw.db")
    store.create_run(RunRow("r1", "demo", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("taken", "timed", T0, T0 + S)])
    batch = [*many("w", 2 * CHUNK_ROWS + 10), Window("taken", "timed", T0, T0 + S)]
    with pytest.raises(StoreError, match="unique"):
        store.add_windows("r1", batch)
    assert store.count_windows("r1") == 1 and store.drop_open_imports() == []
    assert store.add_windows("r1", batch[:-1]) == 2 * CHUNK_ROWS + 10
    assert store.count_windows("r1") == 2 * CHUNK_ROWS + 11


def test_an_import_is_seen_only_once_committed_and_an_abort_leaves_nothing(tmp_path: pathlib.Path) -> None:
    clock = [T0]
    store = Store(tmp_path / "sw.db", now_ns=lambda: clock[0])
    store.create_run(RunRow("r1", "demo", T0, None, 0.1, 0.5, "request"))
    first = store.begin_import("r1")
    store.add_windows("r1", many("a", 3000), first)
    store.add_windows("r1", many("b", 10), first)
    assert store.count_windows("r1") == 0 and store.windows("r1") == []  # staged: nobody sees it yet
    with pytest.raises(StoreError, match="unique"):  # a staged id is taken: a second import cannot use it
        store.add_windows("r1", many("a", 1), store.begin_import("r1"))
    assert store.commit_import("r1", first) == (3010, None)
    assert store.count_windows("r1") == 3010 and len(store.windows("r1")) == 3010
    with pytest.raises(StoreError, match="already committed"):
        store.add_windows("r1", many("c", 1), first)
    second = store.begin_import("r1")
    store.add_windows("r1", many("d", 2500), second)
    assert store.abort_import("r1", second) == 2500
    with pytest.raises(NotFound):
        store.commit_import("r1", second)
    abandoned = store.begin_import("r1")  # a client that died half-way
    store.add_windows("r1", many("e", 5), abandoned)
    clock[0] += STALE_IMPORT_NS + 1
    last = store.begin_import("r1")  # the next import into the run drops it (and the one refused above)
    with pytest.raises(NotFound):
        store.add_windows("r1", many("f", 1), abandoned)
    assert store.count_windows("r1") == 3010
    assert store.drop_open_imports() == [last]  # at start: whatever is still uncommitted


def test_database_files_are_private_whatever_the_umask(tmp_path: pathlib.Path) -> None:
    old = os.umask(0)
    try:
        store = Store(tmp_path / "sw.db")
        store.ingest("n1", "b1", [sample(1)])  # the WAL and its index exist once something is written
        modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in tmp_path.iterdir()}
        store.close()
        (tmp_path / "loose.db").touch(0o644)
        Store(tmp_path / "loose.db").close()  # an existing file left open to others is tightened
    finally:
        os.umask(old)
    assert modes == {"sw.db": 0o600, "sw.db-wal": 0o600, "sw.db-shm": 0o600}
    assert stat.S_IMODE((tmp_path / "loose.db").stat().st_mode) == 0o600


def test_a_path_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path: pathlib.Path) -> None:
    """A directory, a text file or the empty path (the current directory): one StoreError line, and the
    path's mode and bytes unchanged (it used to be made owner-only first: a directory no one could enter)."""
    folder, text = tmp_path / "d", tmp_path / "notes.txt"
    folder.mkdir(mode=0o755)
    text.write_text("not a database\n")
    text.chmod(0o644)
    for path, why in (
        (folder, "it is a directory"),
        (text, "file is not a database"),
        (pathlib.Path(""), "directory"),
    ):
        with pytest.raises(StoreError, match=f"cannot use database {re.escape(str(path))}: .*{why}"):
            Store(path)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755 and list(folder.iterdir()) == []
    assert stat.S_IMODE(text.stat().st_mode) == 0o644 and text.read_text() == "not a database\n"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["d", "notes.txt"]  # no -wal, no -shm beside it


def test_another_programs_sqlite_database_is_refused_unchanged(tmp_path: pathlib.Path) -> None:
    """Tables of its own and no schema version of ours: refused before a pragma (WAL mode) or a table of
    ours changes it; the same file with our version on it is taken."""
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
    db.close()
    before = other.read_bytes()
    with pytest.raises(StoreError, match=r"not a sparkwatch database \(it has tables of its own: accounts\)"):
        Store(other)
    assert other.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite"]
    Store(tmp_path / "ours.db").close()
    Store(tmp_path / "ours.db").close()  # our own, reopened: its version says it is ours


def test_a_database_made_here_that_cannot_be_set_up_is_removed(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(db: object, path: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr("sparkwatch.store.opening._set_up", broken)
    with pytest.raises(StoreError, match="disk I/O error"):
        Store(tmp_path / "new.db")
    assert list(tmp_path.iterdir()) == []


def test_clock_offsets(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0)
    store.add_offset("n1", "b1", ClockOffset(5 * S, 1000, 5, 10))
    store.add_offset("n1", "b1", ClockOffset(5 * S + 10, 900, 5, 10, mono_offset_ns=7 * S), t_ns=T0 + S)
    store.add_offset("n1", "b2", ClockOffset(6 * S, 800, 5, 10), t_ns=T0 + 900 * S)  # far outside: left out
    store.add_offset("n1", "b3", ClockOffset(4 * S, 700, 5, 10), t_ns=T0 - 10 * S)  # nearest before: kept
    assert store.offset_rounds("n1", T0, T0 + 2 * S) == {
        "b3": [OffsetRound(T0 - 10 * S, 4 * S, 700)],
        "b1": [OffsetRound(T0, 5 * S, 1000), OffsetRound(T0 + S, 5 * S + 10, 900, 7 * S)],
    }


def test_a_boot_placed_inside_or_before_the_span_takes_no_round_after_it(tmp_path: pathlib.Path) -> None:
    """The nearest round after the span arrives up to a probe interval after the run's end: only a boot
    with nothing else to be placed by takes it."""
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0)
    store.add_offset("n1", "b1", ClockOffset(0, 900, 5, 10), t_ns=T0 - 5 * S)  # before: kept
    store.add_offset("n1", "b1", ClockOffset(0, 800, 5, 10), t_ns=T0 + 5 * S)  # after: not for b1
    store.add_offset("n1", "b2", ClockOffset(0, 700, 5, 10), t_ns=T0 + S)  # inside
    store.add_offset("n1", "b2", ClockOffset(0, 600, 5, 10), t_ns=T0 + 4 * S)  # after: not for b2
    store.add_offset("n1", "b3", ClockOffset(0, 500, 5, 10), t_ns=T0 + 3 * S)  # after, and b3 has no other
    store.add_offset("n1", "b3", ClockOffset(0, 400, 5, 10), t_ns=T0 + 6 * S)  # nor this, not the nearest
    assert store.offset_rounds("n1", T0, T0 + 2 * S) == {
        "b1": [OffsetRound(T0 - 5 * S, 0, 900)],
        "b2": [OffsetRound(T0 + S, 0, 700)],
        "b3": [OffsetRound(T0 + 3 * S, 0, 500)],
    }


def test_an_export_at_the_runs_end_is_the_export_made_later(tmp_path: pathlib.Path) -> None:
    """`sparkwatch run` exports as the run ends; `runs export` later, after the link's next probe round:
    the same bytes (that round moved the clock fit, every figure's last digits and the digest)."""
    from sparkwatch.sources.store import export_run

    store = Store(tmp_path / "sw.db")
    store.record_hello("n1", {"boot_id": "b1", "capabilities": {"gpus": [{"uuid": "GPU-x", "fields": {}}]}})
    store.ingest("n1", "b1", [sample(i) for i in range(1, 301)])  # 0.1 s .. 30 s
    for t, offset in ((T0, 0), (T0 + 10 * S, 3_000)):  # the agent's clock drifts 300 ppm
        store.add_offset("n1", "b1", ClockOffset(offset, 1000, 5, 8, mono_offset_ns=T0 + offset), t_ns=t)
    store.create_run(RunRow("r1", "demo", T0 + 2 * S, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("w", "timed", T0 + 5 * S, T0 + 14 * S)])
    store.end_run("r1", T0 + 15 * S)
    at_end = export_run(store, "r1", ["n1"], lambda: T0 + 15 * S)
    store.add_offset("n1", "b1", ClockOffset(9_000, 1000, 5, 8, mono_offset_ns=T0 + 9_000), t_ns=T0 + 20 * S)
    later = export_run(store, "r1", ["n1"], lambda: T0 + 60 * S)
    assert later == at_end and at_end["nodes"][0]["clock"]["probes_total"] == 2


def test_the_sample_after_the_end_closes_the_last_interval(tmp_path: pathlib.Path) -> None:
    """The samples were read up to the run's end: the stretch from the last one before it to the end was
    never covered (up to a sampling interval of every run measured whole, and of a window ending there)."""
    from sparkwatch.sources.store import export_run

    store = Store(tmp_path / "sw.db")
    store.record_hello("n1", {"boot_id": "b1", "capabilities": {"gpus": [{"uuid": "GPU-x", "fields": {}}]}})
    store.ingest("n1", "b1", [sample(i) for i in range(1, 151)])  # 0.1 s .. 15 s, 10 J/s on the counter
    store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=T0)
    store.create_run(RunRow("r1", "whole", T0 + 2 * S, None, 0.1, 0.0, "run"))
    store.add_windows("r1", [Window("w", "timed", T0 + 5 * S, T0 + 14_950_000_000)])  # ends mid-interval
    store.end_run("r1", T0 + 14_950_000_000)
    export = export_run(store, "r1", ["n1"], lambda: T0 + 40 * S)
    node, window = export["nodes"][0], export["windows"][0]["nodes"][0]
    assert node["samples"]["coverage_ratio"] == 1.0 and window["coverage_ratio"] == 1.0
    assert node["energy_j"] == pytest.approx(10.0 * 12.95) and window["energy_j"] == pytest.approx(99.5)
    assert node["samples"]["count"] == 130  # the scope's own: 2.0 s .. 14.9 s, not the one read past it
    # only the sample that closes the last interval is read past the end: what comes later changes nothing
    store.ingest("n1", "b1", [sample(i) for i in range(151, 301)])
    assert export_run(store, "r1", ["n1"], lambda: T0 + 60 * S) == export


def test_export_reads_windows_past_the_run_end_and_keeps_one_entry_per_gpu(tmp_path: pathlib.Path) -> None:
    from sparkwatch.sources.store import export_run

    store = Store(tmp_path / "sw.db")
    gpu = {"uuid": "GPU-x", "fields": {}}
    store.record_hello("n1", {"boot_id": "b1", "capabilities": {"gpus": [gpu]}, "memory_model": "unified"})
    store.record_hello("n2", {"boot_id": "b9", "capabilities": {"gpus": [{**gpu, "uuid": "GPU-y"}]}})
    store.ingest("n1", "b1", [sample(i) for i in range(1, 301)])  # 0.1 s .. 30 s, 5 W, util 0.5
    for t in (T0, T0 + 30 * S):  # probe rounds: the agent's clocks are the coordinator's (mono from T0)
        store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=t)
    store.create_run(RunRow("r1", "demo", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("w", "timed", T0 + 5 * S, T0 + 20 * S)])  # ends after the run
    store.end_run("r1", T0 + 10 * S)  # (posted while it was open: an ended run refuses such a window)
    export = export_run(store, "r1", ["n1", "n2"], lambda: T0 + 40 * S)
    n1 = export["nodes"][0]
    assert n1["samples"]["coverage_ratio"] == pytest.approx(1.0)
    assert n1["energy_method"] == "counter" and n1["energy_j"] == pytest.approx(15.0 * 10.0)  # 10 J/s counter
    assert export["lmx"]["gpuPowerWatts"] == [pytest.approx(10.0), None]  # n2 announced a GPU, sent nothing


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "not.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot use database"):
        Store(bad)
