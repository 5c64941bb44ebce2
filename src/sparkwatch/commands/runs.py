"""`sparkwatch runs`: a coordinator's runs by hand, through its API — list, show, open, end, export, mark,
delete.

For scripts that measure without `sparkwatch run`: ``ID=$(sparkwatch runs open)`` prints the id alone, and
the rest of what a person reads goes to stderr. A refusal is the client's one line (the URL and the API's
reason) and exit code 2. ``delete`` takes an ended run, or a damaged one (docs/cli.md says why it is safe).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sparkwatch import STARTED_MONO_NS
from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget, token_file_read
from sparkwatch.client_waits import end_wait_s
from sparkwatch.commands.series_flags import check_series_shown, wanted_series
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.stamps import utc_stamp
from sparkwatch.defaults import MAX_MARK_AGE_NS, OPEN_RUN_NOTE, UTIL_SOURCE
from sparkwatch.outputs import check_output, command_line, print_export, shown, size_text, write_export

Action = Callable[[CoordinatorClient, argparse.Namespace], Awaitable[int]]

#: How long one request may take; an export of a long run is computed while the client waits.
REQUEST_TIMEOUT_S = 30.0
EXPORT_TIMEOUT_S = 600.0
#: `GET /v1/runs` has no window counts: the listing asks each run, this many at a time.
PARALLEL_GETS = 16
NAME_CHARS = 40


def cmd_runs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.runs_command == "mark" and args.event == "end" and args.phase is not None:
        parser.error("argument --phase: only with begin (a mark ends in the phase it began in)")
    if args.runs_command == "export":
        check_series_shown(args, parser)
    if args.runs_command == "export" and args.output is not None:
        check_output(args.output, token_file_read(args.token_file))
    target = CoordinatorTarget.resolve(args.coordinator, args.token_file)
    timeout_s = EXPORT_TIMEOUT_S if args.runs_command == "export" else REQUEST_TIMEOUT_S
    action = ACTIONS[args.runs_command]

    async def go() -> int:
        async with CoordinatorClient(target, timeout_s) as client:
            return await action(client, args)

    return asyncio.run(go())


async def _list(client: CoordinatorClient, args: argparse.Namespace) -> int:
    answer = await client.runs()
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    runs = answer["runs"]
    gate = asyncio.Semaphore(PARALLEL_GETS)

    async def count(run_id: str) -> int:
        async with gate:
            return int((await client.run(run_id))["windows"])

    counts = await asyncio.gather(*(count(r["id"]) for r in runs))
    damaged = answer.get("damaged", [])  # an older coordinator: none said
    if runs or not damaged:
        print(runs_table(runs, counts) if runs else f"no runs on {client.target.url}")
    for run in damaged:
        remedy = f"mend the row, or remove the run: sparkwatch runs delete {shown(run['id'])}"
        print(f"sparkwatch: {shown(run['reason'])} ({remedy})", file=sys.stderr)
    return 0


async def _show(client: CoordinatorClient, args: argparse.Namespace) -> int:
    run = await client.run(args.run_id)
    print(json.dumps(run, indent=2) if args.json else run_details(run))
    return 0


async def _open(client: CoordinatorClient, args: argparse.Namespace) -> int:
    run = await client.create_run(args.name, args.interval, args.scope, args.gate_threshold, args.phases)
    print(run["id"])
    print(
        f"sparkwatch: run {run['id']} ({run['name']}) open on {client.target.url}, sampled every"
        f" {run['interval_s']:g} s; end it with: sparkwatch runs end {run['id']}",
        file=sys.stderr,
    )
    return 0


async def _end(client: CoordinatorClient, args: argparse.Namespace) -> int:
    run = await client.end_run(args.run_id)
    # then waits for every node's samples and meter reading up to it (the end is on the coordinator's clock,
    # as are the nodes' corrected stamps), so an export made right after covers the run's last moments; a
    # node or meter still behind after end_wait_s is named in a warning, and the export says what it lacks
    await client.wait_caught_up(run["t_end_ns"], end_wait_s(await client.nodes()), meters=True)
    took_s = (run["t_end_ns"] - run["t_start_ns"]) / 1e9
    print(f"run {run['id']} ({run['name']}) ended after {took_s:.1f} s")
    dropped = run.get("dropped_marks")
    if isinstance(dropped, list) and dropped:
        names = name_ids([str(n) for n in dropped])  # 2000 marks were one 24 kB line
        print(f"sparkwatch: warning: mark(s) still open, dropped without a window: {names}", file=sys.stderr)
    return 0


async def _export(client: CoordinatorClient, args: argparse.Namespace) -> int:
    # the judging stack (and numpy under it) only here: a script's `runs mark` per request starts light
    from sparkwatch.commands.outcome import quality_line  # noqa: PLC0415
    from sparkwatch.commands.quality import judge  # noqa: PLC0415
    from sparkwatch.commands.summary import summary_table  # noqa: PLC0415

    export = await client.export(args.run_id, wanted_series(args))
    if OPEN_RUN_NOTE in export["run"].get("notes", ()):
        print(f"sparkwatch: warning: run {args.run_id} is still open: exported up to now", file=sys.stderr)
    if args.output is not None:
        write_export(args.output, export)
        print(f"sparkwatch: export of run {args.run_id} written to {args.output}", file=sys.stderr)
    elif not args.table:
        print_export(export, sys.stdout)
    quality = quality_line(judge(export))
    if args.table:  # as `export --db --table` prints it
        print(summary_table(export))
        print(quality)
    else:
        print(f"sparkwatch: {quality}", file=sys.stderr)  # as `export --db` says it
    return 0


async def _mark(client: CoordinatorClient, args: argparse.Namespace) -> int:
    # an end is dated back to when this process started, right after the script's step it closes ended; a
    # begin is stamped on arrival, right before the next step starts (this process ends first)
    age_ns = min(time.monotonic_ns() - STARTED_MONO_NS, MAX_MARK_AGE_NS) if args.event == "end" else None
    try:
        answer = await client.mark(args.run_id, args.name, args.event, args.phase, age_ns)
    except CoordinatorError as exc:  # a coordinator older than age_ns refuses the key: stamped on arrival
        if age_ns is None or exc.status != 400 or "age_ns" not in str(exc):
            raise
        answer = await client.mark(args.run_id, args.name, args.event, args.phase)
    if args.event == "begin":
        print(f"mark {answer['name']} ({args.phase or 'timed'}) begun in run {args.run_id}")
    else:
        took_s = (answer["t_end_ns"] - answer["t_start_ns"]) / 1e9
        print(f"mark {answer['name']} ended: a window of {took_s:.3f} s in run {args.run_id}")
    return 0


async def _delete(client: CoordinatorClient, args: argparse.Namespace) -> int:
    answer = await client.delete_run(args.run_id)
    windows = answer["windows"]
    print(f"deleted run {answer['deleted']} ({windows} window{'' if windows == 1 else 's'})")
    return 0


ACTIONS: dict[str, Action] = {
    "list": _list,
    "show": _show,
    "open": _open,
    "end": _end,
    "export": _export,
    "mark": _mark,
    "delete": _delete,
}


def runs_table(runs: Sequence[dict[str, Any]], windows: Sequence[int]) -> str:
    """One line per run (as ``GET /v1/runs`` lists them, oldest first), times in UTC, with the size of the
    samples its span holds."""
    rows = [("id", "name", "state", "start (UTC)", "end (UTC)", "windows", "samples")]
    for run, count in zip(runs, windows, strict=True):
        name = shown(run["name"])
        name = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"
        state = "open" if run["open"] else "ended"
        end = "-" if run["t_end_ns"] is None else utc(run["t_end_ns"])
        size = size_text(run["size_bytes"]) if "size_bytes" in run else "-"  # an older coordinator: unknown
        rows.append((run["id"], name, state, utc(run["t_start_ns"]), end, str(count), size))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:  # every column flush left but the count and the size
        cells = [cell.ljust(width) for cell, width in zip(row[:-2], widths[:-2], strict=True)]
        lines.append("  ".join([*cells, row[-2].rjust(widths[-2]), row[-1].rjust(widths[-1])]))
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def run_details(run: dict[str, Any]) -> str:
    """``GET /v1/runs/ID`` for a person: what the run measures, when, and what it wrapped."""
    if run["t_end_ns"] is None:
        end = "- (open)"
    else:
        end = f"{utc_stamp(run['t_end_ns'])} ({(run['t_end_ns'] - run['t_start_ns']) / 1e9:.1f} s)"
    command = run.get("command")
    wrapped = "-" if not command else f"{command_line(command['argv'])} (exit code {command['exit_code']})"
    fields = [
        ("id", shown(run["id"])),
        ("name", shown(run["name"])),
        ("state", "open" if run["open"] else "ended"),
        ("start", utc_stamp(run["t_start_ns"])),  # as --start takes it (export --prometheus)
        ("end", end),
        ("interval", f"{run['interval_s']:g} s"),
        ("gate", f"{UTIL_SOURCE} >= {run['gate_threshold']:g}"),  # as the export and report name it
        ("scope", run["scope"]),
        ("phases", ", ".join(run.get("phases") or ["timed"])),
        ("nodes", _nodes_shown(run.get("nodes"))),
        ("windows", str(run["windows"])),
        ("command", wrapped),
    ]
    return "\n".join(f"{key:<9} {value}" for key, value in fields)


def _nodes_shown(nodes: Any) -> str:
    """The nodes a run measures: those it was opened with; a run stored before they were kept (or a
    coordinator that does not say) measures the coordinator's, whichever they are at its export."""
    if not isinstance(nodes, list):
        return "- (the coordinator's at its export: a run stored before its nodes were kept)"
    return ", ".join(shown(str(n)) for n in nodes) or "- (none)"


def utc(t_ns: int) -> str:
    return utc_stamp(t_ns, timespec="seconds")
