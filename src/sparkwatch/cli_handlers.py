"""The handlers of the light subcommands (`schema`, `import`, `attach`): each module of handlers is imported
only when one of its commands is given (cli_commands.py), so these never load the coordinator's stack."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from sparkwatch.client import CoordinatorClient, CoordinatorTarget, Imported
from sparkwatch.commands.anchor_flag import anchor_of
from sparkwatch.commands.attach import attach, export_flags
from sparkwatch.core.export_schema import run_schema
from sparkwatch.importers import read_windows
from sparkwatch.outputs import check_output


def target_of(args: argparse.Namespace) -> CoordinatorTarget:
    return CoordinatorTarget.resolve(args.coordinator, args.token_file)


def cmd_schema(_args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    print(json.dumps(run_schema(), indent=2))
    return 0


def cmd_import(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    windows = read_windows(args.format, args.file, clock_anchor=anchor_of(args, parser, [args.format]))
    target = target_of(args)

    async def post() -> Imported:
        async with CoordinatorClient(target) as client:
            return await client.import_windows(args.run, windows)

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
    if args.output is not None:  # refused as every command refuses it, before anything is read
        check_output(args.output, {args.export: "the export"})
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
