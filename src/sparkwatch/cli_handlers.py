"""The handlers of the light subcommands (`schema`, `import`, `attach`): each module of handlers is imported
only when one of its commands is given (cli_commands.py), so these never load the coordinator's stack."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget, Imported
from sparkwatch.commands.anchor_flag import anchor_of
from sparkwatch.commands.attach import attach, export_flags
from sparkwatch.commands.interrupts import term_as_interrupt
from sparkwatch.core.export_schema import run_schema
from sparkwatch.importers import read_windows
from sparkwatch.outputs import check_output


def target_of(args: argparse.Namespace, *, embeds: bool = False) -> CoordinatorTarget:
    """``embeds``: the command could start its own coordinator instead (client.CoordinatorTarget)."""
    return CoordinatorTarget.resolve(args.coordinator, args.token_file, embeds=embeds)


def cmd_schema(_args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    print(json.dumps(run_schema(), indent=2))
    return 0


def cmd_import(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The file's windows into the run, all or none. Each must lie inside the run, give or take
    ``SPAN_SLACK_NS``, as `run --import` and an ended run hold them: an open run took a result file an
    earlier run left behind, and measured its windows on the samples of a time before the run."""
    term_as_interrupt()  # a SIGTERM (timeout, CI) unwinds as Ctrl-C does: the staged import is aborted
    anchor = anchor_of(args, parser, [args.format])
    read_windows(args.format, args.file, clock_anchor=anchor)  # a wrong format or file, said before asking
    target = target_of(args)

    async def post() -> Imported:
        async with CoordinatorClient(target) as client:
            run = await client.run(
                args.run
            )  # an ended run holds windows to its span itself (a 409 naming it)
            since_ns = run["t_start_ns"] if run["t_end_ns"] is None else None
            windows = read_windows(args.format, args.file, clock_anchor=anchor, since_ns=since_ns)
            try:
                return await client.import_windows(args.run, windows)
            except CoordinatorError as exc:  # a refusal of the file's windows names the file, as ours do
                if not exc.refused:
                    raise
                said = f"{args.file} ({args.format}): nothing imported: {exc}"
                raise CoordinatorError(said, exc.status, exc.code) from None

    done = asyncio.run(post())
    if done.note is not None:
        print(f"sparkwatch: warning: {done.note}", file=sys.stderr)
    print(f"imported {done.count} window(s) from {args.file} ({args.format}) into run {args.run}")
    return 0


def cmd_attach(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.lmx_flags:
        if args.output is not None:
            parser.error("-o/--output: --lmx-flags prints to stdout and writes no file")
        print(export_flags(args.export, args.force))
        return 0
    # refused as every command refuses it, before anything is read: the file written (the payload, edited
    # in place, or -o) is never the export (before, --lmx run.json edited the export itself, exit 0)
    written, flag = (args.output, "-o") if args.output is not None else (args.lmx, "--lmx")
    if args.output is not None or args.lmx.exists():  # a payload that is not there: attach says so
        check_output(written, {args.export: "the export"}, flag=flag)
    values = attach(args.export, args.lmx, args.force, args.output)
    watts = ", ".join(json.dumps(w) for w in values["gpuPowerWatts"])  # as the payload now holds them
    peak = values.get("peakVramGb")
    peak_text = (
        f"peakVramGb {json.dumps(peak)}"
        if peak is not None
        else "peakVramGb left as it was (unknown in the export)"
    )
    print(f"attached to {args.output or args.lmx}: gpuPowerWatts [{watts}], {peak_text}")
    return 0
