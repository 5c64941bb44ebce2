"""The shape of `sparkwatch runs` and `sparkwatch export --db` (their handlers: commands/runs.py,
commands/export_cmd.py). Imports nothing heavy: `sparkwatch --help` loads no aiohttp, numpy or pydantic."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from sparkwatch.cli_types import (
    basic_auth_user,
    coordinator_args,
    engine_url,
    epoch_ns,
    interval_s,
    log_level_arg,
    output_or_stdout,
    phase,
    phases,
    ratio,
    run_name,
    series_buckets,
)
from sparkwatch.defaults import (
    DEFAULT_GATE_THRESHOLD,
    DEFAULT_INTERVAL_S,
    DEFAULT_SCOPE,
    SCOPES,
    SERIES_BUCKETS,
)


def method_args(parser: argparse.ArgumentParser) -> None:
    """A run's method, the same flags for `run` and `runs open`: its sampling interval, scope, phases and
    gate."""
    parser.add_argument(
        "--interval",
        type=interval_s,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"the agents' sampling interval while the run is open (default {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        default=DEFAULT_SCOPE,
        help=f"what the figures cover (default {DEFAULT_SCOPE})",
    )
    parser.add_argument(
        "--phases",
        type=phases,
        metavar="LIST",
        help="window phases measured, e.g. timed,warmup (default timed)",
    )
    parser.add_argument(
        "--gate-threshold",
        type=ratio,
        default=DEFAULT_GATE_THRESHOLD,
        metavar="RATIO",
        help=f"GPU utilisation a sample needs to count in gated figures (default {DEFAULT_GATE_THRESHOLD:g})",
    )


def add_runs_parser(sub: Any) -> None:
    runs = sub.add_parser(
        "runs", help="a coordinator's runs by hand: list, show, open, end, export, mark, delete"
    )
    actions = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="every run: id, name, state, start, end, windows, samples (bytes on disk)"
    )
    listing.add_argument("--json", action="store_true", help="the API's answer (GET /v1/runs)")
    show = actions.add_parser("show", help="one run's details")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="the API's answer (GET /v1/runs/ID)")
    opening = actions.add_parser(
        "open", help="open a run now; prints its id alone: ID=$(sparkwatch runs open)"
    )
    opening.add_argument(
        "--name", type=run_name, default="manual", metavar="TEXT", help="run name (default: manual)"
    )
    method_args(opening)
    end = actions.add_parser("end", help="end a run now, then wait for the nodes' samples up to its end")
    end.add_argument("run_id", metavar="ID")
    export = actions.add_parser("export", help="a run's sparkwatch.run/1 export (stdout, or -o FILE)")
    export.add_argument("run_id", metavar="ID")
    export.add_argument(
        "-o",
        "--output",
        type=output_or_stdout,
        metavar="FILE",
        help="written whole or not at all (-: stdout)",
    )
    export.add_argument(
        "--table",
        action="store_true",
        help="print the table `sparkwatch run` prints, not the JSON (with -o, the export goes to the file)",
    )
    series_args(export)
    mark = actions.add_parser("mark", help="begin, or end into a window, a named mark now")
    mark.add_argument("run_id", metavar="ID")
    mark.add_argument(
        "name", type=run_name, metavar="NAME", help="the mark, and the id of the window its end makes"
    )
    mark.add_argument("event", choices=("begin", "end"))
    mark.add_argument(
        "--phase", type=phase, metavar="PHASE", help="with begin: timed (default), warmup or another word"
    )
    delete = actions.add_parser("delete", help="delete an ended (or damaged) run and its windows")
    delete.add_argument("run_id", metavar="ID")
    for action in (listing, show, opening, end, export, mark, delete):
        coordinator_args(action)
        action.set_defaults(subparser=action)  # an error after parsing prints this action's usage
        log_level_arg(action, argparse.SUPPRESS)


def add_export_parser(sub: Any) -> None:
    export = sub.add_parser(
        "export",
        help="a run's export from a coordinator's database file or a Prometheus-compatible engine",
    )
    where = export.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", type=Path, metavar="PATH", help="the coordinator's SQLite file")
    where.add_argument(
        "--prometheus",
        type=engine_url,
        metavar="URL",
        help="a Prometheus-compatible API (Prometheus, VictoriaMetrics, …)",
    )
    export.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="with --db: run id (default: the newest run); with --prometheus: a coordinator's run"
        " (--coordinator), its windows and span measured from the engine, instead of --windows",
    )
    _tsdb_args(export)
    export.add_argument(
        "-o", "--output", type=output_or_stdout, metavar="FILE", help="write the export JSON here (-: stdout)"
    )
    shown = export.add_mutually_exclusive_group()
    shown.add_argument("--table", action="store_true", help="print the table `sparkwatch run` prints")
    shown.add_argument("--json", action="store_true", help="print the export JSON (the default without -o)")
    export.add_argument(
        "--gate-threshold", type=ratio, metavar="RATIO", help="recompute with this gate (default: the run's)"
    )
    export.add_argument("--scope", choices=SCOPES, help="recompute in this scope (default: the run's)")
    export.add_argument(
        "--phases", type=phases, metavar="LIST", help="recompute measuring these phases (default: the run's)"
    )
    series_args(export)


#: The exporter families `--metrics` names (sources/prometheus/mappings.py FAMILIES; kept here so that
#: `--help` loads no numpy).
METRIC_FAMILIES = ("sparkwatch", "dcgm", "nvidia_gpu_exporter")


def node_names(text: str) -> tuple[str, ...]:
    """``--nodes a,b``: names in the order given, each once; an empty name is refused."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    if not names or "" in names:
        raise argparse.ArgumentTypeError(f"{text!r}: node names separated by commas, none empty")
    return names


def label_name(text: str) -> str:
    """``--nodes-label LABEL``: a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), checked here: it goes into
    every selector, and the engine's parse error would not say which flag it came from."""
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a label name is letters, digits and _ (not first a digit)"
        )
    return text


def label_matchers(text: str) -> str:
    """``--engine-metrics '{job="vllm"}'``, ``--series-matchers '{job=""}'``: PromQL label matchers in
    braces, returned without them (the engine checks their syntax and says what is wrong in one line)."""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")) or not inner[1:-1].strip() or "\n" in inner:
        raise argparse.ArgumentTypeError(f"{text!r}: label matchers in braces, e.g. '{{job=\"vllm\"}}'")
    return inner[1:-1].strip()


def _tsdb_args(export: argparse.ArgumentParser) -> None:
    """What an export from a TSDB needs besides the engine's URL (docs/fleets.md)."""
    tsdb = export.add_argument_group("with --prometheus")
    tsdb.add_argument(
        "--windows", type=Path, metavar="FILE", help="the request windows (any importer's file)"
    )
    tsdb.add_argument("--windows-format", metavar="KIND", help="the file's importer (default plain)")
    tsdb.add_argument(
        "--clock-anchor",
        metavar="WALL_NS:MONO_NS[:UNC_NS]",
        help="vllm windows: a wall/monotonic pair read on the benchmark host in the same boot",
    )
    tsdb.add_argument("--start", type=epoch_ns, metavar="T", help="the run's start: Unix seconds or RFC 3339")
    tsdb.add_argument("--end", type=epoch_ns, metavar="T", help="the run's end: Unix seconds or RFC 3339")
    tsdb.add_argument(
        "--nodes-label",
        type=label_name,
        metavar="LABEL",
        help="the label naming each node (default node)",
    )
    tsdb.add_argument(
        "--nodes",
        type=node_names,
        metavar="LIST",
        help="only these nodes, the label's values comma-separated (default: the run's own nodes where the"
        " windows come from a run and the label is node, else every node with GPU power series in the span)",
    )
    tsdb.add_argument(
        "--engine-metrics",
        type=label_matchers,
        metavar="MATCHERS",
        help="the serving engine's vLLM or SGLang series in the TSDB, by label matchers that select that one"
        """ engine (e.g. '{job="vllm"}'; `run --engine-metrics` takes the engine's URL instead); default:"""
        " no engine block",
    )
    tsdb.add_argument(
        "--series-matchers",
        type=label_matchers,
        metavar="MATCHERS",
        help="label matchers every node series read must also match, for an engine that holds them twice"
        """ (e.g. '{job=""}': what a coordinator remote-wrote; '{job!=""}': scrapes); default: none""",
    )
    tsdb.add_argument(
        "--metrics",
        choices=METRIC_FAMILIES,
        help="the exporter family (default sparkwatch)",
    )
    tsdb.add_argument(
        "--engine",
        choices=("auto", "prometheus", "victoriametrics"),
        help="read raw samples by range selectors (prometheus) or /api/v1/export (victoriametrics);"
        " default: ask the engine",
    )
    coordinator_args(tsdb)  # where RUN is, with --prometheus, and its token: one place in --help
    tsdb.add_argument("--bearer-token-file", type=Path, metavar="FILE", help="the engine's bearer token")
    tsdb.add_argument(
        "--basic-auth-user", type=basic_auth_user, metavar="USER", help="basic auth for the engine"
    )
    tsdb.add_argument("--basic-auth-password-file", type=Path, metavar="FILE", help="its password")


def series_args(export: argparse.ArgumentParser) -> None:
    """``--series`` and ``--series-buckets N``: the export's optional plot data (what `sparkwatch report`
    draws); either asks for it."""
    export.add_argument(
        "--series",
        action="store_true",
        help=f"add the series block: each node's time series, decimated to {SERIES_BUCKETS} time buckets",
    )
    export.add_argument(
        "--series-buckets",
        type=series_buckets,
        metavar="N",
        help=f"add the series block in N time buckets (default {SERIES_BUCKETS})",
    )
