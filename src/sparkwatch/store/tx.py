"""The store's errors and its one way to write: a transaction that commits whole or leaves nothing."""

from __future__ import annotations

import sqlite3


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


class tx:
    """BEGIN … COMMIT, or ROLLBACK on any exception (the connection runs in autocommit mode otherwise)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as err:
            raise Unavailable(f"the database cannot take a write: {err}") from err

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Commit, or roll back; a write the database could not take (disk full, locked: SQLite's
        OperationalError, in the block or in COMMIT) becomes ``Unavailable`` with nothing written."""
        if exc_type is None:
            try:
                self._db.execute("COMMIT")
                return
            except sqlite3.OperationalError as err:
                exc = err
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError):
            raise Unavailable(f"the database cannot take a write: {exc}") from exc
