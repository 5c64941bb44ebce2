"""The WAL beside a coordinator's database while a reader holds it (`sparkwatch export --db` on the file of
a running coordinator): checkpoints cannot pass the reader, so the WAL grows past its 32 MiB; it stayed at
its largest for good (160 MiB in a sweep, 1.2 GB once). Once the reader is gone and the WAL is reset it is
cut back to WAL_LIMIT_BYTES."""

from __future__ import annotations

import pathlib
import sqlite3

from sparkwatch.store import Store
from sparkwatch.store.opening import WAL_CHECKPOINT_BYTES, WAL_LIMIT_BYTES

MIB = 1024 * 1024


def test_the_wal_is_cut_back_once_a_reader_lets_go(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.db"
    store = Store(path)
    db = store._db  # the writer's own connection, as the coordinator's links write through it
    db.execute("CREATE TABLE scratch (b BLOB)")
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute(
        "SELECT count(*) FROM sqlite_master"
    ).fetchone()  # a snapshot held: no checkpoint passes it
    for _ in range(3 * WAL_CHECKPOINT_BYTES // MIB):
        with db:
            db.execute("INSERT INTO scratch VALUES (zeroblob(?))", (MIB,))
    wal = pathlib.Path(f"{path}-wal")
    assert wal.stat().st_size > WAL_LIMIT_BYTES  # grown past the checkpoints it could not make
    reader.rollback()
    reader.close()
    for _ in range(2 * WAL_CHECKPOINT_BYTES // MIB):  # the next checkpoint completes; the WAL restarts
        with db:
            db.execute("INSERT INTO scratch VALUES (zeroblob(?))", (MIB,))
    assert wal.stat().st_size <= WAL_LIMIT_BYTES
    store.close()
