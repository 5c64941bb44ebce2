"""The handlers of the subcommands that start or embed the stack: `coordinator`, `proxy`, `sim-model`,
`demo`, `hardware` and `nodes` (imported only when one of them is given: cli_commands.py; `run`'s is in
cli_run.py)."""

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
from sparkwatch.commands.demo import DemoOptions, run_demo
from sparkwatch.commands.embedded import nodes_now
from sparkwatch.commands.hardware import cluster_hardware, simulated_nodes
from sparkwatch.commands.interrupts import term_as_interrupt
from sparkwatch.commands.nodes_check import check_cluster, check_engine, render
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


def cmd_hardware(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    if args.output is not None:  # before every node is dialled; never over the files it reads
        nodes_file = (
            {} if args.nodes is None else {**named_files(args.nodes), args.nodes: "the nodes file (--nodes)"}
        )
        check_output(args.output, nodes_file | token_file_read(None if args.nodes else args.token_file))
    target = target_of(args, embeds=True) if args.nodes is None else None

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
    target = target_of(args, embeds=True) if standing else None
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
