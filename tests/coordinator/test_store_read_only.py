"""`Store.read_only`: what `sparkwatch export --db` reads a coordinator's file with — it reads everything a
coordinator stored, writes nothing, and refuses a file of another schema with one line."""

from __future__ import annotations

import hashlib
import pathlib
import sqlite3
import time

import pytest

from sparkwatch.commands.export_cmd import ExportCommandError, choose_run
from sparkwatch.sources.store import export_run
from sparkwatch.store import Damaged, Store, StoreError, Unavailable
from sparkwatch.store.read_only import open_hint
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.schema import MIGRATIONS, OLDEST_READABLE

T0 = 1_800_000_000 * 10**9


def _written(path: pathlib.Path) -> Store:
    store = Store(path)
    store.set_nodes(["spark-2", "spark-1"])
    store.create_run(RunRow("r1", "first", T0, T0 + 10**9, 0.1, 0.5, "request"))
    store.create_run(RunRow("r2", "second", T0 + 2 * 10**9, None, 0.1, 0.5, "decode"))
    return store


def test_it_reads_what_was_stored_and_refuses_every_write(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    _written(path).close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    store = Store.read_only(path)
    try:
        assert store.node_names() == ["spark-2", "spark-1"]  # the nodes file's order, not the names'
        assert [r.id for r in store.runs()] == ["r1", "r2"]
        with pytest.raises(Unavailable, match="readonly"):
            store.end_run("r2", T0 + 3 * 10**9)
    finally:
        store.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]  # no -wal or -shm left beside it


def test_it_reads_a_live_coordinators_log(tmp_path: pathlib.Path) -> None:
    """A coordinator that still runs (or was killed) has rows only in its write-ahead log: they are read."""
    writer = _written(tmp_path / "c.db")
    try:
        writer.end_run("r2", T0 + 3 * 10**9)
        store = Store.read_only(tmp_path / "c.db")
        assert [r.t_end_ns for r in store.runs()] == [T0 + 10**9, T0 + 3 * 10**9]
        store.close()
    finally:
        writer.close()


def test_a_database_another_process_holds_exclusively_is_said_so_not_called_foreign(
    tmp_path: pathlib.Path,
) -> None:
    """`locking_mode=EXCLUSIVE` in another process: "c.db is not a sparkwatch database (database is
    locked)" sent its user looking for another file."""
    path = tmp_path / "c.db"
    _written(path).close()
    holder = sqlite3.connect(path)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError) as refused:
            Store.read_only(path)
    finally:
        holder.close()
    said = str(refused.value)
    assert said.startswith(f"cannot read database {path}: database is locked"), said
    assert "another process holds it exclusively" in said and "not a sparkwatch database" not in said


def test_a_log_without_its_index_where_none_can_be_made_says_what_to_do(tmp_path: pathlib.Path) -> None:
    """A copy of a live database's file and -wal, in a folder that takes no new file (a read-only mount,
    which a root test cannot make): SQLite cannot open the -shm index and says only "unable to open"."""
    path = tmp_path / "c.db"
    path.write_bytes(b"")
    path.with_name("c.db-wal").write_bytes(b"")
    said = open_hint(path, "unable to open database file")
    assert said.startswith(" (its -wal needs a -shm index beside it") and str(tmp_path) in said
    path.with_name("c.db-shm").write_bytes(b"")
    assert open_hint(path, "unable to open database file") == ""


@pytest.mark.parametrize(
    ("version", "words"),
    [
        (len(MIGRATIONS) + 1, f"has schema {len(MIGRATIONS) + 1}, newer than this sparkwatch reads"),
        (OLDEST_READABLE - 1, f"from an older sparkwatch \\(this one reads {OLDEST_READABLE} to"),
        (0, "is not a sparkwatch database"),
    ],
)
def test_another_schema_is_refused(tmp_path: pathlib.Path, version: int, words: str) -> None:
    path = tmp_path / "c.db"
    _written(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {version}")
    db.close()
    with pytest.raises(StoreError, match=words):
        Store.read_only(path)


def test_a_schema_9_file_is_read_as_it_is_its_failed_polls_of_no_kind(tmp_path: pathlib.Path) -> None:
    """Schema 10 only gave failed meter polls their kind: a schema-9 file (a kept `run --db` database) is
    exported without a coordinator upgrading it first, and a meter that never answered reads "meter"."""
    path = tmp_path / "c.db"
    store = _written(path)
    store.add_meter_error("spark-1", "wall", T0 + 10**8, "shelly answered HTTP 503", "meter:shelly")
    store.close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE meter_errors DROP COLUMN source")
    db.execute("PRAGMA user_version = 9")
    db.close()
    old = Store.read_only(path)
    try:
        assert old.schema_version == OLDEST_READABLE == 9
        (error,), kind = old.meter_reasons("spark-1", "wall", T0, T0 + 10**9)
        assert (error.error, kind) == ("shelly answered HTTP 503", None)
        export = export_run(old, "r1", ["spark-1"], time.time_ns)
    finally:
        old.close()
    (wall,) = [d for d in export["nodes"][0]["system"]["domains"] if d["domain"] == "wall"]
    assert wall["source"] == "meter" and wall["errors"][0]["error"] == "shelly answered HTTP 503"


def test_the_run_chosen_by_default_is_the_newest() -> None:
    runs = [
        RunRow("old", "a", T0, T0 + 1, 0.1, 0.5, "request"),
        RunRow("new", "b", T0 + 10, None, 0.1, 0.5, "request"),
    ]
    path = pathlib.Path("x.db")
    assert choose_run(runs, None, path) == (runs[1], "the newest of 2 runs")
    assert choose_run(runs[:1], None, path) == (runs[0], "the only run")
    assert choose_run(runs, "old", path) == (runs[0], "")
    known = r"no run nope in x\.db \(its runs, newest first: new, old\)"
    with pytest.raises(ExportCommandError, match=known):
        choose_run(runs, "nope", path)
    with pytest.raises(ExportCommandError, match=r"x\.db holds no runs"):
        choose_run([], None, path)


def test_a_file_whose_schema_page_is_damaged_is_said_as_damage_with_the_way_to_recover_it(
    tmp_path: pathlib.Path,
) -> None:
    """A sound header over a damaged schema page was "not a sparkwatch database", which sent a user to the
    wrong file, not to a backup or `.recover`; a file that is not SQLite at all still reads as not ours."""
    path = tmp_path / "c.db"
    _written(path).close()
    with path.open("r+b") as f:  # page 1's b-tree, after the 100-byte file header
        f.seek(100)
        f.write(b"\xff" * 16)
    with pytest.raises(Damaged) as caught:
        Store.read_only(path)
    assert f"the database {path} is damaged (SQLite:" in str(caught.value)
    assert f"sqlite3 {path} .recover" in str(caught.value)
    other = tmp_path / "notes.db"
    other.write_bytes(b"not sqlite at all" * 300)
    with pytest.raises(StoreError, match="is not a sparkwatch database") as caught:
        Store.read_only(other)
    assert not isinstance(caught.value, Damaged)
