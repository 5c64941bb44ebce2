"""A run's request windows in SQLite: batches, and imports that appear whole or not at all (marks: marks.py).

A large batch is written in chunks of ``CHUNK_ROWS``, each its own short transaction, so the links' sample
inserts (on the event loop's connection) never wait long for the write lock; the chunks are staged under an
import that only a last one-row update makes visible. An import a client sends over many requests (``begin``
→ batches → ``commit``) works the same way: until it is committed nobody sees any of it, and an import that
is aborted, or abandoned by a client that died, leaves nothing behind.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sparkwatch.core.repeated_windows import IN_RUN, PROXY, repeated, verdict
from sparkwatch.core.windows import (
    COUNT_FIELDS,
    STAMP_FIELDS,
    WINDOW_FIELDS,
    Window,
    WindowError,
    check_measured,
    check_source,
)
from sparkwatch.store import refusals
from sparkwatch.store.deletion import LIVE_RUNS
from sparkwatch.store.refusals import STALE_IMPORT_NS
from sparkwatch.store.row_values import is_integer, shown_value
from sparkwatch.store.tx import Damaged, NotFound, RepeatsProxy, StoreError, tx

#: Rows per transaction: a few milliseconds of writing, the longest a sample insert waits for the lock.
CHUNK_ROWS = 2000

_COLUMNS = ", ".join(WINDOW_FIELDS)
_INSERT = (
    f"INSERT INTO windows (run_id, import_id, {_COLUMNS})"
    f" VALUES ({', '.join('?' * (len(WINDOW_FIELDS) + 2))})"
)
_SOURCE = WINDOW_FIELDS.index("source")
#: The columns as the store writes them (a row edited outside sparkwatch may hold anything): never NULL, or
#: an integer, or text, where not NULL.
_NEEDED = frozenset({"id", "phase", "t_start_ns", "t_end_ns"})
_INTEGERS = ("t_start_ns", "t_end_ns", *STAMP_FIELDS, *COUNT_FIELDS, "http_status")
_TEXTS = ("id", "phase", "finish_reason")
#: What a proxy window's stored source holds (``_row``'s json.dumps), to narrow a read to those windows.
_PROXY_LIKE = '%"kind": "proxy"%'
#: A window counts once it was posted directly (no import) or its import was committed, in a run not deleted.
_VISIBLE = (
    "(import_id IS NULL OR import_id IN (SELECT id FROM imports WHERE committed = 1))"
    f" AND run_id IN {LIVE_RUNS}"
)


def add(
    db: sqlite3.Connection, run_id: str, windows: Sequence[Window], import_id: str | None, now_ns: int
) -> int:
    """All or nothing for the batch; in ``import_id`` (an open import of the run) if given. A refusal names
    the ids a batch repeats or the run holds already, or says why an ended run does not take it."""
    if import_id is not None:
        _open_import(db, run_id, import_id)  # an import that is gone or committed is said first
    refusals.refuse_repeats(run_id, windows)
    refusals.check_span(db, run_id, windows)  # before anything is staged; checked again as it goes in
    try:
        return _add(db, run_id, windows, import_id, now_ns)
    except sqlite3.IntegrityError:  # an id the run holds: which ones, now that the batch is taken back
        raise refusals.stored_duplicates(db, run_id, [w.id for w in windows], import_id) from None


def _add(
    db: sqlite3.Connection, run_id: str, windows: Sequence[Window], import_id: str | None, now_ns: int
) -> int:
    if import_id is None and len(windows) <= CHUNK_ROWS:
        _insert(db, run_id, None, windows, guard=lambda: refusals.check_span(db, run_id, windows))
        return len(windows)
    own = import_id is None
    staging = begin_import(db, run_id, now_ns) if import_id is None else import_id
    try:
        _stage(db, run_id, staging, windows, now_ns)
        if own:
            commit_import(db, run_id, staging)
    except BaseException:
        if own:
            abort_import(db, run_id, staging)
        raise
    return len(windows)


def _stage(
    db: sqlite3.Connection, run_id: str, import_id: str, windows: Sequence[Window], now_ns: int
) -> None:
    """The batch into an open import, chunk by chunk; a failed chunk takes the batch's earlier ones back."""
    _open_import(db, run_id, import_id)
    done = 0
    try:
        for start in range(0, len(windows), CHUNK_ROWS):
            _insert(db, run_id, import_id, windows[start : start + CHUNK_ROWS])
            done = start + CHUNK_ROWS
    except BaseException:
        _delete_ids(db, run_id, import_id, [w.id for w in windows[:done]])
        raise
    with tx(db):
        db.execute("UPDATE imports SET t_touched_ns = ? WHERE id = ?", (now_ns, import_id))


def _insert(
    db: sqlite3.Connection,
    run_id: str,
    import_id: str | None,
    windows: Sequence[Window],
    guard: Callable[[], object] | None = None,
) -> None:
    """One transaction; ``guard`` runs inside it first (a run that ended meanwhile refuses the batch)."""
    rows = [(run_id, import_id, *_row(w)) for w in windows]
    with tx(db):
        if guard is not None:
            guard()
        db.executemany(_INSERT, rows)


def _delete_ids(db: sqlite3.Connection, run_id: str, import_id: str, ids: Sequence[str]) -> None:
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        with tx(db):
            db.execute(
                "DELETE FROM windows WHERE run_id = ? AND import_id = ?"
                f" AND id IN ({', '.join('?' * len(chunk))})",
                (run_id, import_id, *chunk),
            )


def begin_import(db: sqlite3.Connection, run_id: str, now_ns: int) -> str:
    stale = db.execute(
        "SELECT id FROM imports WHERE run_id = ? AND committed = 0 AND t_touched_ns < ?",
        (run_id, now_ns - STALE_IMPORT_NS),
    ).fetchall()
    for (old,) in stale:
        abort_import(db, run_id, str(old))
    import_id = f"import-{secrets.token_hex(8)}"
    with tx(db):
        db.execute("INSERT INTO imports VALUES (?, ?, ?, ?, 0)", (import_id, run_id, now_ns, now_ns))
    return import_id


def _open_import(db: sqlite3.Connection, run_id: str, import_id: str) -> None:
    row = db.execute(
        f"SELECT committed FROM imports WHERE id = ? AND run_id = ? AND run_id IN {LIVE_RUNS}",
        (import_id, run_id),
    ).fetchone()
    if row is None:
        raise NotFound(f"no import {import_id} in run {run_id} (aborted, or dropped after a long silence?)")
    if row[0]:
        raise StoreError(f"import {import_id} is already committed")


def commit_import(db: sqlite3.Connection, run_id: str, import_id: str) -> int:
    """Every staged window becomes visible; into an ended run only if all lie inside its span. The windows
    are checked before the write lock is taken, and again under it only if the run ended in between."""
    _open_import(db, run_id, import_id)
    checked = refusals.check_staged_span(db, run_id, import_id)
    with tx(db):
        if refusals.run_span(db, run_id)[1] != checked:
            refusals.check_staged_span(db, run_id, import_id)
        db.execute("UPDATE imports SET committed = 1 WHERE id = ?", (import_id,))
    return int(db.execute("SELECT COUNT(*) FROM windows WHERE import_id = ?", (import_id,)).fetchone()[0])


class Committed(NamedTuple):
    """A committed import: how many windows it made part of the run, and the note when some of its
    windows repeated the proxy's requests and were left out (``proxy_repeats``)."""

    windows: int
    note: str | None


def proxy_repeats(db: sqlite3.Connection, run_id: str, import_id: str) -> str | None:
    """Before an import is committed: its windows compared with the proxy's in the run (a harness file of
    the proxy's requests would give each twice, and joules per token at half), and its proxy windows (an
    export's of a proxied run) with the run's others. At least half repeating: the import is dropped and
    ``RepeatsProxy`` raised; fewer: those that repeat are left out of it, and the note says how many (None:
    nothing repeats)."""
    _open_import(db, run_id, import_id)
    staged_where, visible_where = "run_id = ? AND import_id = ?", f"run_id = ? AND {_VISIBLE}"
    if not _any_proxy(db, staged_where, (run_id, import_id)) and not _any_proxy(db, visible_where, (run_id,)):
        return None  # no proxy window on either side: nothing to compare (150 000 read back took 5 s)
    staged = _read(db, staged_where, (run_id, import_id))
    harness = [w for w in staged if not _proxy(w)]
    pairs = []
    if harness:  # the text filter only narrows what is parsed; a window is the proxy's by its parsed source
        proxy = _read(db, f"{visible_where} AND source LIKE ?", (run_id, _PROXY_LIKE))
        pairs = [
            (ours, theirs, theirs) for ours, theirs in repeated([w for w in proxy if _proxy(w)], harness)
        ]
    if len(harness) < len(staged):  # the proxy's requests at second hand, beside the run's harness windows
        others = [w for w in _read(db, visible_where, (run_id,)) if not _proxy(w)]
        pairs += [(ours, theirs, ours) for ours, theirs in repeated([w for w in staged if _proxy(w)], others)]
    if not pairs:
        return None
    formats = ", ".join(sorted({str(w.source.get("format", "windows")) for w in staged}))
    wording = PROXY if len(harness) == len(staged) else IN_RUN
    take, note = verdict(formats, f"import {import_id}", [p[:2] for p in pairs], len(staged), wording)
    if not take:
        abort_import(db, run_id, import_id)
        raise RepeatsProxy(note or "", len(pairs), len(staged))
    _delete_ids(db, run_id, import_id, [mine.id for _, _, mine in pairs])
    return note


def _any_proxy(db: sqlite3.Connection, where: str, params: tuple[str, ...]) -> bool:
    """Whether a window ``where`` selects may be the proxy's: the text filter holds every window
    :func:`_proxy` takes, and more."""
    query = f"SELECT EXISTS (SELECT 1 FROM windows WHERE {where} AND source LIKE ?)"
    return bool(db.execute(query, (*params, _PROXY_LIKE)).fetchone()[0])


def _proxy(w: Window) -> bool:
    """A window the proxy made: posted by it, or in an export of a run it was in front of (its ``taken``)."""
    taken = w.source.get("taken")
    return w.source.get("kind") == "proxy" or (isinstance(taken, dict) and taken.get("kind") == "proxy")


def abort_import(db: sqlite3.Connection, run_id: str, import_id: str) -> int:
    _open_import(db, run_id, import_id)
    dropped = 0
    while True:  # in chunks, like the inserts: the write lock is never held long
        with tx(db):
            cursor = db.execute(
                "DELETE FROM windows WHERE rowid IN (SELECT rowid FROM windows WHERE import_id = ? LIMIT ?)",
                (import_id, CHUNK_ROWS),
            )
        dropped += cursor.rowcount
        if cursor.rowcount < CHUNK_ROWS:
            break
    with tx(db):
        db.execute("DELETE FROM imports WHERE id = ?", (import_id,))
    return dropped


def drop_open_imports(db: sqlite3.Connection) -> list[str]:
    # a deleted run's imports are its purge's to remove
    rows = db.execute(
        f"SELECT id, run_id FROM imports WHERE committed = 0 AND run_id IN {LIVE_RUNS}"
    ).fetchall()
    for import_id, run_id in rows:
        abort_import(db, str(run_id), str(import_id))
    return [str(row[0]) for row in rows]


def count(db: sqlite3.Connection, run_id: str) -> int:
    """The live run's windows that reads see: all its rows, counted in its key's index alone, less those
    staged in its imports not committed, counted in theirs. Filtering each row as :data:`_VISIBLE` does read
    every row: ~5 s for a 15 M-window run, before a delete answered. (A window naming an import that is not
    there, a row edited outside sparkwatch, is counted here; :func:`read` refuses such a run.)"""
    if db.execute(f"SELECT 1 FROM runs WHERE id = ? AND id IN {LIVE_RUNS}", (run_id,)).fetchone() is None:
        return 0
    (rows,) = db.execute("SELECT COUNT(*) FROM windows WHERE run_id = ?", (run_id,)).fetchone()
    (staged,) = db.execute(
        "SELECT COUNT(*) FROM windows WHERE import_id IS NOT NULL AND import_id IN"
        " (SELECT id FROM imports WHERE run_id = ? AND committed IS NOT 1)",
        (run_id,),
    ).fetchone()
    return int(rows) - int(staged)


def read(db: sqlite3.Connection, run_id: str) -> list[Window]:
    _check_imports(db, run_id)
    return _read(db, f"run_id = ? AND {_VISIBLE}", (run_id,))


def _check_imports(db: sqlite3.Connection, run_id: str) -> None:
    """Which windows count hangs on the run's imports' rows: a `committed` of 'yes' or a window naming an
    import that is not there (rows edited outside sparkwatch) hid committed windows from the export, whose
    figures then left them out in silence. ``Damaged`` instead."""
    bad = db.execute(
        "SELECT id, committed FROM imports WHERE run_id = ? AND committed NOT IN (0, 1) LIMIT 1", (run_id,)
    ).fetchone()
    if bad is not None:
        raise Damaged(
            f"import {bad[0]!r} of run {run_id} is damaged in the database:"
            f" committed {shown_value(bad[1])} is not 0 or 1"
        )
    orphan = db.execute(
        "SELECT id, import_id FROM windows WHERE run_id = ? AND import_id IS NOT NULL"
        " AND import_id NOT IN (SELECT id FROM imports) LIMIT 1",
        (run_id,),
    ).fetchone()
    if orphan is not None:
        raise Damaged(
            f"damaged window {orphan[0]!r} in the database: its import {shown_value(orphan[1])} is not in it"
        )


def _read(db: sqlite3.Connection, where: str, params: tuple[str, ...]) -> list[Window]:
    rows = db.execute(f"SELECT {_COLUMNS} FROM windows WHERE {where} ORDER BY t_start_ns, id", params)
    sources: dict[str, dict[str, Any]] = {}  # windows whose source reads the same share one (a run's
    # imported or synthetic windows mostly do: 10 000 copies of one small dict were 3 MB of an export)
    return [_window(row, sources) for row in rows]


def insert_one(db: sqlite3.Connection, run_id: str, window: Window) -> None:
    """``window`` as a direct (not imported) row, inside the caller's transaction (a mark that ends)."""
    db.execute(_INSERT, (run_id, None, *_row(window)))


def _row(w: Window) -> tuple[Any, ...]:
    values = [getattr(w, name) for name in WINDOW_FIELDS]
    values[_SOURCE] = json.dumps(w.source)
    return tuple(values)


def _window(row: tuple[Any, ...], sources: dict[str, dict[str, Any]]) -> Window:
    """A stored window, checked by the rules a window is taken by (types, ``check_measured``; each distinct
    source by ``check_source`` once): a row this store would never have written (a file edited or damaged)
    is ``Damaged`` naming it, not a traceback, a window measured backwards, -50 tokens in a J/token or a
    window left out of every figure by a phase no window can have."""
    values = list(row)
    text = values[_SOURCE]
    source, problem = sources.get(text), None
    if source is None:
        try:
            source = json.loads(text)
        except (TypeError, ValueError):
            source = None
        try:
            if isinstance(source, dict):
                check_source(source)
        except WindowError as exc:  # a number past 64 bits, a NaN: stored before windows were held to it
            problem = str(exc)
        if isinstance(source, dict) and problem is None:
            sources[text] = source
    values[_SOURCE] = source
    window = Window(*values)
    if problem is None:
        problem = _type_problem(window) if isinstance(source, dict) else "its source is not a JSON object"
    if problem is None and not window.t_start_ns <= window.t_end_ns:
        problem = "it ends before it starts"
    if problem is None:
        try:
            check_measured(window)
            return window
        except WindowError as exc:
            problem = str(exc)
    raise Damaged(f"damaged window {window.id!r} in the database: {problem}")


def _type_problem(window: Window) -> str | None:
    """Which column does not hold what the store writes there, if one does not (its source aside)."""
    for name in _INTEGERS:
        value = getattr(window, name)
        if (value is not None or name in _NEEDED) and not is_integer(value):
            return f"{name} {shown_value(value)} is not an integer"
    for name in _TEXTS:
        value = getattr(window, name)
        if (value is not None or name in _NEEDED) and not isinstance(value, str):
            return f"{name} {shown_value(value)} is not text"
    return None
