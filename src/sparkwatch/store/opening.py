"""Opening the coordinator's database file: owner-only, its pragmas, its schema brought up to date."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from sparkwatch.store.convert import samples_to_blocks
from sparkwatch.store.schema import BLOCKS_SCHEMA, MIGRATIONS
from sparkwatch.store.tx import StoreError, Unavailable, unavailable_now

log = logging.getLogger(__name__)

#: Page size of a new database, and the WAL size after which it is checkpointed.
PAGE_BYTES = 16384
WAL_CHECKPOINT_BYTES = 32 * 1024 * 1024
#: What the WAL is cut back to when it is reset, after a reader held its checkpoints back.
WAL_LIMIT_BYTES = 2 * WAL_CHECKPOINT_BYTES


def open_failure(path: Path, exc: sqlite3.Error | OSError) -> StoreError:
    """Why the database at ``path`` could not be opened, in one line. What may pass (a full file system, an
    I/O error, a lock) is :class:`Unavailable`, exit 75: systemd restarts a coordinator that stopped so (a
    full disk at boot left it failed for good with exit 2); the rest (a path, a folder's permissions) is
    what no restart mends."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == sqlite3.SQLITE_CANTOPEN or not unavailable_now(exc):
        hint = ""
        if code == sqlite3.SQLITE_CANTOPEN and path.parent.is_dir() and not os.access(path.parent, os.W_OK):
            hint = f" (its folder {path.parent} takes no new file: SQLite keeps a -wal and a -shm beside it)"
        return StoreError(f"cannot use database {path}: {exc}{hint}")
    hint = ""
    if code in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
        try:
            room = os.statvfs(path.parent)
            free_kib = room.f_bavail * room.f_frsize // 1024
            hint = f" ({free_kib} KiB free where it is: make room, and it starts again)"
        except OSError:
            pass
    return Unavailable(f"cannot use database {path} now: {exc}{hint}")


def open_database(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (the store's transactions are explicit: store/tx.py); sqlite3 and
    OS errors propagate for the caller to word. A path that is not a database (a directory, another file:
    SQLite refuses it) is left as it was, its mode included; a file made here and not set up is removed."""
    created = _created(path)
    # the WAL and its index that SQLite makes beside an existing file as it opens it: removed again when
    # the start is refused (a read-only file, a newer schema), as a refused start changes nothing
    beside = [
        f for f in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")) if not f.exists()
    ]
    try:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            _set_up(db, path)
            _owner_only(path)  # once it has proved to be a database
        except BaseException:
            db.close()
            raise
    except BaseException:
        if created:
            for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                file.unlink(missing_ok=True)
        elif all(not f.exists() or f.name.endswith("-shm") or f.stat().st_size == 0 for f in beside):
            for file in beside:  # nothing was written to the WAL made here: no change is lost
                file.unlink(missing_ok=True)
        raise
    return db


def _created(path: Path) -> bool:
    """Whether the database file is made here, owner-only from the start (an existing one is not opened:
    see ``_owner_only``); a directory is refused."""
    if path.is_dir():
        raise sqlite3.DatabaseError("it is a directory")
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        st = path.stat()
        if st.st_nlink > 1:  # SQLite names its WAL and the writer lock is named after the path, not the file
            raise sqlite3.DatabaseError(
                f"it has {st.st_nlink} hard links: a coordinator started on each name would write the one"
                " file at once (SQLite: a hard-linked database can be corrupted); give it one name"
            ) from None
        # one that could not be made owner-only after set-up is refused before it
        if st.st_mode & 0o077 and st.st_uid != os.geteuid() and os.geteuid() != 0:
            raise sqlite3.DatabaseError(
                "it is open to others and another user owns it (its owner: chmod 600)"
            ) from None
        return False
    return True


def _set_up(db: sqlite3.Connection, path: Path) -> None:
    _ours(db)
    # a new database gets 16 KiB pages: sample blocks are kilobytes each (schema 9; before it, a sample row
    # held its 1-3 KB frame, which spilled to overflow pages on 4 KiB ones and cut ingest 2.6x); the page
    # size cannot change once the database is in WAL
    db.execute(f"PRAGMA page_size={PAGE_BYTES}")
    # a new database frees pages as it goes (retention, deleted runs: store/retention.py); this
    # holds only if set before the first table is made (an older file is rebuilt once, below)
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    # checkpoint every ~32 MiB of WAL instead of 4 MiB: hot B-tree pages are copied back once
    (page_bytes,) = db.execute("PRAGMA page_size").fetchone()
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_BYTES // page_bytes}")
    # a reader (`export --db` beside a running coordinator) holds checkpoints back, and the WAL grows past
    # them (160 MiB in a sweep, 1.2 GB once) and kept that size for good: cut back once it is reset
    db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
    db.execute("PRAGMA foreign_keys=ON")
    _migrate(db, path)
    _incremental_vacuum_on(db)


def _ours(db: sqlite3.Connection) -> None:
    """Refuse, before any pragma changes it, an SQLite database some other program made (no schema version
    of ours, and tables of its own; a new, empty file has neither) or a newer sparkwatch did."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > len(MIGRATIONS):  # before the pragmas below: they would rewrite its header (WAL mode)
        raise StoreError(f"database schema {version} is newer than this sparkwatch ({len(MIGRATIONS)})")
    if version == 0:
        tables = [
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 3")
        ]
        if tables:
            raise sqlite3.DatabaseError(
                f"not a sparkwatch database (it has tables of its own: {', '.join(tables)})"
            )


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > len(MIGRATIONS):
        raise StoreError(f"database schema {version} is newer than this sparkwatch ({len(MIGRATIONS)})")
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        db.executescript(f"BEGIN; {script};")  # the transaction stays open for the step after
        try:
            if number == BLOCKS_SCHEMA:
                moved = samples_to_blocks(db)
                if moved:
                    log.info("database %s: %d stored samples moved into blocks", path, moved)
            db.execute(f"PRAGMA user_version = {number}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _owner_only(path: Path) -> None:
    """The database holds run names, commands and request details: readable by its owner only, whatever
    the umask. SQLite gives the ``-wal`` and ``-shm`` files the database file's mode when it creates them;
    files left open to others (by an older sparkwatch) are tightened, once SQLite has opened the file as a
    database. Never open and close a database file another connection of this process may hold: closing
    any descriptor of a file drops every POSIX lock the process has on it, SQLite's included."""
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists() and file.stat().st_mode & 0o077:
            file.chmod(0o600)


def _incremental_vacuum_on(db: sqlite3.Connection) -> None:
    """A database made before auto_vacuum was set (or before schema 9) is rebuilt once so freed pages can
    be handed back while the coordinator runs; a one-time cost, at start, before any link stores."""
    (mode,) = db.execute("PRAGMA auto_vacuum").fetchone()
    if mode != 2:
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("VACUUM")
