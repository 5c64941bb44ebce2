"""Why the store refuses windows and marks, in words a client can act on: the ids a batch repeats or the run
holds already (never SQLite's constraint text), and what an ended run no longer takes.

An ended run takes windows only inside its span, widened by ``ENDED_RUN_SLACK_NS``: a harness's result file
imported after `sparkwatch run` ended the run (`sparkwatch import … --run ID`) describes requests made
while it ran, but a window from after its end (a proxy still forwarding, a benchmark started later, a
mistyped run id) does not belong to it. No mark begins or ends in an ended run: a mark is stamped now.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence

from sparkwatch.core.id_lists import IDS_NAMED, name_ids
from sparkwatch.core.stamps import utc_stamp
from sparkwatch.core.windows import COORDINATOR_CLOCK, SPAN_SLACK_NS, Window, outside_span
from sparkwatch.store.tx import DuplicateIds, NotFound, RunEnded, StoreError

#: How far outside an ended run's span a window may lie (core.windows says why).
ENDED_RUN_SLACK_NS = SPAN_SLACK_NS
#: An unfinished import untouched this long is dropped when the run's next import begins (its client died).
STALE_IMPORT_NS = 600 * 1_000_000_000
#: Ids per query when looking up which of a batch's ids a run holds (SQLite's variable limit).
LOOKUP_IDS = 500


def run_span(db: sqlite3.Connection, run_id: str) -> tuple[int, int | None]:
    """The run's start and end (``None`` while it is open)."""
    row = db.execute(
        "SELECT t_start_ns, t_end_ns FROM runs WHERE id = ? AND deleted_at_ns IS NULL", (run_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no run {run_id}")
    return int(row[0]), None if row[1] is None else int(row[1])


def ended_at(t_ns: int) -> str:
    """A run's end as people read it (UTC, milliseconds), with its ns value."""
    return f"{utc_stamp(t_ns)} (t_end_ns {t_ns})"


def ended(run_id: str, t_end_ns: int, what: str) -> RunEnded:
    return RunEnded(f"run {run_id} ended at {ended_at(t_end_ns)}; {what}", t_end_ns)


def refuse_repeats(run_id: str, windows: Sequence[Window]) -> None:
    """A batch that names one id twice is refused whole, naming the repeated ids."""
    counts = Counter(w.id for w in windows)
    repeated = [i for i, n in counts.items() if n > 1]
    if repeated:
        verb = "appears" if len(repeated) == 1 else "appear"
        message = f"{name_ids(repeated, quoted=True)} {verb} more than once in the batch"
        raise _duplicates(run_id, message, repeated)


def stored_duplicates(
    db: sqlite3.Connection, run_id: str, ids: Sequence[str], import_id: str | None = None
) -> StoreError:
    """The refusal for a batch that collided with windows the run holds (stored, or staged by an import):
    which of ``ids`` those are, looked up after the batch was taken back."""
    taken: set[str] = set()
    staged: dict[str, int] = {}  # unfinished imports holding some of them, with when each was last written
    for start in range(0, len(ids), LOOKUP_IDS):
        chunk = ids[start : start + LOOKUP_IDS]
        rows = db.execute(
            "SELECT w.id, i.id, i.t_touched_ns FROM windows w LEFT JOIN imports i"
            " ON i.id = w.import_id AND i.committed = 0"
            f" WHERE w.run_id = ? AND w.id IN ({', '.join('?' * len(chunk))})",
            (run_id, *chunk),
        )
        for window_id, staging, touched_ns in rows:
            taken.add(str(window_id))
            if staging is not None and staging != import_id:  # another import: not the batch's own
                staged[str(staging)] = int(touched_ns)
    found = [i for i in dict.fromkeys(ids) if i in taken]
    if not found:  # the windows it collided with went meanwhile (an import aborted)
        return StoreError(
            f"window ids must be unique within run {run_id}: the batch collided with windows that are gone"
            " now; nothing was stored, send it again"
        )
    verb = "is" if len(found) == 1 else "are"
    message = f"{name_ids(found, quoted=True)} {verb} already in it (stored, or staged by an import)"
    if staged:  # most likely an import whose client died (a killed `sparkwatch import`) and its retry
        first, touched = min(staged.items(), key=lambda item: item[1])
        message += (
            f"; {len(staged)} unfinished import(s) stage some, e.g. {first}, last written at"
            f" {utc_stamp(touched)}: it is dropped when an import begins {STALE_IMPORT_NS // 10**9 // 60} min"
            f" after that, or now by DELETE /v1/runs/{run_id}/imports/{first}"
        )
    return _duplicates(run_id, message, found)


def _duplicates(run_id: str, message: str, ids: Sequence[str]) -> DuplicateIds:
    text = f"window ids must be unique within run {run_id}: {message}"
    return DuplicateIds(text, list(ids[:IDS_NAMED]), len(ids))


def check_span(db: sqlite3.Connection, run_id: str, windows: Sequence[Window]) -> int | None:
    """Refuse windows an ended run does not take; returns the end it checked against (``None``: open)."""
    start, end = run_span(db, run_id)
    if end is not None:
        outside = outside_span(windows, start, end)
        if outside:
            ours = any(w.source.get("clock") == COORDINATOR_CLOCK for w in outside)
            raise _outside(run_id, (start, end), [w.id for w in outside], len(outside), ours=ours)
    return end


def check_staged_span(db: sqlite3.Connection, run_id: str, import_id: str) -> int | None:
    """:func:`check_span` for the windows an import has staged (when it is committed)."""
    start, end = run_span(db, run_id)
    if end is not None:
        # core.windows.outside_span in SQL (its slack for a window stamped on our clock: our_slack_ns)
        ours = (
            "json_extract(source, '$.clock') = ? AND t_start_ns > ? + CASE WHEN json_type(source,"
            " '$.clock_uncertainty_ns') = 'integer' AND json_extract(source, '$.clock_uncertainty_ns') >= 0"
            " THEN MIN(json_extract(source, '$.clock_uncertainty_ns'), ?) ELSE 0 END"
        )
        where = f"import_id = ? AND (t_start_ns < ? OR t_end_ns > ? OR ({ours}))"
        args = (
            import_id,
            start - ENDED_RUN_SLACK_NS,
            end + ENDED_RUN_SLACK_NS,
            COORDINATOR_CLOCK,
            end,
            ENDED_RUN_SLACK_NS,
        )
        count, ours_count = db.execute(
            f"SELECT COUNT(*), COUNT(CASE WHEN json_extract(source, '$.clock') = ? THEN 1 END) FROM windows"
            f" WHERE {where}",
            (COORDINATOR_CLOCK, *args),
        ).fetchone()
        if count:
            rows = db.execute(
                f"SELECT id FROM windows WHERE {where} ORDER BY rowid LIMIT ?", (*args, IDS_NAMED)
            )
            ids = [str(r[0]) for r in rows]
            raise _outside(run_id, (start, end), ids, int(count), ours=bool(ours_count))
    return end


def _outside(run_id: str, span: tuple[int, int], ids: Sequence[str], count: int, *, ours: bool) -> RunEnded:
    """``ours``: a window refused is stamped on the coordinator's clock (its own rule is said then)."""
    (start, end), slack_s = span, ENDED_RUN_SLACK_NS / 1e9
    verb = "lies" if count == 1 else "lie"
    rule = " (none that starts after its end on the coordinator's clock)" if ours else ""
    return ended(
        run_id,
        end,
        f"it takes only windows inside its span [{start}, {end}], give or take {slack_s:g} s{rule}, and"
        f" {name_ids(ids, count, quoted=True)} {verb} outside it",
    )
