"""Real SQLite files that cannot take what the coordinator asks of them: full (SQLITE_FULL at the file's own
size) or damaged (SQLITE_CORRUPT: b-tree pages overwritten), for the tests of how each is said."""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3

from sparkwatch.store import Store


def fill(store: Store) -> None:
    """No page more than the file has now, and those filled (free pages and most room in the last one
    taken by a filler table): the next sample blocks fail with SQLITE_FULL."""
    db = store._db
    pages, page_size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
    db.execute(f"PRAGMA max_page_count = {pages}")
    db.execute("CREATE TABLE filler (b BLOB)")
    for size in (page_size // 4, 256):
        with contextlib.suppress(sqlite3.OperationalError):  # database or disk is full
            while True:
                db.execute("INSERT INTO filler VALUES (zeroblob(?))", (size,))


def damage(path: pathlib.Path) -> None:
    """Every page but the first (the schema's) gets a head of 0xff bytes, not a b-tree page's: the file
    still opens, and the first read of any table or index says "database disk image is malformed". Whatever
    a connection has in the WAL is checkpointed into the file first, so the damage is what readers see."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size, pages = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "page_count"))
    finally:
        db.close()
    with path.open("r+b") as f:
        for page in range(1, pages):
            f.seek(page * page_size)
            f.write(b"\xff" * 16)
