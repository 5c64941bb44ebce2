"""`sparkwatch` command line. Errors a user can cause end in one line and exit code 2."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkwatch import __version__
from sparkwatch.client import (
    DEFAULT_COORDINATOR,
    ENV_COORDINATOR,
    ENV_TOKEN_FILE,
    CoordinatorClient,
    CoordinatorError,
    CoordinatorTarget,
)
from sparkwatch.commands.attach import AttachError, attach
from sparkwatch.commands.demo import MAX_DEMO_NODES, DemoError, DemoOptions, run_demo
from sparkwatch.commands.hardware import HardwareError, cluster_hardware
from sparkwatch.commands.nodes_check import check_cluster, render
from sparkwatch.commands.run import (
    RunCommandError,
    RunOptions,
    check_output,
    parse_import,
    run_command,
    wait_for_clocks,
    wait_for_hellos,
    write_text_atomically,
)
from sparkwatch.commands.sim_model import SimModelSpec, serve_sim_model
from sparkwatch.coordinator.serve import running_coordinator, serve
from sparkwatch.core.export_schema import run_schema
from sparkwatch.importers import ClockAnchor, ImportFormatError, load_windows
from sparkwatch.links.nodes_file import NodesFileError, load_nodes
from sparkwatch.links.state import LinkError
from sparkwatch.proxy.proxy import ProxyConfig, ProxyConfigError
from sparkwatch.proxy.serve import serve_proxy
from sparkwatch.store import StoreError
from sparkwatch_agent.config import ConfigError, parse_listen
from sparkwatch_agent.shared.auth import AuthConfigError
from sparkwatch_agent.shared.http import BindError

PROG = "sparkwatch"
USER_ERRORS = (
    NodesFileError,
    StoreError,
    ConfigError,
    AuthConfigError,
    LinkError,
    CoordinatorError,
    BindError,
    ProxyConfigError,
    RunCommandError,
    ImportFormatError,
    AttachError,
    HardwareError,
    DemoError,
)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Measured GPU power and unified memory for LLM benchmark runs. "
            "The per-node agent is `sparkwatch-agent` (serve | stream --stdio | probe)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    coord = sub.add_parser("coordinator", help="collect samples from every node; serve the run API")
    coord.add_argument("--nodes", type=Path, required=True, metavar="FILE", help="nodes.toml")
    coord.add_argument("--db", type=Path, default=Path("sparkwatch.db"), metavar="PATH", help="SQLite file")
    coord.add_argument("--listen", default="127.0.0.1:8750", metavar="HOST:PORT")
    coord.add_argument("--token-file", type=Path, metavar="FILE", help="bearer token for the API (mode 0600)")
    coord.add_argument(
        "--insecure-no-auth", action="store_true", help="allow an off-loopback bind without token"
    )
    sub.add_parser("schema", help="print the JSON Schema of the sparkwatch.run/1 export")

    demo = sub.add_parser("demo", help="the whole measurement on a simulated GB10 cluster (no GPU needed)")
    demo.add_argument("--nodes", type=_node_count, default=4, metavar="N", help=f"1..{MAX_DEMO_NODES}")
    demo.add_argument("--max-tokens", type=_positive_int, default=256, metavar="N")
    demo.add_argument("--tokens-per-s", type=_positive_float, default=76.0, metavar="RATE")
    demo.add_argument("-o", "--output", type=Path, default=Path("run.json"), metavar="FILE")

    proxy = sub.add_parser("proxy", help="OpenAI-compatible proxy that stamps every request as a window")
    proxy.add_argument("--listen", default="127.0.0.1:8899", metavar="HOST:PORT")
    proxy.add_argument(
        "--upstream", required=True, metavar="URL", help="the real endpoint, e.g. http://h:30000"
    )
    proxy.add_argument("--run", metavar="ID", help="post windows to this run (else print them as JSON lines)")
    proxy.add_argument("--warmup", type=_count, default=0, metavar="N", help="first N requests are warm-up")
    _coordinator_args(proxy)

    run = sub.add_parser("run", help="measure a benchmark command: sparkwatch run [options] -- CMD ARGS...")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--nodes", type=Path, metavar="FILE", help="embed a coordinator for these nodes")
    _coordinator_args(run, group=where)
    run.add_argument("--name", metavar="TEXT", help="run name (default: the command)")
    run.add_argument("--interval", type=_positive_float, default=0.1, metavar="SECONDS")
    run.add_argument("--proxy-upstream", metavar="URL", help="put the proxy in front of this endpoint")
    run.add_argument("--proxy-listen", default="127.0.0.1:8899", metavar="HOST:PORT")
    run.add_argument(
        "--warmup", type=_count, default=0, metavar="N", help="first N proxied requests: warm-up"
    )
    run.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="FORMAT:FILE",
        help="import windows from CMD's result file after it ends (lmx-status:- reads CMD's stderr)",
    )
    run.add_argument("--clock-anchor", metavar="WALL_NS:MONO_NS", help="for vllm files from another host")
    run.add_argument("--db", type=Path, metavar="PATH", help="keep the embedded coordinator's SQLite file")
    run.add_argument("-o", "--output", type=Path, metavar="FILE", help="export path")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")

    imp = sub.add_parser("import", help="import request windows from a harness's result file into a run")
    imp.add_argument(
        "format", metavar="FORMAT", help="guidellm | genai-perf | aiperf | vllm | lmx-status | plain"
    )
    imp.add_argument("file", type=Path, metavar="FILE")
    imp.add_argument("--run", required=True, metavar="ID")
    imp.add_argument("--clock-anchor", metavar="WALL_NS:MONO_NS[:UNC_NS]", help="vllm: wall/monotonic pair")
    _coordinator_args(imp)

    att = sub.add_parser("attach", help="write the measured figures into an lmx run payload")
    att.add_argument("export", type=Path, metavar="RUN_JSON", help="a sparkwatch export")
    att.add_argument("--lmx", type=Path, required=True, metavar="PAYLOAD", help="lmx run payload (edited)")
    att.add_argument("--force", action="store_true", help="attach even if measured windows are not ok")
    att.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of in place")

    hw = sub.add_parser("hardware", help="the lmx hardware object of the whole cluster, from the nodes")
    hw_where = hw.add_mutually_exclusive_group()
    hw_where.add_argument("--nodes", type=Path, metavar="FILE", help="ask these nodes (embedded coordinator)")
    _coordinator_args(hw, group=hw_where)
    hw.add_argument("-o", "--output", type=Path, metavar="FILE", help="hardware.json (default: stdout)")
    hw.add_argument("--wait", type=_positive_float, default=15.0, metavar="SECONDS", help="for every hello")

    nodes = sub.add_parser("nodes", help="the cluster's nodes")
    nodes_sub = nodes.add_subparsers(dest="nodes_command", metavar="ACTION", required=True)
    check = nodes_sub.add_parser("check", help="preflight: would a run measured now be sound?")
    check_where = check.add_mutually_exclusive_group()
    check_where.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        help="dial these nodes (default: the coordinator, else nodes.toml)",
    )
    _coordinator_args(check, group=check_where)
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument("--wait", type=_positive_float, default=10.0, metavar="SECONDS", help="for every node")

    sim = sub.add_parser("sim-model", help="a simulated OpenAI-compatible streaming model, to try things")
    sim.add_argument("--listen", default="127.0.0.1:8000", metavar="HOST:PORT")
    sim.add_argument("--tokens-per-s", type=_positive_float, default=76.0, metavar="RATE")
    return parser


def _coordinator_args(parser: argparse.ArgumentParser, group: Any = None) -> None:
    (group or parser).add_argument(
        "--coordinator",
        metavar="URL",
        help=f"coordinator API (default ${ENV_COORDINATOR} or {DEFAULT_COORDINATOR})",
    )
    parser.add_argument(
        "--token-file", type=Path, metavar="FILE", help=f"API token (default ${ENV_TOKEN_FILE})"
    )


def _positive_int(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _node_count(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_DEMO_NODES:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEMO_NODES} simulated nodes")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "coordinator":
            return asyncio.run(
                serve(args.nodes, args.db, args.listen, args.token_file, args.insecure_no_auth)
            )
        if args.command == "schema":
            print(json.dumps(run_schema(), indent=2))
            return 0
        if args.command in COMMANDS:
            return COMMANDS[args.command](args, parser)
        parser.print_help()
        return 0
    except USER_ERRORS as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output file or folder the user named cannot be written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _target(args: argparse.Namespace) -> CoordinatorTarget:
    return CoordinatorTarget.resolve(args.coordinator, args.token_file)


def cmd_demo(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    check_output(args.output)
    opts = DemoOptions(
        nodes=args.nodes, max_tokens=args.max_tokens, tokens_per_s=args.tokens_per_s, output=args.output
    )
    return asyncio.run(run_demo(opts))


def cmd_proxy(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    host, port = parse_listen(args.listen)
    target = _target(args) if args.run else None
    config = ProxyConfig(args.upstream, warmup=args.warmup)
    return asyncio.run(serve_proxy(host, port, config, target, args.run))


def cmd_run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        parser.error(
            "run: give the benchmark command after --, e.g. sparkwatch run --nodes n.toml -- CMD ARGS"
        )
    anchor = _anchor(args, parser)
    opts = RunOptions(
        command=command,
        nodes_file=args.nodes,
        target=None if args.nodes else _target(args),
        name=args.name,
        interval_s=args.interval,
        proxy_upstream=args.proxy_upstream,
        proxy_listen=parse_listen(args.proxy_listen),
        warmup=args.warmup,
        imports=[parse_import(text) for text in args.imports],
        clock_anchor=anchor,
        output=args.output,
        db=args.db,
    )
    return asyncio.run(run_command(opts))


def _anchor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ClockAnchor | None:
    try:
        return ClockAnchor.parse(args.clock_anchor) if args.clock_anchor else None
    except ValueError as exc:
        parser.error(f"--clock-anchor: {exc}")


def cmd_import(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    anchor = _anchor(args, parser)
    windows = load_windows(args.format, args.file, clock_anchor=anchor)
    target = _target(args)

    async def post() -> int:
        async with CoordinatorClient(target) as client:
            return await client.add_windows(args.run, windows)

    stored = asyncio.run(post())
    print(f"imported {stored} window(s) from {args.file} ({args.format}) into run {args.run}")
    return 0


def cmd_attach(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    values = attach(args.export, args.lmx, args.force, args.output)
    watts = ", ".join(f"{w:g}" for w in values["gpuPowerWatts"])
    peak = values.get("peakVramGb")
    print(f"attached to {args.output or args.lmx}: gpuPowerWatts [{watts}], peakVramGb {peak}")
    return 0


def cmd_hardware(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    async def fetch() -> list[dict[str, Any]]:
        if args.nodes is None:
            async with CoordinatorClient(_target(args)) as client:
                return await client.nodes()
        with tempfile.TemporaryDirectory(prefix="sparkwatch-hardware-") as tmp:
            nodes = load_nodes(args.nodes)
            async with (
                running_coordinator(nodes, Path(tmp) / "hw.db", "127.0.0.1", 0, None) as url,
                CoordinatorClient(CoordinatorTarget(url, None)) as client,
            ):
                return await wait_for_hellos(client, timeout_s=args.wait)

    record = cluster_hardware(asyncio.run(fetch()))
    text = json.dumps(record, indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text_atomically(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_nodes(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    async def fetch() -> list[dict[str, Any]]:
        if args.nodes is None and (args.coordinator or os.environ.get(ENV_COORDINATOR)):
            async with CoordinatorClient(_target(args)) as client:
                return await client.nodes()
        with tempfile.TemporaryDirectory(prefix="sparkwatch-check-") as tmp:
            specs = load_nodes(args.nodes or Path("nodes.toml"))
            async with (
                running_coordinator(specs, Path(tmp) / "check.db", "127.0.0.1", 0, None) as url,
                CoordinatorClient(CoordinatorTarget(url, None)) as client,
            ):
                return await wait_for_clocks(client, timeout_s=args.wait)

    checks = check_cluster(asyncio.run(fetch()))
    if args.json:
        ok = all(not c.problems for c in checks)
        print(json.dumps({"nodes": [c.to_json() for c in checks], "ok": ok}))
    else:
        print(render(checks))
    return 1 if any(c.problems for c in checks) else 0


def cmd_sim_model(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    host, port = parse_listen(args.listen)
    return asyncio.run(serve_sim_model(host, port, SimModelSpec(tokens_per_s=args.tokens_per_s)))


COMMANDS: dict[str, Callable[[argparse.Namespace, argparse.ArgumentParser], int]] = {
    "demo": cmd_demo,
    "proxy": cmd_proxy,
    "run": cmd_run,
    "import": cmd_import,
    "attach": cmd_attach,
    "hardware": cmd_hardware,
    "sim-model": cmd_sim_model,
    "nodes": cmd_nodes,
}


if __name__ == "__main__":
    sys.exit(main())
