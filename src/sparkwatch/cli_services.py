"""The handlers of the subcommands that start or embed the stack: `coordinator`, `proxy`, `sim-model`,
`demo`, `run`, `hardware` and `nodes` (imported only when one of them is given: cli_commands.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkwatch.cli_handlers import target_of
from sparkwatch.client import CoordinatorClient, CoordinatorTarget, token_file_read
from sparkwatch.commands.anchor_flag import anchor_of
from sparkwatch.commands.demo import DemoOptions, run_demo
from sparkwatch.commands.embedded import nodes_now
from sparkwatch.commands.hardware import cluster_hardware, simulated_nodes
from sparkwatch.commands.interrupts import term_as_interrupt
from sparkwatch.commands.nodes_check import check_cluster, check_engine, render
from sparkwatch.commands.run import run_command
from sparkwatch.commands.run_options import DEFAULT_PROXY_LISTEN, RunOptions, parse_imports
from sparkwatch.commands.sim_drive import DrivenAgents
from sparkwatch.commands.sim_model import SimModelSpec, serve_sim_model
from sparkwatch.coordinator.remote_write.spec import RemoteWriteError, RemoteWriteSpec
from sparkwatch.coordinator.serve import serve
from sparkwatch.defaults import ENV_COORDINATOR
from sparkwatch.links.nodes_named import named_files
from sparkwatch.outputs import check_output, write_text_atomically
from sparkwatch.proxy.proxy import ProxyConfig
from sparkwatch.proxy.serve import serve_proxy
from sparkwatch.settings import load_settings


def cmd_coordinator(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    return asyncio.run(
        serve(
            args.nodes,
            args.db,
            args.listen,
            args.token_file,
            args.insecure_no_auth,
            retain_idle_s=args.retain_idle,
            remote_write=_remote_write(args),
        )
    )


def _remote_write(args: argparse.Namespace) -> RemoteWriteSpec | None:
    auth = (
        args.remote_write_bearer_token_file,
        args.remote_write_basic_auth_user,
        args.remote_write_basic_auth_password_file,
    )
    if args.remote_write is None:
        if any(a is not None for a in auth):
            raise RemoteWriteError("the --remote-write-* auth flags need --remote-write URL")
        return None
    return RemoteWriteSpec(args.remote_write, *auth)


def cmd_demo(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    check_output(args.output, json_on_stdout=args.json)
    opts = DemoOptions(
        nodes=args.nodes,
        max_tokens=args.max_tokens,
        tokens_per_s=args.tokens_per_s,
        output=args.output,
        strict=args.strict or load_settings().strict,
        json_out=args.json,
        report=args.report,
    )
    term_as_interrupt()
    return asyncio.run(run_demo(opts))


def cmd_proxy(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    host, port = args.listen
    target = target_of(args) if args.run else None
    config = ProxyConfig(args.upstream, warmup=args.warmup)
    if args.spill is not None and not args.run:
        parser.error("--spill keeps windows that --run ID did not take: without --run they are printed")
    if args.run:
        spill = args.spill or Path(f"sparkwatch-{args.run}-unsent-windows.json")
        check_output(spill)
        return asyncio.run(serve_proxy(host, port, config, target, args.run, spill=spill))
    return asyncio.run(serve_proxy(host, port, config, target, None))


def cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        parser.error(
            "run: give the benchmark command after --, e.g. sparkwatch run --nodes n.toml -- CMD ARGS"
        )
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
        target=None if args.nodes else target_of(args),
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
    term_as_interrupt()
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


def cmd_hardware(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    if args.output is not None:  # before every node is dialled; never over the files it reads
        nodes_file = (
            {} if args.nodes is None else {**named_files(args.nodes), args.nodes: "the nodes file (--nodes)"}
        )
        check_output(args.output, nodes_file | token_file_read(None if args.nodes else args.token_file))
    target = target_of(args) if args.nodes is None else None

    async def settle(client: CoordinatorClient) -> list[dict[str, object]]:
        return await client.wait_for_hellos(timeout_s=args.wait)

    with _links_quiet(args, target is None, logging.WARNING):  # a link coming up is no news in a record
        nodes = asyncio.run(nodes_now(target, args.nodes, settle))
    record = cluster_hardware(nodes)
    simulated = simulated_nodes(nodes)
    if simulated:
        print(
            f"sparkwatch: warning: simulated node(s) {', '.join(simulated)} (--backend sim): the GPU,"
            " driver and memory in this record are the simulator's, the CPU, OS and product name the"
            " host's; it describes no real machine",
            file=sys.stderr,
        )
    for node in nodes:  # a standing coordinator keeps a node's last hello while its agent is away
        if not node.get("connected"):
            print(
                f"sparkwatch: warning: node {node['node']} is not connected: its last hello is used",
                file=sys.stderr,
            )
    text = json.dumps(record, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text_atomically(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


#: The links' state changes: what `nodes check` prints as a PROBLEM per node once it has waited.
LINK_STATE_LOGGER = "sparkwatch.links.state"


@contextlib.contextmanager
def _links_quiet(args: argparse.Namespace, embedded: bool, below: int) -> Iterator[None]:
    """A command's own (embedded) coordinator's link-state lines below ``below``, kept for --log-level
    debug: the command says what it found of each node itself."""
    links = logging.getLogger(LINK_STATE_LOGGER)
    level = links.level
    if embedded and args.log_level.lower() != "debug":
        links.setLevel(below)
    try:
        yield
    finally:
        links.setLevel(level)


def cmd_nodes(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    standing = args.nodes is None and (args.coordinator or os.environ.get(ENV_COORDINATOR))
    target = target_of(args) if standing else None
    with _links_quiet(args, not standing, logging.CRITICAL):  # a node that is down: said once, as shown
        return _check_nodes(args, target)


def _check_nodes(args: argparse.Namespace, target: CoordinatorTarget | None) -> int:
    async def settle(client: CoordinatorClient) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        deadline = time.monotonic() + args.wait  # one --wait for the nodes and the engine together
        nodes = await client.wait_for_clocks(timeout_s=args.wait)
        return nodes, await client.wait_for_engine(timeout_s=max(0.0, deadline - time.monotonic()))

    async def now(client: CoordinatorClient) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        return await client.nodes(), await client.wait_for_engine(timeout_s=args.wait)  # a fresh coordinator

    nodes, engine = asyncio.run(nodes_now(target, args.nodes, settle, now=now, with_engine=True))
    checks, engine_problems = check_cluster(nodes), check_engine(engine)
    ok = not engine_problems and all(not c.problems for c in checks)
    if args.json:
        print(json.dumps({"nodes": [c.to_json() for c in checks], "engine": engine, "ok": ok}))
    else:
        print(render(checks, engine))
    return 0 if ok else 1


def cmd_sim_model(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    host, port = args.listen
    if args.agent_token_file is not None and not args.agents:
        parser.error("--agent-token-file is the token of the --agents it drives: give --agents")
    agents = DrivenAgents(args.agents, args.agent_token_file)
    return asyncio.run(serve_sim_model(host, port, SimModelSpec(tokens_per_s=args.tokens_per_s), agents))
