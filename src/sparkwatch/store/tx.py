"""The store's errors and its one way to write: a transaction that commits whole or leaves nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


class StoreError(Exception):
    """A request the store refuses (duplicate window id, ended run, …); nothing was written."""


class NotFound(StoreError):
    """The run or mark asked for does not exist."""


class Invalid(StoreError):
    """What was asked cannot be right for this run (a window a day away from it)."""


class Damaged(StoreError):
    """A row the store would never write (the file edited or damaged outside sparkwatch): refused with one
    line that names it, never measured or guessed around."""


class DuplicateIds(StoreError):
    """Window ids a run holds already (or that one batch repeats): ``ids`` are the first few, ``count`` all
    of them, so a client can act on the refusal without SQLite's wording."""

    def __init__(self, message: str, ids: list[str], count: int) -> None:
        super().__init__(message)
        self.ids = ids
        self.count = count


class RunEnded(StoreError):
    """What an ended run does not take (a mark, a window outside its span); ``t_end_ns``: when it ended."""

    def __init__(self, message: str, t_end_ns: int) -> None:
        super().__init__(message)
        self.t_end_ns = t_end_ns


class RepeatsProxy(StoreError):
    """An import whose windows are mostly the proxy's requests again (core/repeated_windows.py): refused and
    dropped, since each request would count twice; ``repeats`` of its ``windows`` pair with the proxy's."""

    def __init__(self, message: str, repeats: int, windows: int) -> None:
        super().__init__(message)
        self.repeats = repeats
        self.windows = windows


class Unavailable(StoreError):
    """The database cannot take a write now (disk full, locked): nothing was written; try again later."""

    exit_code = 75  # EX_TEMPFAIL: a command stopped by it may be started again (systemd restarts on it)


class Corrupt(Damaged):
    """SQLite found the file itself damaged (a page or its header that is not a database's): no retry
    mends it, so it is said as such, not as a failed write or a bug. A ``Damaged`` (a row) by kind: an
    ``except Damaged`` that works around one row takes it too, so such a handler lets it through first."""


#: SQLite's primary result codes for a file that is not a sound database: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGE_CODES = frozenset({11, 26})
#: ... and for one that cannot be used now, which a retry may find mended: BUSY, LOCKED, INTERRUPT, IOERR,
#: FULL, CANTOPEN (not SQLITE_ERROR's "no such column": a bug, said as one).
_PASSING_CODES = frozenset({5, 6, 9, 10, 13, 14})


def unavailable_now(exc: BaseException) -> bool:
    """Whether SQLite said the database cannot serve this now (locked, busy, an I/O error): a 503's case."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.OperationalError) and isinstance(code, int) and code & 0xFF in _PASSING_CODES
    )


def corrupt_or_none(exc: BaseException, path: object = None) -> Corrupt | None:
    """``exc`` said as :class:`Corrupt` when SQLite found the file damaged; None for anything else (a locked
    file, a full disk, a bug's ProgrammingError), which keeps its own handling."""
    if isinstance(exc, Corrupt):  # said again with the file's name when it is known now
        if path is None or exc.__cause__ is None or exc.__cause__ is exc:
            return exc
        exc = exc.__cause__
    code = getattr(exc, "sqlite_errorcode", None)
    if (
        not isinstance(exc, sqlite3.DatabaseError)
        or not isinstance(code, int)
        or code & 0xFF not in _DAMAGE_CODES
    ):
        return None
    where, file = ("the database", "FILE") if path is None else (f"the database {path}", str(path))
    return Corrupt(
        f"{where} is damaged (SQLite: {exc}): restore it from a backup, or copy out what SQLite can still"
        f" read with `sqlite3 {file} .recover`"
    )


def stored_or_why(write: Callable[[], object]) -> str | None:
    """Run a store write for a task that must go on whatever the store says (a meter's or an engine's
    poller): None once stored, else why not in one line (a refusal, a full disk, a damaged file: what it
    read is a gap, never filled). A bug's exception is raised with its trace."""
    try:
        write()
    except Exception as exc:
        if isinstance(exc, StoreError):
            return str(exc)
        if (corrupt := corrupt_or_none(exc)) is None:
            raise
        return str(corrupt)
    return None


def _file_of(db: sqlite3.Connection) -> str | None:
    """The connection's main file, for a line that names it (a poller's write knows no path). SQLite's
    list of attached files reads no page, so a damaged file still answers; None for one in memory."""
    try:
        rows = db.execute("PRAGMA database_list").fetchall()
    except sqlite3.Error:
        return None
    return next((str(file) for _, name, file in rows if name == "main" and file), None)


class tx:
    """BEGIN … COMMIT, or ROLLBACK on any exception (the connection runs in autocommit mode otherwise)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as err:
            raise Unavailable(f"the database cannot take a write: {err}") from err

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Commit, or roll back; a write the database could not take (disk full, locked: SQLite's
        OperationalError, in the block or in COMMIT) becomes ``Unavailable``, a damaged file ``Corrupt``,
        with nothing written."""
        committed = exc_type is None
        if committed:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.DatabaseError as err:
                exc = err
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        assert exc is not None  # the block raised it, or COMMIT did
        if isinstance(exc, Corrupt):  # an inner one's: as it is
            raise exc
        if (corrupt := corrupt_or_none(exc, _file_of(self._db))) is not None:
            raise corrupt from exc
        if isinstance(exc, sqlite3.OperationalError):
            raise Unavailable(f"the database cannot take a write: {exc}") from exc
        if committed:  # COMMIT refused for another reason (a deferred constraint): as it was
            raise exc
