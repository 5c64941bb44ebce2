"""One coordinator per database file. Two coordinators on one file (a standing one, and `sparkwatch run --db`
given its file) both linked the same agents and stored each sample twice, which an export then counted
twice. SQLite's own locks only order their writes, so a coordinator holds an exclusive ``flock`` on a
file beside the database (``<db>.lock``, holding its pid) for as long as it runs. Not on the database file
itself: closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included. Readers (`export --db`) take no lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from sparkwatch.store.tx import StoreError


class DatabaseInUse(StoreError):
    """Another process holds the database's writer lock."""


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


@contextlib.contextmanager
def writer_lock(db_path: Path) -> Iterator[bool]:
    """Held until the block ends; yields whether the lock file was made here. ``DatabaseInUse`` (one line,
    with the holder's pid) when another process holds it; it is never waited for."""
    path = lock_path(db_path)
    created = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        why = exc.strerror or exc
        raise StoreError(f"cannot use database {db_path}: cannot open {path}: {why}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            by = f" (pid {holder})" if holder.isdigit() else ""
            raise DatabaseInUse(
                f"database {db_path} is in use by another sparkwatch coordinator{by}: stop it, or give this"
                " one a --db of its own (a `sparkwatch run` can use the standing one: --coordinator URL)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield created
    finally:
        os.close(fd)
