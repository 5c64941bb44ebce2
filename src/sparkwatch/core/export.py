"""The `sparkwatch.run/1` export: every number is decided here, from tracks, windows and clock offsets."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from sparkwatch.core.clock import NodeClock
from sparkwatch.core.domains import DomainFigures, headline_entry
from sparkwatch.core.engine import EngineSamples, attach_engine
from sparkwatch.core.export_nodes import NodeFigures, Plan, longest_interval_s, node_figures, spans
from sparkwatch.core.export_totals import Measured, totals
from sparkwatch.core.integrals import MAX_PLAUSIBLE_GPU_W
from sparkwatch.core.json_pieces import canonical, json_pieces
from sparkwatch.core.memory import peak_of_sum
from sparkwatch.core.phases import as_known, token_spans
from sparkwatch.core.power import INCOMPLETE_COVERAGE, falls_short
from sparkwatch.core.rounding import ratio_text, rounded
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.series import Frame, node_series, series_block, series_frame
from sparkwatch.core.tracks import F64, GAP_INTERVALS, MemTrack
from sparkwatch.core.window_rows import WindowRows, WindowsTap
from sparkwatch.core.windows import Window, scope_for, union
from sparkwatch.defaults import EXPORT_SCHEMA, OPEN_RUN_NOTE, UTIL_SOURCE, ScopeKind
from sparkwatch_agent.shared.units import lmx_gb, one_decimal

LOW_CONFIDENCE_INTERVALS = 2.0
CLOCK_UNCERTAINTY_RATIO = 0.01
#: The length sparkwatch keeps lmx notes to: the figure the lmx site's form is said to take (lmx's CLI checks
#: none, and its server schema could not be read: docs/integrations.md).
LMX_NOTES_MAX_CHARS = 2000
NO_DECODE_STAMPS = "no first/last token stamps, so nothing to measure in the decode scope"


def verdict(
    length_s: float,
    coverages: Sequence[float | None],
    interval_s: float,
    uncertainty_s: float,
    suspects: Sequence[str] = (),
) -> tuple[str, list[str]]:
    """``ok``, ``low_confidence`` (too short, clocks too uncertain for it, or ``suspects``: a clock that
    stepped or whose probes disagree around it, power rejected as implausible) or ``incomplete`` (a node
    did not cover it), with the reasons."""
    reasons: list[str] = []
    incomplete = [c for c in coverages if c is None or falls_short(c)]
    if incomplete:
        worst = min(0.0 if c is None else c for c in incomplete)  # None: nothing to cover it with
        reasons.append(f"coverage {ratio_text(worst)} < {INCOMPLETE_COVERAGE} on {len(incomplete)} node(s)")
    if length_s < LOW_CONFIDENCE_INTERVALS * interval_s:
        reasons.append(
            f"shorter ({length_s:.3f} s) than {LOW_CONFIDENCE_INTERVALS:g} sampling intervals"
            f" ({interval_s:g} s each)"
        )
    if length_s > 0 and uncertainty_s > CLOCK_UNCERTAINTY_RATIO * length_s:
        reasons.append(f"clock uncertainty {uncertainty_s * 1e3:.2f} ms > 1 % of the window")
    reasons.extend(suspects)
    if incomplete:
        return "incomplete", reasons
    return ("low_confidence", reasons) if reasons else ("ok", reasons)


#: What the digest leaves out: ``lmx`` quotes it; ``series`` is plot data, optional, not the measurement.
UNDIGESTED = ("lmx", "series")


def digest(export: dict[str, Any]) -> str:
    """sha256 of the export's canonical JSON without its ``lmx`` part (which quotes the digest) and its
    ``series`` block: the digest names the measurement, the same with or without the plot data."""
    body = {k: v for k, v in export.items() if k not in UNDIGESTED}
    sha = hashlib.sha256()
    for piece in json_pieces(body, canonical):  # never the GIL held for the whole export at once
        sha.update(piece)
    return sha.hexdigest()


def quoted_digest(notes: Any) -> str | None:
    """The export sha256 lmx notes quote (``_lmx_notes`` writes it), None where they quote none."""
    found = re.search(r"export sha256 ([0-9a-f]{64})", notes) if isinstance(notes, str) else None
    return found.group(1) if found else None


def build_export(
    run: RunSpec,
    nodes: Iterable[NodeInput],
    windows: Sequence[Window],
    sparkwatch_version: str,
    engine: EngineSamples | None = None,
    *,
    series_buckets: int | None = None,
    source: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
    windows_tap: WindowsTap | None = None,
) -> dict[str, Any]:
    """The export; with ``series_buckets`` its ``series`` block (core/series.py) in that many buckets over
    the run; with ``source`` (sources/) its ``source`` block. Without them, what it was before either.
    ``nodes`` is taken one at a time (a source may read each as it is asked): of a node's samples only its
    memory track is kept past its own figures, for the peak of the sum over nodes. A ``run`` without a
    nominal interval (``interval_s`` 0: a TSDB's scrapes) takes the longest interval the nodes' samples
    show (the windows' verdicts are made after every node is measured). ``source`` may be a function: what
    the source says of itself once every node is read (which series it found). ``windows_tap`` is handed
    every slice of windows made, the digest's pass first."""
    plan = _plan(run, windows)
    frame = None if series_buckets is None else series_frame(run, windows, series_buckets)
    run, measured = _measured(run, nodes, plan, frame)
    figures, memory, clocks, plotted = measured
    if callable(source):
        source = source()
    in_scope = [w for w, m in zip(windows, plan.measured, strict=True) if m]
    export: dict[str, Any] = {
        "schema": EXPORT_SCHEMA,
        "run": _run_json(run, sparkwatch_version),
        "method": {
            "scope": run.scope,
            "phases": sorted(run.phases),
            "scope_s": rounded(plan.scope.seconds),
            "gate": {"threshold_ratio": run.gate_threshold, "source": _gate_source(source)},
            "interval_s": run.interval_s,
            "gap_intervals": GAP_INTERVALS,
        },
        **({"source": source} if source is not None else {}),
        "nodes": [f.json for f in figures],
        "windows": [],  # made below, once the engine's entries are known (its key keeps this place)
        "totals": totals(
            figures,
            Measured(windows, in_scope, run.phases, run.scope),
            peak_of_sum(memory, plan.scope),
        ),
    }
    engine_entries = attach_engine(
        export, engine, (plan.scope.starts, plan.scope.ends), (plan.starts, plan.ends)
    )
    export["windows"] = _windows_json(
        run, windows, figures, plan, clocks, engine=engine_entries, tap=windows_tap
    )
    export["lmx"] = _lmx(run, sparkwatch_version, export, figures, source)  # last: it quotes the digest
    if frame is not None:
        export["series"] = series_block(frame, plotted)
    return export


_Measured = tuple[list[NodeFigures], list[MemTrack], list[tuple[str, NodeClock]], list[dict[str, Any]]]


def _measured(
    run: RunSpec, nodes: Iterable[NodeInput], plan: Plan, frame: Frame | None
) -> tuple[RunSpec, _Measured]:
    """Each node's figures, memory track, clock and series, a node at a time; the run with the longest
    interval the samples show where it had none (a TSDB's scrapes)."""
    if frame is not None and run.interval_s <= 0:
        raise ValueError("the series block needs the run's sample interval before any node is drawn")
    figures, memory, clocks, plotted, seen = [], [], [], [], []
    for node in nodes:
        figures.append(node_figures(node, plan))
        memory.append(node.memory.used_only())
        clocks.append((node.node, node.clock))
        if frame is not None:
            plotted.append(node_series(node, run, plan.scope, frame))
        if run.interval_s <= 0:
            seen.append(longest_interval_s(node.gpus, (run.t_start_ns, run.t_end_ns)))
        del node  # not held while the next is read
    if run.interval_s <= 0:
        run = dataclasses.replace(run, interval_s=max(seen, default=0.0))
    return run, (figures, memory, clocks, plotted)


def _plan(run: RunSpec, windows: Sequence[Window]) -> Plan:
    span_kind: ScopeKind = "decode" if run.scope == "decode" else "request"
    # a window counts when its phase is measured and it has the stamps its scope needs (decode: tokens)
    measured = [w.phase in run.phases and not w.failed and w.span(span_kind) is not None for w in windows]
    window_spans = [w.span(span_kind) or (w.t_start_ns, w.t_start_ns) for w in windows]
    starts, ends = spans([s[0] for s in window_spans], [s[1] for s in window_spans])
    first = min((w.t_start_ns for w, m in zip(windows, measured, strict=True) if m), default=None)
    before_first = union(
        (w.t_start_ns, w.t_end_ns) for w in windows if first is not None and w.t_start_ns < first
    )
    return Plan(
        scope=scope_for(windows, run.scope, (run.t_start_ns, run.t_end_ns), run.phases),
        gate_threshold=run.gate_threshold,
        span_kind=span_kind,
        measured=measured,
        first_window_ns=first,
        before_first=before_first,
        starts=starts,
        ends=ends,
        tokens=token_spans(windows, measured, run.phases),
        span_ns=(run.t_start_ns, run.t_end_ns),
    )


def _run_json(run: RunSpec, version: str) -> dict[str, Any]:
    out: dict[str, Any] = {"id": run.id, "name": run.name, "command": run.command}
    out.update(t_start_ns=run.t_start_ns, t_end_ns=run.t_end_ns, sparkwatch_version=version)
    if not run.ended:  # the keys in this order: the export's file and digest keep it
        out["notes"] = [OPEN_RUN_NOTE]
    return out


def _gate_source(source: dict[str, Any] | None) -> str:
    """The series the gate reads: NVML's utilisation, unless a TSDB source maps another (e.g. DCGM's)."""
    gate = (source or {}).get("gate_series")
    return gate if isinstance(gate, str) else UTIL_SOURCE


def _lmx(
    run: RunSpec,
    version: str,
    export: dict[str, Any],
    figures: Sequence[NodeFigures],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The export's ``lmx`` part: what the lmx form takes, its notes quoting the digest of the rest."""
    peak_sum = export["totals"]["memory_used_bytes_peak_sum"]
    sha = digest(export)
    tsdb = source is not None and source.get("kind") not in (None, "sqlite")
    system = _system_note(export)
    if tsdb:
        notes = _tsdb_notes(run, version, sha, source or {}, system)
    else:
        notes = _lmx_notes(run, version, sha, system)
    return {
        "gpuPowerWatts": [rounded(p, 1) for f in figures for p in f.gpu_power_w],
        "peakVramGb": lmx_gb(peak_sum) if peak_sum is not None else None,
        "notes": notes,
    }


def with_run_notes(export: dict[str, Any], notes: Sequence[str]) -> dict[str, Any]:
    """The export with ``notes`` appended to ``run.notes`` (what the client that ran the benchmark knows
    and the coordinator does not, e.g. a check of one window source against another), the sha256 that
    ``lmx.notes`` quotes made true again. The coordinator's own re-export does not carry them."""
    if not notes:
        return export
    out = {**export, "run": {**export["run"], "notes": [*export["run"].get("notes", []), *notes]}}
    lmx = out.get("lmx")
    if isinstance(lmx, dict) and (old := quoted_digest(lmx.get("notes"))) is not None:
        # the sha256 the notes quote, read there: not the whole export encoded again to find it
        out["lmx"] = {**lmx, "notes": lmx["notes"].replace(old, digest(out))}
    return out


def _windows_json(
    run: RunSpec,
    windows: Sequence[Window],
    figures: Sequence[NodeFigures],
    plan: Plan,
    clocks: Sequence[tuple[str, NodeClock]],
    *,
    engine: Sequence[dict[str, Any] | None],
    tap: WindowsTap | None = None,
) -> WindowRows[dict[str, Any]]:
    """The export's ``windows``: each window's fields, verdict, node entries, split and engine entry, made
    a slice of windows at a time from the nodes' columns (core.window_rows)."""
    uncertainty_s = max((c.uncertainty_ns or 0 for _, c in clocks), default=0) / 1e9
    # a window is judged against the samples' interval, or a slower counter's (an exporter's collection)
    interval_s = max([run.interval_s, *(f.counter_interval_s for f in figures if f.counter_interval_s)])
    lengths_s = (plan.ends - plan.starts) / 1e9
    partial = [_partial_windows(str(f.json["node"]), f.system, lengths_s) for f in figures]
    prefill, decode = _window_splits(figures, len(windows))
    windows = list(windows)  # its own: a caller may empty its list once the export is made (let_go)
    doubted = [(name, clock) for name, clock in clocks if clock.steps or clock.disagreements]  # most: none

    def judged(k: int, w: Window, entries: Sequence[dict[str, Any]]) -> tuple[str, list[str]]:
        failure = w.failure()
        if failure is not None:
            return "incomplete", [failure]
        if w.span(plan.span_kind) is None:
            return "incomplete", [NO_DECODE_STAMPS]
        length_s = float(plan.ends[k] - plan.starts[k]) / 1e9
        coverages = [e["coverage_ratio"] for e in entries]
        suspects = [f"{n}: {why}" for n, clock in doubted for why in clock.suspects(w.t_start_ns, w.t_end_ns)]
        suspects += [
            f"{e['node']}: {e['implausible_intervals']} interval(s) below 0 or above"
            f" {MAX_PLAUSIBLE_GPU_W:g} W per GPU rejected"
            for e in entries
            if e["implausible_intervals"]
        ]
        suspects += [f"{e['node']}: {flag}" for e in entries for flag in e["throttle"]]
        suspects += [why[k] for why in partial if k in why]
        return verdict(length_s, coverages, interval_s, uncertainty_s, suspects)

    def make(lo: int, hi: int) -> list[dict[str, Any]]:
        out = []
        per_node = [f.windows.between(lo, hi) for f in figures]
        for k in range(lo, hi):
            w = windows[k]
            entries = [node[k - lo] for node in per_node]
            v, reasons = judged(k, w, entries)
            window = {**w.to_json(), "in_scope": plan.measured[k], "verdict": v, "reasons": reasons}
            window["nodes"] = entries
            window.update(_split_json(w, prefill[k], decode[k], len(figures)))
            window["engine"] = engine[k]
            out.append(window)
        if tap is not None:
            tap(lo, out)
        return out

    return WindowRows(len(windows), make, held=(windows,))


def _partial_windows(node: str, system: DomainFigures, lengths_s: F64) -> dict[int, str]:
    """The windows a node's whole-node (headline) domain covers less of than a figure needs (a wall meter
    that stopped answering, a sensor that failed), or that are shorter than two of a meter's readings (its
    poll interval, or the BMC's refresh period when longer: the figure is one or two readings, or a reading
    older than the window), with the reason: the GPU figures are whole, the node's whole draw is not, so
    such a window is ``low_confidence``. A rail or CPU channel's gap judges nothing. Found over the
    coverage column at once (10 000 windows × nodes)."""
    coverage = system.headline_window_coverage
    if coverage is None:
        return {}
    with np.errstate(invalid="ignore"):
        short = np.flatnonzero(falls_short(coverage))  # NaN: no interval in it
    name, threshold = f"{node} {system.headline}", INCOMPLETE_COVERAGE
    out = {
        k: f"{name}: no interval" if np.isnan(c) else f"{name}: coverage {ratio_text(c)} < {threshold}"
        for k, c in zip(short.tolist(), coverage[short].tolist(), strict=True)
    }
    reading_s = system.headline_reading_s
    if reading_s is not None:
        brief = np.flatnonzero(lengths_s < LOW_CONFIDENCE_INTERVALS * reading_s)
        # "than 2 readings (1 s apart)" read as a contradiction for a 1.7 s window, which holds two readings
        n, need_s = LOW_CONFIDENCE_INTERVALS, LOW_CONFIDENCE_INTERVALS * reading_s
        apart = f"{n:g} reading intervals ({need_s:g} s: a reading every {reading_s:g} s)"
        for k, length_s in zip(brief.tolist(), lengths_s[brief].tolist(), strict=True):
            out.setdefault(k, f"{name}: shorter ({length_s:.3f} s) than {apart}")
    return out


def _window_splits(figures: Sequence[NodeFigures], n: int) -> tuple[list[float | None], list[float | None]]:
    """Each window's prefill and decode GPU energy: the nodes' sums, unknown when any node's is."""
    if not figures:
        return [None] * n, [None] * n
    prefill, decode = (np.sum([f.split_j[i] for f in figures], axis=0) for i in (0, 1))
    return as_known(prefill), as_known(decode)


def _split_json(w: Window, prefill: float | None, decode: float | None, nodes: int) -> dict[str, Any]:
    """A window's split, with why either part is unknown: a stamp it lacks, or a node without coverage."""
    reasons: dict[str, str] = {}
    if prefill is None or decode is None:
        missing = [name for name in ("t_first_token_ns", "t_last_token_ns") if getattr(w, name) is None]
        why = f"{' and '.join(missing)} unknown" if missing else "a node has no valid sample interval in it"
        why = why if nodes else "no node"
        reasons = {
            k: why for k, v in (("prefill_energy_j", prefill), ("decode_energy_j", decode)) if v is None
        }
    return {"prefill_energy_j": rounded(prefill), "decode_energy_j": rounded(decode), "null_reasons": reasons}


def _system_note(export: dict[str, Any]) -> str:
    """What the notes say of system power: each node's headline domain and the totals, when any node has
    one (gpuPowerWatts stays GPU-rail power)."""
    if not any(node.get("system") for node in export["nodes"]):
        return ""
    parts = []
    for node in export["nodes"]:
        domain = headline_entry(node)
        if domain is not None:
            watts = domain["power_w"]["gated_mean"]
            shown = f"{one_decimal(watts)} W" if watts is not None else "n/a"
            parts.append(f"{node['node']} {shown} ({domain['domain']}, {domain['source']})")
        else:
            parts.append(f"{node['node']} n/a (no sensor)")
    totals = export["totals"]
    energy, per_token = totals.get("system_energy_j"), totals.get("system_joules_per_token")
    return (
        f" System power (whole node, GPU rail included, not in gpuPowerWatts), gated like GPU power: "
        f"{'; '.join(parts)}; system energy {f'{one_decimal(energy)} J' if energy is not None else 'n/a'},"
        f" {f'{per_token:.3f} J/token' if per_token is not None else 'J/token n/a'}."
    )


def _tsdb_notes(run: RunSpec, version: str, sha: str, source: dict[str, Any], system: str = "") -> str:
    """The notes of an export read from a TSDB: what was read, at what resolution, on whose clock."""
    text = (
        f"Measured by sparkwatch {version} (run {run.id}, export sha256 {sha}) from the"
        f" {source.get('metrics')} series in {source.get('kind')}: GPU power per node, energy-counter dE/dt"
        f" between samples (trapezoid where no counter), averaged over intervals with"
        f" {_gate_source(source)} >= {run.gate_threshold:g} inside the {run.scope} scope of"
        f" {', '.join(sorted(run.phases))} requests; sampled about every {run.interval_s:g} s, on the"
        f" engine's timestamps (no clock probes by the export). Memory: {source.get('memory_series', 'n/a')}."
        f"{system}"
    )
    return text[:LMX_NOTES_MAX_CHARS]


def _lmx_notes(run: RunSpec, version: str, sha: str, system: str = "") -> str:
    text = (
        f"Measured by sparkwatch {version} (run {run.id}, export sha256 {sha}). GPU power: NVML GPU-rail"
        f" power per node, energy-counter dE/dt between samples (trapezoid where no counter), averaged over"
        f" intervals with {UTIL_SOURCE} >= {run.gate_threshold:g} inside the {run.scope} scope of"
        f" {', '.join(sorted(run.phases))} requests; sampled every {run.interval_s:g} s, clocks aligned by"
        f" round-trip probes. Memory: MemTotal - MemAvailable per node (unified memory), peak per node,"
        f" summed.{system}"
    )
    return text[:LMX_NOTES_MAX_CHARS]
