"""A coordinator's database opened for reading only, for an export made without a coordinator.

SQLite's ``mode=ro`` keeps every write out of the file. A database whose write-ahead log was checkpointed
away (a coordinator that stopped cleanly) is also opened ``immutable``: SQLite then makes no ``-wal`` or
``-shm`` file beside it either. A database with a log (a coordinator that runs, or was killed) is read
through it, so nothing it committed is missed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sparkwatch.store.tx import StoreError, corrupt_or_none

#: Tables every sparkwatch database has had since its first schema (samples: in blocks since schema 9; an
#: older file is refused by its version before its tables are looked at).
TABLES = frozenset({"nodes", "boots", "runs", "windows", "marks", "clock_offsets"})


def connect_read_only(
    path: Path, schema_version: int, oldest: int | None = None, *, live: bool = False
) -> sqlite3.Connection:
    """A read-only connection to the sparkwatch database at ``path`` of ``schema_version`` (or, with
    ``oldest``, of any schema from that one up to it); anything else (no file, not SQLite, another program's
    database, another schema) is a one-line :class:`StoreError`. ``live``: a file its writer has open (the
    coordinator's own), never read as immutable, whatever files lie beside it."""
    if not path.exists():
        raise StoreError(f"no database at {path}")
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a sparkwatch database")
    wal = path.with_name(path.name + "-wal")
    uri = f"{path.resolve().as_uri()}?mode=ro" + ("" if live or wal.exists() else "&immutable=1")
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read database {path}: {exc}") from None
    try:
        _check(db, path, schema_version, schema_version if oldest is None else oldest)
    except BaseException:
        db.close()
        raise
    return db


def _check(db: sqlite3.Connection, path: Path, schema_version: int, oldest: int) -> None:
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        (version,) = db.execute("PRAGMA user_version").fetchone()
    except sqlite3.OperationalError as exc:  # a sound file this reader cannot open now: not its content
        raise StoreError(f"cannot read database {path}: {exc}{open_hint(path, str(exc))}") from None
    except sqlite3.DatabaseError as exc:  # a damaged page said as damage (how to recover it), else not ours
        damaged = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_CORRUPT
        raise (damaged and corrupt_or_none(exc, path)) or StoreError(
            f"{path} is not a sparkwatch database ({exc})"
        ) from None
    if version == 0 or not tables >= TABLES:
        raise StoreError(f"{path} is not a sparkwatch database (it has no sparkwatch tables)")
    if version > schema_version:
        raise StoreError(
            f"database {path} has schema {version}, newer than this sparkwatch reads ({schema_version}):"
            " export it with the sparkwatch that wrote it"
        )
    if version < oldest:
        raise StoreError(
            f"database {path} has schema {version}, from an older sparkwatch (this one reads {oldest} to"
            f" {schema_version}): start a coordinator on it once (it upgrades the file), then export"
        )


def open_hint(path: Path, said: str) -> str:
    """What most likely keeps a sound database from this read-only reader."""
    if "locked" in said:
        return " (another process holds it exclusively: wait for it, or stop it)"
    shm = path.with_name(path.name + "-shm")
    if "unable to open" in said and not shm.exists():  # its log is read through an index made beside it
        return (
            f" (its -wal needs a -shm index beside it, and none is there to read: where {path.parent} takes"
            " no new file, copy the database and its -wal to a folder that does)"
        )
    return ""
