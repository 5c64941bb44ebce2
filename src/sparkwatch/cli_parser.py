"""The `sparkwatch` command line's shape: one ``_add_<command>`` per subcommand, and the argument types that
turn a wrong flag into the parser's one-line error (shared.cli_flags.OneLineParser)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sparkwatch import __version__
from sparkwatch.cli_parser_runs import add_export_parser, add_runs_parser, method_args
from sparkwatch.cli_types import (
    agent_urls,
    basic_auth_user,
    coordinator_args,
    count,
    engine_metrics_url,
    export_file,
    listen,
    log_level_arg,
    output_file,
    output_or_stdout,
    positive_float,
    positive_int,
    remote_write_url,
    retention_s,
    run_name,
    spill_file,
    upstream_url,
    wait_s,
)
from sparkwatch.defaults import (
    DEFAULT_HELLO_WAIT_S,
    DEMO_EXPORT,
    MAX_DEMO_NODES,
    MAX_SIM_TOKENS,
    RETAIN_IDLE_S,
)
from sparkwatch_agent.shared.cli_flags import OneLineParser
from sparkwatch_agent.shared.strict_text import quoted_number

PROG = "sparkwatch"


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description=(
            "Measured GPU power and unified memory for LLM benchmark runs. "
            "The per-node agent is `sparkwatch-agent` (serve | stream --stdio | probe)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    log_level_arg(parser, "info")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_coordinator, _add_schema, _add_demo, _add_proxy, _add_run):
        add(sub)
    for add in (_add_import, _add_attach, _add_report, _add_hardware, _add_nodes, _add_sim_model):
        add(sub)
    for add in (add_runs_parser, add_export_parser):
        add(sub)
    for child in sub.choices.values():  # errors found after parsing print the subcommand's own usage
        child.set_defaults(subparser=child)
        log_level_arg(child, argparse.SUPPRESS)  # before or after the subcommand, as the user types it
    return parser


Sub = Any  # argparse's subparsers action (its class is private)


def _add_coordinator(sub: Sub) -> None:
    coord = sub.add_parser("coordinator", help="collect samples from every node; serve the run API")
    coord.add_argument("--nodes", type=Path, required=True, metavar="FILE", help="nodes.toml")
    coord.add_argument(
        "--db",
        type=Path,
        default=Path("sparkwatch.db"),
        metavar="PATH",
        help="SQLite file (default: sparkwatch.db in the working directory)",
    )
    coord.add_argument(
        "--listen",
        type=_listen_text,
        default="127.0.0.1:8750",
        metavar="HOST:PORT",
        help="where the API listens (default: 127.0.0.1:8750)",
    )
    coord.add_argument("--token-file", type=Path, metavar="FILE", help="bearer token for the API (mode 0600)")
    coord.add_argument(
        "--insecure-no-auth", action="store_true", help="allow an off-loopback bind without token"
    )
    coord.add_argument(
        "--retain-idle",
        type=retention_s,
        default=RETAIN_IDLE_S,
        metavar="AGE",
        help="drop samples no run covers once this old: 7d (default), 36h, 90m, 600 (s) or forever",
    )
    _remote_write_args(coord)


def _remote_write_args(coord: argparse.ArgumentParser) -> None:
    rw = coord.add_argument_group("remote write (docs/coordinator.md)")
    rw.add_argument(
        "--remote-write",
        type=remote_write_url,
        metavar="URL",
        help="also send every stored sample to this Prometheus remote-write receiver (one), e.g."
        " http://prom:9090/api/v1/write",
    )
    rw.add_argument("--remote-write-bearer-token-file", type=Path, metavar="FILE", help="its bearer token")
    rw.add_argument(
        "--remote-write-basic-auth-user",
        type=basic_auth_user,
        metavar="USER",
        help="basic auth for the receiver",
    )
    rw.add_argument("--remote-write-basic-auth-password-file", type=Path, metavar="FILE", help="its password")


def _add_schema(sub: Sub) -> None:
    sub.add_parser("schema", help="print the JSON Schema of the sparkwatch.run/1 export")


def _add_demo(sub: Sub) -> None:
    demo = sub.add_parser("demo", help="the whole measurement on a simulated GB10 cluster (no GPU needed)")
    demo.add_argument(
        "--nodes",
        type=_node_count,
        default=4,
        metavar="N",
        help=f"simulated nodes, 1..{MAX_DEMO_NODES} (default 4)",
    )
    _outcome_args(demo)
    demo.add_argument(
        "--max-tokens",
        type=_max_tokens,
        default=256,
        metavar="N",
        help=f"tokens each request asks for, 1..{MAX_SIM_TOKENS} (256)",
    )
    demo.add_argument(
        "--tokens-per-s",
        type=_tokens_rate,
        default=76.0,
        metavar="RATE",
        help=f"the model's speed, {MIN_TOKENS_PER_S:g}..{MAX_TOKENS_PER_S:g} (76)",
    )
    demo.add_argument(
        "-o",
        "--output",
        type=export_file,
        default=Path(DEMO_EXPORT),
        metavar="FILE",
        help=f"default {DEMO_EXPORT}",
    )
    _no_report_arg(demo)


def _add_proxy(sub: Sub) -> None:
    proxy = sub.add_parser("proxy", help="OpenAI-compatible proxy that stamps every request as a window")
    proxy.add_argument(
        "--listen", type=listen, default="127.0.0.1:8899", metavar="HOST:PORT", help="default 127.0.0.1:8899"
    )
    proxy.add_argument(
        "--upstream",
        type=upstream_url,
        required=True,
        metavar="URL",
        help="the real endpoint, e.g. http://h:30000",
    )
    proxy.add_argument(
        "--spill",
        type=spill_file,
        metavar="FILE.json",
        help="windows that could not be stored in the run (default sparkwatch-RUN-unsent-windows.json)",
    )
    proxy.add_argument("--run", metavar="ID", help="post windows to this run (else print them as JSON lines)")
    proxy.add_argument("--warmup", type=count, default=0, metavar="N", help="first N requests are warm-up")
    coordinator_args(proxy)


def _add_run(sub: Sub) -> None:
    run = sub.add_parser("run", help="measure a benchmark command: sparkwatch run [options] -- CMD ARGS...")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--nodes", type=Path, metavar="FILE", help="embed a coordinator for these nodes")
    coordinator_args(run, group=where)
    run.add_argument("--name", type=run_name, metavar="TEXT", help="run name (default: the command)")
    run.add_argument(
        "--wait",
        type=wait_s,
        default=DEFAULT_HELLO_WAIT_S,
        metavar="SECONDS",
        help=f"for each node's hello, then its samples, before CMD starts (default {DEFAULT_HELLO_WAIT_S:g})",
    )
    method_args(run)
    run.add_argument(
        "--proxy-upstream",
        type=upstream_url,
        metavar="URL",
        help="put the proxy in front of this endpoint; {proxy} in CMD becomes the proxy's URL",
    )
    run.add_argument(
        "--proxy-listen",
        type=listen,
        metavar="HOST:PORT",
        help="where the proxy listens (default 127.0.0.1:8899)",
    )
    run.add_argument(
        "--engine-metrics",
        type=engine_metrics_url,
        metavar="URL",
        help="scrape the serving engine's /metrics during the run (vLLM, SGLang); needs --nodes",
    )
    run.add_argument("--warmup", type=count, default=0, metavar="N", help="first N proxied requests: warm-up")
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
    run.add_argument(
        "-o",
        "--output",
        type=export_file,
        metavar="FILE",
        help="export path (default sparkwatch-RUN_ID.json, here)",
    )
    run.add_argument(
        "--spill", type=spill_file, metavar="FILE.json", help="proxy windows not stored (default: beside -o)"
    )
    _outcome_args(run)
    _no_report_arg(run)
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")


def _add_import(sub: Sub) -> None:
    imp = sub.add_parser("import", help="import request windows from a harness's result file into a run")
    imp.add_argument(
        "format", metavar="FORMAT", help="guidellm | genai-perf | aiperf | vllm | lmx-status | plain | export"
    )
    imp.add_argument("file", type=Path, metavar="FILE")
    imp.add_argument("--run", required=True, metavar="ID")
    imp.add_argument("--clock-anchor", metavar="WALL_NS:MONO_NS[:UNC_NS]", help="vllm: wall/monotonic pair")
    coordinator_args(imp)


def _add_attach(sub: Sub) -> None:
    att = sub.add_parser("attach", help="write the measured figures into an lmx run payload (or print flags)")
    att.add_argument("export", type=Path, metavar="RUN_JSON", help="a sparkwatch export")
    what = att.add_mutually_exclusive_group(required=True)
    what.add_argument("--lmx", type=Path, metavar="PAYLOAD", help="lmx run payload (edited)")
    what.add_argument(
        "--lmx-flags",
        action="store_true",
        help="print lmx's --gpu-power-watts/--peak-vram-gb flags instead; write nothing",
    )
    att.add_argument("--force", action="store_true", help="attach even if measured windows are not ok")
    att.add_argument(
        "-o", "--output", type=output_file, metavar="FILE", help="write here instead of in place"
    )


def _add_report(sub: Sub) -> None:
    report = sub.add_parser(
        "report", help="the run report: one self-contained HTML page (and PNG/SVG figures) from an export"
    )
    report.add_argument("export", type=Path, metavar="EXPORT.json", help="a sparkwatch.run/1 export file")
    report.add_argument(
        "-o",
        "--output",
        type=output_file,
        metavar="FILE.html",
        help="default: EXPORT.report.html beside the export",
    )
    report.add_argument("--png", type=Path, metavar="DIR", help="also write each node's figure as PNG here")
    report.add_argument("--svg", type=Path, metavar="DIR", help="also write each node's figure as SVG here")


def _no_report_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        help="write no EXPORT.report.html beside the export (and leave the series block out of it)",
    )


def _add_hardware(sub: Sub) -> None:
    hw = sub.add_parser("hardware", help="the lmx hardware object of the whole cluster, from the nodes")
    hw_where = hw.add_mutually_exclusive_group()
    hw_where.add_argument("--nodes", type=Path, metavar="FILE", help="ask these nodes (embedded coordinator)")
    coordinator_args(hw, group=hw_where)
    hw.add_argument(
        "-o", "--output", type=output_or_stdout, metavar="FILE", help="hardware.json (- or default: stdout)"
    )
    hw.add_argument("--wait", type=wait_s, default=15.0, metavar="SECONDS", help="for every hello")


def _add_nodes(sub: Sub) -> None:
    nodes = sub.add_parser("nodes", help="the cluster's nodes")
    nodes_sub = nodes.add_subparsers(dest="nodes_command", metavar="ACTION", required=True)
    check = nodes_sub.add_parser("check", help="preflight: would a run measured now be sound?")
    check.set_defaults(subparser=check)
    log_level_arg(check, argparse.SUPPRESS)
    check_where = check.add_mutually_exclusive_group()
    check_where.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        help="dial these nodes (default nodes.toml; --coordinator or $SPARKWATCH_COORDINATOR: ask it)",
    )
    coordinator_args(check, group=check_where)
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument("--wait", type=wait_s, default=10.0, metavar="SECONDS", help="for every node")


def _add_sim_model(sub: Sub) -> None:
    sim = sub.add_parser("sim-model", help="a simulated OpenAI-compatible streaming model, to try things")
    sim.add_argument(
        "--listen", type=listen, default="127.0.0.1:8000", metavar="HOST:PORT", help="default 127.0.0.1:8000"
    )
    sim.add_argument(
        "--tokens-per-s",
        type=_tokens_rate,
        default=76.0,
        metavar="RATE",
        help=f"tokens streamed a second, {MIN_TOKENS_PER_S:g}..{MAX_TOKENS_PER_S:g} (76)",
    )
    sim.add_argument(
        "--agents",
        type=agent_urls,
        default=(),
        metavar="URL,URL",
        help="sim agents (http://HOST:PORT) whose GPUs it keeps busy while it generates, in TP rank order",
    )
    sim.add_argument(
        "--agent-token-file", type=Path, metavar="FILE", help="the agents' API token (their --token-file)"
    )


def _node_count(text: str) -> int:
    value = positive_int(text)
    if value > MAX_DEMO_NODES:
        raise argparse.ArgumentTypeError(
            f"at most {MAX_DEMO_NODES} simulated nodes, got {quoted_number(value)}"
        )
    return value


def _max_tokens(text: str) -> int:
    value = positive_int(text)
    if value > MAX_SIM_TOKENS:  # the simulated model's own bound: else its 400, after the cluster started
        raise argparse.ArgumentTypeError(f"at most {MAX_SIM_TOKENS} tokens, got {quoted_number(value)}")
    return value


#: The simulated model's speeds: 1e-9 token/s was taken, and the demo never finished.
MIN_TOKENS_PER_S, MAX_TOKENS_PER_S = 1.0, 100_000.0


def _tokens_rate(text: str) -> float:
    value = positive_float(text)
    if not MIN_TOKENS_PER_S <= value <= MAX_TOKENS_PER_S:
        shown = f"{MIN_TOKENS_PER_S:g}..{MAX_TOKENS_PER_S:g}"
        raise argparse.ArgumentTypeError(f"must be {shown} tokens a second, got {quoted_number(value)}")
    return value


def _listen_text(text: str) -> str:
    """A checked HOST:PORT, kept as typed (the coordinator parses it again where it binds)."""
    listen(text)
    return text


def _outcome_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 3 when the measurement is not sound (a timed window not ok, a node behind or without"
        " gated power, an import failed); also `strict = true` in the config file",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout (the table goes to stderr)"
    )
