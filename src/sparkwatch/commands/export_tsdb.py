"""`sparkwatch export --prometheus URL --windows FILE --start T --end T`: the `sparkwatch.run/1` export of a
benchmark whose samples a Prometheus-compatible engine holds (docs/fleets.md), with its windows from any
importer's file. The same core computes it as from the coordinator's database; the export's ``source`` says
where the samples came from and ``nodes[].samples.interval_s`` the resolution they had.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import time
from collections.abc import Callable
from typing import Any

from sparkwatch import __version__
from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget
from sparkwatch.commands.export_flags import TSDB_DEFAULTS, too_long
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.run_spec import RunSpec
from sparkwatch.core.stamps import utc_stamp
from sparkwatch.core.window_rows import WindowsTap
from sparkwatch.core.windows import SPAN_SLACK_NS, Window, outside_span
from sparkwatch.defaults import DEFAULT_GATE_THRESHOLD, DEFAULT_PHASES, DEFAULT_SCOPE, ScopeKind
from sparkwatch.importers import export_answer, load_windows, run_export, windows_answer
from sparkwatch.sources import NodeMissing, SourceError, export_from
from sparkwatch.sources.prometheus.client import Auth, Client, check_url
from sparkwatch.sources.prometheus.mappings import FAMILIES
from sparkwatch.sources.prometheus.raw import Engine, detect, reader
from sparkwatch.sources.prometheus.source import TsdbSource

#: How long a coordinator may take to answer RUN's windows (or, an older one, its export: it computes it).
COORDINATOR_TIMEOUT_S = 600.0
#: How a coordinator older than ``GET /v1/runs/{id}/windows`` answers it: 405 (it has the route's POST, which
#: adds windows), or 404.
OLDER_ROUTE = (404, 405)


def _check_span(windows: list[Window], start_ns: int, end_ns: int) -> None:
    """The coordinator's rule for windows imported into an ended run: the span holds every window, give or
    take SPAN_SLACK_NS. A span typed wrong (a time-zone slip, a rounded end) would otherwise measure a
    window against a run it is not in, or a run against nothing."""
    outside = outside_span(windows, start_ns, end_ns)
    if not outside:
        return
    noun, verb = ("window", "lies") if len(outside) == 1 else ("windows", "lie")
    first = min(w.t_start_ns for w in windows)
    last = -(-max(w.t_end_ns for w in windows) // 10**6) * 10**6  # up to the ms: the span it names holds it
    raise SourceError(
        f"{noun} {name_ids([w.id for w in outside], len(outside), quoted=True)} {verb} outside --start"
        f" {utc_stamp(start_ns)} --end {utc_stamp(end_ns)} (give or take {SPAN_SLACK_NS / 1e9:g} s); the"
        f" windows run from {utc_stamp(first)} to {utc_stamp(last)}: give a span that holds them"
    )


def _windows(args: argparse.Namespace) -> tuple[list[Window], run_export.ExportedRun | None]:
    """The windows, and the run they were taken in when that is known: a coordinator's (RUN), or the one
    an export file (``--windows-format export``) holds."""
    if args.run is not None:
        return _coordinator_run(args)
    fmt = "plain" if args.windows_format is None else args.windows_format  # "" is no format: refused
    windows = load_windows(fmt, args.windows, clock_anchor=args.clock_anchor, allow_empty=True)  # by scope
    run = run_export.exported_run(args.windows) if args.windows_format == run_export.FORMAT else None
    return windows, run


def _coordinator_run(args: argparse.Namespace) -> tuple[list[Window], run_export.ExportedRun]:
    """RUN's windows and settings, as its coordinator stored them (``/windows``); from its export of the run
    where the coordinator predates that route (it then measures the whole run first, and an open run's
    export ends at its "now": the run's own ``open`` says it has no end, as ``/windows`` does)."""
    target = CoordinatorTarget.resolve(args.coordinator, args.token_file)
    route = f"{target.url}/v1/runs/{args.run}"

    async def fetch() -> tuple[list[Window], run_export.ExportedRun]:
        async with CoordinatorClient(target, COORDINATOR_TIMEOUT_S) as client:
            stored = await client.run(args.run)  # every coordinator has this route: a 404 is no such run
            try:
                return windows_answer(await client.run_windows(args.run), f"{route}/windows")
            except CoordinatorError as exc:
                if exc.status not in OLDER_ROUTE:
                    raise
            windows, run = export_answer(await client.export(args.run), f"{route}/export")
            return windows, dataclasses.replace(run, t_end_ns=None) if stored["open"] else run

    try:
        return asyncio.run(fetch())
    except CoordinatorError as exc:
        # a run deleted from the coordinator: its samples may be in the engine still, its windows in a file
        hint = " (a run's export file gives its windows too: --windows FILE --windows-format export)"
        raise SourceError(str(exc) + (hint if exc.status == 404 else "")) from None


def _check_windows(
    args: argparse.Namespace, windows: list[Window], scope: ScopeKind, span_ns: tuple[int, int]
) -> None:
    """Windows to measure (none only where ``--scope run`` measures the span without them), each inside the
    span (:func:`_check_span`)."""
    if not windows and scope != "run":
        what = (
            f"run {args.run} has no windows"
            if args.run is not None
            else f"{args.windows.name} holds no requests"
        )
        raise SourceError(
            f"{what}: nothing to measure in scope {scope} (--scope run measures the whole span without them)"
        )
    _check_span(windows, *span_ns)


def _defaults(
    args: argparse.Namespace, run: run_export.ExportedRun | None
) -> tuple[int, int, float, ScopeKind, frozenset[str]]:
    """The span, gate threshold, scope and phases to measure with: the flags', and the run's (a
    coordinator's, or an export file's) for any left out (as `export --db` takes a stored run's); else the
    defaults."""
    start = args.start if args.start is not None or run is None else run.t_start_ns
    end = args.end if args.end is not None or run is None else run.t_end_ns
    if end is None:
        assert run is not None  # only a run's end can be unknown
        when = "is still open" if args.run is not None else "was still open when exported"
        raise SourceError(f"run {run.id} {when} (it has no end yet): give --end")
    if end <= start:
        raise SourceError(f"--end {utc_stamp(end)} is not after --start {utc_stamp(start)}")
    given = args.start is not None or args.end is not None  # a run's own span is read as long as it is
    if given and (why := too_long(start, end)):  # the other bound the run's: read for minutes, before
        raise SourceError(why)
    threshold = args.gate_threshold if args.gate_threshold is not None or run is None else run.gate_threshold
    return (
        start,
        end,
        DEFAULT_GATE_THRESHOLD if threshold is None else threshold,
        args.scope or (run.scope if run else DEFAULT_SCOPE),
        frozenset(args.phases or (run.phases if run else DEFAULT_PHASES)),
    )


def _nodes(
    source: TsdbSource, span_ns: tuple[int, int], args: argparse.Namespace, run: run_export.ExportedRun | None
) -> list[str]:
    """The nodes to export: ``--nodes``, else the run's own where the nodes label is the agent's (a fleet's
    engine holds other nodes over the same span: every one of them was summed in; under another label, a
    dcgm-exporter's ``Hostname``, the run's node names need not be its values), else every node the engine
    has power series of."""
    agents = args.nodes_label == TSDB_DEFAULTS["nodes_label"]
    listed = run.nodes if run is not None and agents and not args.nodes else ()
    try:
        return source.nodes(*span_ns, only=args.nodes or listed)
    except NodeMissing as exc:
        if not listed:
            raise
        hint = f" (the run measured {', '.join(listed)}: --nodes picks the ones to export)"
        raise NodeMissing(f"{exc}{hint}") from None


def tsdb_export(
    args: argparse.Namespace,
    say: Callable[[str], None],
    series_buckets: int | None = None,
    now_ns: Callable[[], int] = time.time_ns,
    windows_tap: WindowsTap | None = None,
) -> dict[str, Any]:
    """The export over ``--start`` to ``--end`` for the ``--nodes`` given, else every node the engine has
    series of; SourceError (one line) when the engine cannot be read, lacks a node named or holds nothing
    to measure."""
    url = check_url(args.prometheus)
    windows, run = _windows(args)  # a file's mistakes, or the coordinator's, before the engine is asked
    start_ns, end_ns, threshold, scope, phases = _defaults(args, run)
    _check_windows(args, windows, scope, (start_ns, end_ns))
    now = now_ns()
    if end_ns > now + SPAN_SLACK_NS:  # a typo in the date, or an export asked for too early
        say(
            f"warning: --end {utc_stamp(end_ns)} is after now ({utc_stamp(now)}): there are no samples"
            " after now yet, so what lies there reads as a gap"
        )
    auth = Auth(args.bearer_token_file, args.basic_auth_user, args.basic_auth_password_file)
    client = Client(url, auth)
    engine: Engine = detect(client)  # what it is, for source.kind, even where --engine forces the reading
    read_as: Engine = engine if args.engine == "auto" else args.engine
    source = TsdbSource(
        reader(client, read_as),
        FAMILIES[args.metrics],
        args.nodes_label,
        engine,
        url,
        engine_matchers=args.engine_metrics,
        series_matchers=args.series_matchers,
    )
    t_from = min([start_ns, *(w.t_start_ns for w in windows)])
    t_to = max([end_ns, *(w.t_end_ns for w in windows)])
    nodes = _nodes(source, (t_from, t_to), args, run)
    forced = "" if read_as == engine else f" (read by {source.describe()['api']}, as --engine says)"
    say(
        f"exporting {len(windows)} window(s) on {len(nodes)} node(s) ({', '.join(nodes)}) from {engine}"
        f"{forced} at {url}, {args.metrics} series"
    )
    spec = RunSpec(
        id=_run_id(url, _selection(args), (start_ns, end_ns), _windows_identity(args, run)),
        name=args.windows.stem if run is None else run.name,
        t_start_ns=start_ns,
        t_end_ns=end_ns,
        interval_s=0.0,  # the scrape interval the samples show (sources.export_from)
        gate_threshold=threshold,
        scope=scope,
        phases=phases,
        command=None if run is None else run.command,
    )
    export = export_from(
        source, spec, nodes, windows, __version__, series_buckets=series_buckets, windows_tap=windows_tap
    )
    if export["method"]["interval_s"] <= 0:
        raise SourceError(f"no node has two samples between --start and --end at {url}: nothing to measure")
    return export


def _run_id(url: str, selection: str, span_ns: tuple[int, int], windows: bytes) -> str:
    """The same engine, series, span and windows give the same id (a re-export compares with the last);
    other series of the same engine (a coordinator's remote write against the scrapes of the same agents,
    another exporter's family) are another measurement, with another id. The method (gate, scope, phases)
    is not in it, as a database run's id is the same whatever `export --db` measures it with."""
    head = f"{url}|{selection}|{span_ns[0]}|{span_ns[1]}|"
    return f"tsdb-{hashlib.sha256(head.encode() + windows).hexdigest()[:12]}"


def _windows_identity(args: argparse.Namespace, run: run_export.ExportedRun | None) -> bytes:
    """The windows in the run id: the run's id, else the file's bytes and the clock anchor that places a
    vllm file's times (another anchor, other windows)."""
    if run is not None:
        return run.id.encode()
    anchor = args.clock_anchor
    placed = f"|{anchor.wall_ns}:{anchor.mono_ns}".encode() if anchor else b""
    return bytes(args.windows.read_bytes()) + placed


def _selection(args: argparse.Namespace) -> str:
    """What picks the samples out of the engine: the family, the nodes label and nodes, the matchers."""
    nodes = ",".join(sorted(args.nodes or ()))  # the same nodes in another order: the same samples
    return "|".join([args.metrics, args.nodes_label, nodes, args.series_matchers or ""])
