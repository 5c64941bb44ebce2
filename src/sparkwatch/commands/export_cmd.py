"""`sparkwatch export --db PATH`: a run's export from a coordinator's SQLite file, with no coordinator running
(the file a standing coordinator keeps, or the one `sparkwatch run --db` leaves behind); with `--prometheus
URL` instead, from a Prometheus-compatible engine (commands/export_tsdb.py).

The export is made by the coordinator's own ``export_run`` over a read-only connection, so it is the export
``GET /v1/runs/ID/export`` answers, and the file is never changed. ``--gate-threshold`` and ``--scope``
recompute it with another method; the export's ``method`` says which was used. ``--series`` adds the plot
data the run report draws.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from sparkwatch.commands.export_flags import check_tsdb_args
from sparkwatch.commands.outcome import quality_line
from sparkwatch.commands.quality import JUDGED_FIELDS, judge
from sparkwatch.commands.series_flags import check_series_shown, wanted_series
from sparkwatch.commands.summary import summary_table
from sparkwatch.core.window_rows import WindowsTap
from sparkwatch.defaults import ScopeKind
from sparkwatch.outputs import check_output, database_files, print_export, write_export
from sparkwatch.sources import SourceError
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store, corrupt_or_none
from sparkwatch.store.run_rows import RunRow
from sparkwatch.window_spool import WindowSpool

#: Run ids named in a refusal of an unknown one (the newest first).
NAMED_RUNS = 5


class ExportCommandError(Exception):
    """What the database cannot give (no runs, no such run, unreadable rows): one line."""


def cmd_export(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_tsdb_args(args, parser)
    check_series_shown(args, parser)
    if args.output is not None:
        check_output(args.output, _read_by(args))
    # the windows, encoded as the digest's pass makes them: neither the file nor the quality line makes
    # them again (each pass was ~0.6 s of an 8 h run's 10 000 windows)
    prints = not args.table and (args.json or args.output is None)
    with WindowSpool(keep=JUDGED_FIELDS, text=prints or args.output is not None) as spool:
        export = _export(args, spool)
        if args.output is not None:
            write_export(args.output, export, spool)
            _say(f"export written to {args.output}")
        # judged as `run` judges its own (what only `run` knew, a node behind at its end, aside): an all-n/a
        # export (a run with no windows in scope) says so instead of being written in silence
        quality = quality_line(judge(export, windows=spool.kept(len(export["windows"]))))
        if args.table:
            print(summary_table(export))
            print(quality)
        else:
            _say(quality)
            if prints:
                print_export(export, sys.stdout, spool)
    return 0


def _export(args: argparse.Namespace, tap: WindowsTap) -> dict[str, Any]:
    """The export from the database or the engine, ``tap`` handed its windows as they are made."""
    if args.prometheus is not None:
        try:
            # imported here: the engine's client and aiohttp were half of `export --db`'s start-up
            from sparkwatch.commands.export_tsdb import tsdb_export  # noqa: PLC0415

            return tsdb_export(args, _say, wanted_series(args), windows_tap=tap)
        except SourceError as exc:
            raise ExportCommandError(str(exc)) from None
    return offline_export(
        args.db,
        args.run,
        gate_threshold=args.gate_threshold,
        scope=cast(ScopeKind | None, args.scope),
        phases=args.phases,
        now_ns=time.time_ns,
        say=_say,
        series_buckets=wanted_series(args),
        windows_tap=tap,
    )


def _read_by(args: argparse.Namespace) -> dict[Path, str]:
    """The files the export reads, which ``-o`` may not replace: the database (with its WAL and index), or
    the windows file and the engine's and the coordinator's credentials."""
    if args.db is not None:
        return database_files(args.db)
    named = [
        (args.windows, "the windows file (--windows)"),
        (args.bearer_token_file, "the engine's token file (--bearer-token-file)"),
        (args.basic_auth_password_file, "the engine's password file (--basic-auth-password-file)"),
    ]
    reads = {path.resolve(): what for path, what in named if path is not None}
    from sparkwatch.client import token_file_read  # noqa: PLC0415  (aiohttp: not for --db)

    return reads | token_file_read(args.token_file)


def offline_export(
    path: Path,
    wanted: str | None,
    *,
    gate_threshold: float | None,
    scope: ScopeKind | None,
    now_ns: Callable[[], int],
    say: Callable[[str], None],
    phases: Sequence[str] | None = None,
    series_buckets: int | None = None,
    windows_tap: WindowsTap | None = None,
) -> dict[str, Any]:
    """The export of run ``wanted`` (else the newest) in the database at ``path``, for the nodes its last
    coordinator had, with the run's method unless ``gate_threshold``, ``scope`` or ``phases`` replace it;
    with its ``series`` block in ``series_buckets`` buckets when given."""
    store = Store.read_only(path)
    try:
        for run_id, damaged in store.damaged_runs().items():  # the newest may be one of them: no guess
            if wanted == run_id:
                raise damaged
            if wanted is None:
                raise ExportCommandError(
                    f"{damaged}; which run is the newest is unknown: name the run to export"
                )
        run, which = choose_run(store.runs(), wanted, path)
        say(f"exporting run {run.id} ({run.name}) from {path}" + (f", {which} in it" if which else ""))
        for note in _notes(run, gate_threshold, scope, phases):
            say(note)
        nodes = store.node_names()
        return export_run(
            store,
            run.id,
            nodes,
            now_ns,
            gate_threshold=gate_threshold,
            scope=scope,
            phases=phases,
            series_buckets=series_buckets,
            windows_tap=windows_tap,
        )
    except sqlite3.DatabaseError as exc:  # a damaged file: what SQLite says of it, and how to recover it
        corrupt = corrupt_or_none(exc, path)
        raise corrupt or ExportCommandError(f"cannot read {path}: {exc}") from None
    finally:
        store.close()


def _notes(
    run: RunRow, gate_threshold: float | None, scope: ScopeKind | None, phases: Sequence[str] | None
) -> list[str]:
    """What makes this export differ from the one the coordinator gave (or would give) for the run."""
    notes = []
    if run.open:
        notes.append(
            f"run {run.id} was not ended (it is still open, or its coordinator stopped first): exported up to"
            " now"
        )
    if gate_threshold is not None or scope is not None or phases is not None:
        gate = run.gate_threshold if gate_threshold is None else gate_threshold
        used = [f"gate {gate:g}", f"scope {scope or run.scope}"]
        own = [f"gate {run.gate_threshold:g}", f"scope {run.scope}"]
        if phases is not None:
            used.append(f"phases {','.join(phases)}")
            own.append(f"phases {','.join(run.phases)}")
        listed = f"{', '.join(used[:-1])} and {used[-1]}"
        notes.append(f"recomputed with {listed} (the run's own: {', '.join(own)})")
    return notes


def choose_run(runs: Sequence[RunRow], wanted: str | None, path: Path) -> tuple[RunRow, str]:
    """The run asked for, else the newest (latest start) with words for which one that was."""
    newest_first = sorted(runs, key=lambda r: r.t_start_ns, reverse=True)
    if wanted is None:
        if not newest_first:
            raise ExportCommandError(f"{path} holds no runs")
        which = "the only run" if len(runs) == 1 else f"the newest of {len(runs)} runs"
        return newest_first[0], which
    for run in newest_first:
        if run.id == wanted:
            return run, ""
    known = ", ".join(r.id for r in newest_first[:NAMED_RUNS]) or "none"
    more = f" and {len(runs) - NAMED_RUNS} more" if len(runs) > NAMED_RUNS else ""
    raise ExportCommandError(f"no run {wanted} in {path} (its runs, newest first: {known}{more})")


def _say(line: str) -> None:
    print(f"sparkwatch: {line}", file=sys.stderr)
