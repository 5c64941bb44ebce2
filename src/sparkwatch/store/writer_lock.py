"""One coordinator per database file. Two coordinators on one file (a standing one, and `sparkwatch run --db`
given its file) both linked the same agents and stored each sample twice, which an export then counted
twice. SQLite's own locks only order their writes, so a coordinator holds an exclusive ``flock`` on a
file beside the database (``<db>.lock``, holding its pid) for as long as it runs. Not on the database file
itself: closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included. Readers (`export --db`) take no lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from sparkwatch.store.tx import StoreError

#: Tries at a lock file that another start removed between our open and our lock (its failed start).
TRIES = 3


class DatabaseInUse(StoreError):
    """Another process holds the database's writer lock."""


def lock_path(db_path: Path) -> Path:
    """Beside the database file itself: two names (a symlink) for one file share one lock."""
    real = db_path.resolve()
    return real.with_name(real.name + ".lock")


@contextlib.contextmanager
def writer_lock(db_path: Path) -> Iterator[bool]:
    """Held until the block ends; yields whether the lock file was made here. ``DatabaseInUse`` (one line,
    with the holder's pid) when another process holds it, never waited for; any other trouble with the
    lock file (a symlink or a non-file in its place, a file system without locks) a one-line StoreError."""
    path = lock_path(db_path)
    for _ in range(TRIES):
        created = not os.path.lexists(path)
        fd = _locked(db_path, path)
        if _same_file(fd, path):
            break
        os.close(fd)  # removed (or replaced) while we locked it: the lock is on a file nobody else sees
    else:
        raise StoreError(f"cannot use database {db_path}: {path} keeps being replaced")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield created
    finally:
        os.close(fd)


def _locked(db_path: Path, path: Path) -> int:
    """The lock file open and exclusively locked by us."""
    problem = f"cannot use database {db_path}: {path}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ENOENT and not path.parent.is_dir():  # the lock file was named, not the folder
            folder = f"its folder {path.parent} does not exist"
            raise StoreError(f"cannot use database {db_path}: {folder}") from None
        raise StoreError(f"{problem}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(f"{problem} is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            by = f" (pid {holder})" if holder.isdigit() else ""
            raise DatabaseInUse(
                f"database {db_path} is in use by another sparkwatch coordinator{by}: stop it, or give this"
                " one a --db of its own (a `sparkwatch run` can use the standing one: --coordinator URL)"
            ) from None
        except OSError as exc:  # ENOLCK: a network file system without flock
            raise StoreError(f"{problem}: cannot lock it: {exc.strerror or exc}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
