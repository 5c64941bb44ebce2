"""The `sparkwatch.run/1` export: every number is decided here, from tracks, windows and clock offsets."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.memory import MemoryStats, node_memory, peak_of_sum
from sparkwatch.core.power import PowerStats, scope_stats, window_stats
from sparkwatch.core.tracks import GpuTrack, MemTrack
from sparkwatch.core.windows import ScopeKind, Window, scope_for

SCHEMA = "sparkwatch.run/1"
GIB = 1024**3
LOW_CONFIDENCE_INTERVALS = 2.0
CLOCK_UNCERTAINTY_RATIO = 0.01
INCOMPLETE_COVERAGE = 0.95
LMX_NOTES_MAX = 2000
UTIL_SOURCE = "nvml.utilization.gpu"


#: What a run measures unless it asks otherwise: the sampling interval it leases from the agents, the
#: utilisation the gate lets through, the scope.
DEFAULT_INTERVAL_S = 0.1
DEFAULT_GATE_THRESHOLD = 0.5
DEFAULT_SCOPE: ScopeKind = "request"


@dataclass(frozen=True, slots=True)
class RunSpec:
    id: str
    name: str
    t_start_ns: int
    t_end_ns: int
    interval_s: float
    gate_threshold: float = DEFAULT_GATE_THRESHOLD
    scope: ScopeKind = DEFAULT_SCOPE
    phases: frozenset[str] = frozenset({"timed"})
    command: dict[str, Any] | None = None  # the wrapped benchmark command and its exit code, when known


@dataclass(frozen=True, slots=True)
class NodeInput:
    node: str
    gpus: Sequence[GpuTrack]
    gpu_uuids: Sequence[str]
    memory: MemTrack
    clock: ClockOffset | None
    memory_model: str = "unknown"
    hardware: dict[str, Any] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)


def _sum(values: Sequence[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else float(sum(v for v in values if v))


def _worst(values: Sequence[float | None], pick: Any) -> float | None:
    """The worst of the per-GPU values, or ``None`` when any of them is unknown."""
    if not values or any(v is None for v in values):
        return None
    return float(pick(v for v in values if v is not None))


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _node_power(stats: Sequence[PowerStats]) -> dict[str, Any]:
    """A node's figures: per-GPU figures summed (a GB10 has one GPU, so they are its own)."""
    methods = {s.method for s in stats if s.method != "none"}
    return {
        "power_w": {
            "gated_mean": _round(_sum([s.gated_mean_w for s in stats])),
            "mean": _round(_sum([s.mean_w for s in stats])),
            "max": _round(_sum([s.max_w for s in stats])),
        },
        "energy_j": _round(_sum([s.energy_j for s in stats])),
        "energy_method": methods.pop() if len(methods) == 1 else ("mixed" if methods else "none"),
        "gated_s": _round(sum(s.gated_s for s in stats)),
        "excluded_s": _round(sum(s.excluded_s for s in stats)),
    }


def _null_reasons(stats: Sequence[PowerStats], threshold: float) -> dict[str, str]:
    reasons: dict[str, str] = {}
    if not stats:
        reasons["power_w"] = "no GPU samples from this node"
        return reasons
    if any(s.covered_s == 0 for s in stats):
        reasons["power_w.mean"] = "no valid sample interval inside the scope"
        reasons["energy_j"] = "no valid sample interval inside the scope"
    if any(s.gated_s == 0 for s in stats):
        reasons["power_w.gated_mean"] = f"no interval inside the scope with utilisation >= {threshold:g}"
    return reasons


def _memory_reasons(memory: MemoryStats) -> dict[str, str]:
    reasons: dict[str, str] = {}
    if memory.peak_bytes is None:
        reasons["memory_used_bytes"] = "no memory sample inside the scope"
    if memory.baseline_bytes is None:
        reasons["memory_used_bytes.baseline"] = "no memory sample in the 10 s before the first window"
    return reasons


def verdict(
    length_s: float, coverages: Sequence[float | None], interval_s: float, uncertainty_s: float
) -> tuple[str, list[str]]:
    reasons: list[str] = []
    incomplete = [c for c in coverages if c is None or c < INCOMPLETE_COVERAGE]
    if incomplete:
        worst = min((c for c in coverages if c is not None), default=0.0)
        reasons.append(f"coverage {worst:.3f} < {INCOMPLETE_COVERAGE} on {len(incomplete)} node(s)")
    if length_s < LOW_CONFIDENCE_INTERVALS * interval_s:
        reasons.append(f"shorter ({length_s:.3f} s) than {LOW_CONFIDENCE_INTERVALS:g} sampling intervals")
    if length_s > 0 and uncertainty_s > CLOCK_UNCERTAINTY_RATIO * length_s:
        reasons.append(f"clock uncertainty {uncertainty_s * 1e3:.2f} ms > 1 % of the window")
    if incomplete:
        return "incomplete", reasons
    return ("low_confidence", reasons) if reasons else ("ok", reasons)


def digest(export: dict[str, Any]) -> str:
    """sha256 of the export's canonical JSON without its ``lmx`` part (which quotes the digest)."""
    body = {k: v for k, v in export.items() if k != "lmx"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def build_export(
    run: RunSpec, nodes: Sequence[NodeInput], windows: Sequence[Window], sparkwatch_version: str
) -> dict[str, Any]:
    scope = scope_for(windows, run.scope, (run.t_start_ns, run.t_end_ns), run.phases)
    span_kind: ScopeKind = "decode" if run.scope == "decode" else "request"
    # a window counts when its phase is measured and it has the stamps its scope needs (decode: tokens)
    measured = [w.phase in run.phases and not w.failed and w.span(span_kind) is not None for w in windows]
    in_scope = [w for w, m in zip(windows, measured, strict=True) if m]
    first_window = min((w.t_start_ns for w in in_scope), default=None)
    spans = [w.span(span_kind) or (w.t_start_ns, w.t_start_ns) for w in windows]
    starts = np.array([s[0] for s in spans], dtype=np.int64)
    ends = np.array([s[1] for s in spans], dtype=np.int64)

    node_json: list[dict[str, Any]] = []
    per_window: list[list[dict[str, Any]]] = [[] for _ in windows]
    gpu_power: list[float | None] = []
    mem_peaks: list[int | None] = []
    for node in nodes:
        integrals = [Integrals.build(track, run.gate_threshold) for track in node.gpus]
        stats = [scope_stats(i, scope) for i in integrals]
        gpu_power.extend(s.gated_mean_w for s in stats)
        memory = node_memory(node.memory, scope, first_window)
        mem_peaks.append(memory.peak_bytes)
        samples = [s.samples for s in stats] or [0]
        coverage = [s.coverage_ratio for s in stats]
        gaps = [s.max_gap_s for s in stats]
        node_json.append(
            {
                "node": node.node,
                "hardware": node.hardware,
                "memory_model": node.memory_model,
                "clock": node.clock.to_json() if node.clock else {"offset_ns": None, "uncertainty_ns": None},
                "unsupported": node.unsupported,
                **_node_power(stats),
                "memory_used_bytes": {
                    "baseline": memory.baseline_bytes,
                    "peak": memory.peak_bytes,
                    "mean": memory.mean_bytes,
                },
                "samples": {
                    "count": min(samples),
                    "coverage_ratio": _round(_worst(coverage, min), 4),
                    "max_gap_s": _round(_worst(gaps, max), 3),
                },
                "gpus": [
                    {
                        "uuid": uuid,
                        "power_w_gated_mean": _round(s.gated_mean_w),
                        "energy_j": _round(s.energy_j),
                        "gated_s": _round(s.gated_s),
                        "excluded_s": _round(s.excluded_s),
                    }
                    for uuid, s in zip(node.gpu_uuids, stats, strict=True)
                ],
                "null_reasons": {**_null_reasons(stats, run.gate_threshold), **_memory_reasons(memory)},
            }
        )
        per_gpu_windows = [window_stats(i, starts, ends) for i in integrals]
        for k in range(len(windows)):
            cov = [wp.coverage_ratio[k] for wp in per_gpu_windows]
            per_window[k].append(
                {
                    "node": node.node,
                    "power_w_gated_mean": _round(_sum([wp.gated_mean_w[k] for wp in per_gpu_windows])),
                    "energy_j": _round(_sum([wp.energy_j[k] for wp in per_gpu_windows])),
                    "coverage_ratio": _round(_worst(cov, min), 4),
                }
            )

    uncertainty_s = max((n.clock.uncertainty_ns for n in nodes if n.clock), default=0) / 1e9
    window_json = []
    for k, w in enumerate(windows):
        length_s = float(ends[k] - starts[k]) / 1e9
        if w.failed:
            v, reasons = "incomplete", [f"HTTP status {w.http_status}: a failed request is not measured"]
        elif w.span(span_kind) is None:
            v, reasons = (
                "incomplete",
                ["no first/last token stamps, so nothing to measure in the decode scope"],
            )
        else:
            v, reasons = verdict(
                length_s, [p["coverage_ratio"] for p in per_window[k]], run.interval_s, uncertainty_s
            )
        window_json.append(
            {
                **w.to_json(),
                "in_scope": measured[k],
                "verdict": v,
                "reasons": reasons,
                "nodes": per_window[k],
            }
        )

    energy_total = _sum([n["energy_j"] for n in node_json])
    tokens = [w.completion_tokens for w in in_scope]
    completion = (
        sum(t for t in tokens if t is not None) if tokens and all(t is not None for t in tokens) else None
    )
    peak_sum = None if not mem_peaks or any(p is None for p in mem_peaks) else sum(p for p in mem_peaks if p)
    power_sum = _sum([n["power_w"]["gated_mean"] for n in node_json])
    peak_of = peak_of_sum([n.memory for n in nodes], scope)
    totals_reasons: dict[str, str] = {}
    if completion is None:
        totals_reasons["completion_tokens"] = "a measured window has no completion token count"
    if energy_total is None:
        totals_reasons["energy_j"] = "a node's energy is unknown (see its null_reasons)"
    if power_sum is None:
        totals_reasons["power_w_gated_mean_sum"] = "a node's gated power is unknown (see its null_reasons)"
    if peak_sum is None:
        totals_reasons["memory_used_bytes_peak_sum"] = "a node has no memory sample inside the scope"
    if peak_of is None:
        totals_reasons["memory_used_bytes_peak_of_sum"] = (
            "no time inside the scope when every node had a reading"
        )
    if energy_total is None or not completion:
        totals_reasons["joules_per_token"] = "needs the energy and a non-zero completion token count"
    export: dict[str, Any] = {
        "schema": SCHEMA,
        "run": {
            "id": run.id,
            "name": run.name,
            "command": run.command,
            "t_start_ns": run.t_start_ns,
            "t_end_ns": run.t_end_ns,
            "sparkwatch_version": sparkwatch_version,
        },
        "method": {
            "scope": run.scope,
            "phases": sorted(run.phases),
            "scope_s": _round(scope.seconds),
            "gate": {"threshold_ratio": run.gate_threshold, "source": UTIL_SOURCE},
            "interval_s": run.interval_s,
            "gap_intervals": 3,
        },
        "nodes": node_json,
        "windows": window_json,
        "totals": {
            "power_w_gated_mean_sum": _round(power_sum),
            "energy_j": _round(energy_total),
            "memory_used_bytes_peak_sum": peak_sum,
            "memory_used_bytes_peak_of_sum": peak_of,
            "completion_tokens": completion,
            "joules_per_token": _round(energy_total / completion, 4)
            if energy_total is not None and completion
            else None,
            "null_reasons": totals_reasons,
        },
    }
    export["lmx"] = {
        "gpuPowerWatts": [_round(p, 1) for p in gpu_power],
        "peakVramGb": round(peak_sum / GIB, 1) if peak_sum is not None else None,
        "notes": _lmx_notes(run, sparkwatch_version, digest(export)),
    }
    return export


def _lmx_notes(run: RunSpec, version: str, sha: str) -> str:
    text = (
        f"Measured by sparkwatch {version} (run {run.id}, export sha256 {sha}). GPU power: NVML GPU-rail"
        f" power per node, energy-counter dE/dt between samples (trapezoid where no counter), averaged over"
        f" intervals with {UTIL_SOURCE} >= {run.gate_threshold:g} inside the {run.scope} scope of"
        f" {', '.join(sorted(run.phases))} requests; sampled every {run.interval_s:g} s, clocks aligned by"
        f" round-trip probes. Memory: MemTotal - MemAvailable per node (unified memory), peak per node,"
        f" summed."
    )
    return text[:LMX_NOTES_MAX]
