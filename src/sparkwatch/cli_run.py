"""The handler of `sparkwatch run`, apart from the other services' (cli_services.py): its flags are checked
before the embedded coordinator, the proxy's server and the links' stack are imported, so a mistake is said
in 0.7 s here, not 1.2 (benchmarks/cli_startup.py, "run, refused"); the client (aiohttp) and the importers
(numpy) it checks flags with still load."""

from __future__ import annotations

import argparse
import asyncio

from sparkwatch.client import CoordinatorTarget
from sparkwatch.commands.anchor_flag import anchor_of
from sparkwatch.commands.interrupts import term_as_interrupt
from sparkwatch.commands.run_options import DEFAULT_PROXY_LISTEN, RunOptions, check_options, parse_imports
from sparkwatch.settings import load_settings


def cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        parser.error("give the benchmark command after --, e.g. sparkwatch run --nodes n.toml -- CMD ARGS")
    if args.engine_metrics and args.nodes is None:
        parser.error(
            "--engine-metrics needs --nodes (an embedded coordinator); a standing coordinator scrapes the"
            " engine named by [engine] in its own nodes.toml"
        )
    if args.db is not None and args.nodes is None:
        parser.error(
            "--db keeps the embedded coordinator's database, so it needs --nodes; a standing coordinator"
            " (--coordinator) keeps its own"
        )
    if (unused := _unused_run_flag(args)) is not None:
        parser.error(unused)
    imports = parse_imports(args.imports)
    opts = RunOptions(
        command=command,
        nodes_file=args.nodes,
        target=None
        if args.nodes
        else CoordinatorTarget.resolve(args.coordinator, args.token_file, embeds=True),
        token_file=None if args.nodes else args.token_file,
        name=args.name,
        interval_s=args.interval,
        scope=args.scope,
        gate_threshold=args.gate_threshold,
        phases=args.phases,
        proxy_upstream=args.proxy_upstream,
        engine_metrics=args.engine_metrics,
        proxy_listen=args.proxy_listen or DEFAULT_PROXY_LISTEN,
        warmup=args.warmup,
        imports=imports,
        clock_anchor=anchor_of(args, parser, [fmt for fmt, _ in imports]),
        output=args.output,
        spill=args.spill,
        db=args.db,
        strict=args.strict or load_settings().strict,
        json_out=args.json,
        report=args.report,
        wait_nodes_s=args.wait,
    )
    check_options(opts)  # a nodes file that cannot be read, an -o over an input: before the stack loads
    term_as_interrupt()
    # the embedded coordinator, the proxy and the links: only once the flags have passed
    from sparkwatch.commands.run import run_command  # noqa: PLC0415

    return asyncio.run(run_command(opts))


def _unused_run_flag(args: argparse.Namespace) -> str | None:
    """A flag `run` would take and then not use: said, since whoever gave it expects it to act."""
    if args.nodes is not None and args.token_file is not None:
        return (
            "--token-file is a standing coordinator's API token (with --coordinator); the coordinator that"
            " --nodes embeds takes none"
        )
    if args.proxy_upstream is None:
        for flag, given in (("--warmup", args.warmup), ("--proxy-listen", args.proxy_listen)):
            if given:
                return f"{flag} is for the proxy, which runs only with --proxy-upstream URL"
        if args.spill is not None:
            return "--spill keeps the proxy's windows a run did not take: it needs --proxy-upstream URL"
    return None
