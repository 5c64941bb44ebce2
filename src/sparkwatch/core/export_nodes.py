"""Each node's part of the export: its figures over the scope and its entry in every window."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkwatch.core.baseline import above_idle_j, idle_power_w, no_baseline
from sparkwatch.core.columns import int_column
from sparkwatch.core.domains import NO_SENSOR, DomainFigures, domain_figures
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.intervals import (
    RHYTHM_SPACINGS,
    collection_interval_s,
    counter_interval_s,
    counter_moves,
    seen_interval_s,
)
from sparkwatch.core.memory import MemoryStats, node_memory
from sparkwatch.core.phases import TokenSpans, node_split, window_split
from sparkwatch.core.power import PowerStats, WindowPower, scope_stats, summed_max_w, window_stats
from sparkwatch.core.rounding import floored, floored_list, rounded, rounded_list
from sparkwatch.core.run_spec import NodeInput
from sparkwatch.core.throttle import window_signals
from sparkwatch.core.tracks import F64, I64, GpuTrack
from sparkwatch.core.window_rows import WindowRows
from sparkwatch.core.windows import Scope
from sparkwatch.defaults import ScopeKind

NO_WINDOW_INTERVAL = "no valid sample interval in the window"


@dataclass(frozen=True, slots=True)
class Plan:
    """What every node is measured against: the scope, and each window's measured span."""

    scope: Scope
    gate_threshold: float
    span_kind: ScopeKind  # the part of each window measured: request or decode
    measured: list[bool]  # per window: in the scope's phases, not failed, with the stamps its span needs
    first_window_ns: int | None  # the baseline period (memory, idle power) ends here
    before_first: Scope  # every request's span that starts before it: no idle interval shares its time
    starts: I64
    ends: I64
    tokens: TokenSpans  # each window's prefill and decode spans, and the run's unions of them
    span_ns: tuple[int, int] | None = None  # the run's: where the sample interval is seen


@dataclass(frozen=True, slots=True)
class NodeFigures:
    json: dict[str, Any]  # the node's entry in ``nodes``
    windows: WindowRows[dict[str, Any]]  # its entry in each window's ``nodes``, in window order
    gpu_power_w: list[float | None]  # gated mean per GPU, for lmx
    memory_peak_bytes: int | None
    system: DomainFigures  # the node's power domains beside the GPU rail
    split_j: tuple[F64, F64]  # per window: prefill and decode energy (NaN = unknown), for the windows' sums
    counter_interval_s: float | None  # its slowest GPU counter's, where coarse (the verdict's interval)


def sum_known(values: Sequence[float | None]) -> float | None:
    """The sum, or ``None`` when any value is unknown (or there is none)."""
    return None if not values or any(v is None for v in values) else float(sum(v for v in values if v))


def worst_known(values: Sequence[float | None], pick: Callable[..., Any]) -> float | None:
    """The worst of the per-GPU values, or ``None`` when any of them is unknown."""
    if not values or any(v is None for v in values):
        return None
    return float(pick(v for v in values if v is not None))


#: Counter moves inside the run that tell its counter's spacing; with fewer, the whole read's is taken.
COUNTER_MOVES = 3


def resolution_s(
    track: GpuTrack, span_ns: tuple[int, int] | None = None
) -> tuple[float | None, float | None]:
    """The interval a track's figures resolve (its samples', or its counter's where that is slower), and
    its counter's where that is the slower one, seen inside ``span_ns`` (the run's). Without a counter its
    power readings stand in where they move at a rhythm: an exporter that serves one collection to several
    scrapes repeats them as it would the counter (``collection_interval_s``)."""
    part = _inside(track, span_ns)
    seen = seen_interval_s(part.t_ns, part.segment) or seen_interval_s(track.t_ns, track.segment)
    has_counter = bool(np.isfinite(track.energy_j).any())

    def moving(t: GpuTrack) -> F64:
        return t.energy_j if has_counter else t.power_w

    needed = COUNTER_MOVES if has_counter else RHYTHM_SPACINGS + 1  # readings: enough for a rhythm
    if len(counter_moves(moving(part), part.segment)) < needed:  # a run shorter than a few
        part = track  # collections: its counter's spacing is read over the whole read (idle time too)
    interval_of = counter_interval_s if has_counter else collection_interval_s
    counter = interval_of(part.t_ns, part.segment, moving(part), seen)
    return (None if seen is None else max(seen, counter or 0.0)), counter


def longest_interval_s(tracks: Iterable[GpuTrack], span_ns: tuple[int, int] | None = None) -> float:
    """The longest sample interval the tracks show inside ``span_ns`` (the run's: a TSDB's scrape interval,
    or the run's rate remote-written, not an idle agent's before it), to the ms; 0 when none does."""
    seen = [
        seen_interval_s(part.t_ns, part.segment) or seen_interval_s(g.t_ns, g.segment)
        for g, part in ((g, _inside(g, span_ns)) for g in tracks)
    ]
    return round(max((s for s in seen if s), default=0.0), 3)


def _inside(track: GpuTrack, span_ns: tuple[int, int] | None) -> GpuTrack:
    """The track's samples inside ``span_ns``; the whole track without a span, or where fewer than two
    samples fall inside it (a run shorter than two scrapes: the spacing around it is all there is)."""
    if span_ns is None:
        return track
    lo, hi = np.searchsorted(track.t_ns, span_ns[0], "left"), np.searchsorted(track.t_ns, span_ns[1], "right")
    if hi - lo < 2:
        return track
    return dataclasses.replace(
        track,
        t_ns=track.t_ns[lo:hi],
        segment=track.segment[lo:hi],
        max_gap_ns=track.max_gap_ns[lo:hi],
        power_w=track.power_w[lo:hi],
        energy_j=track.energy_j[lo:hi],
        util_ratio=track.util_ratio[lo:hi],
    )


def node_figures(node: NodeInput, plan: Plan) -> NodeFigures:
    integrals = [Integrals.build(track, plan.gate_threshold) for track in node.gpus]
    stats = [scope_stats(i, plan.scope) for i in integrals]
    idle_and_why = [idle_power_w(i, plan.first_window_ns, plan.before_first) for i in integrals]
    idle = [w for w, _ in idle_and_why]
    idle_why = [why for _, why in idle_and_why if why is not None]
    memory = node_memory(node.memory, plan.scope, plan.first_window_ns)
    cache = node_memory(node.memory, plan.scope, plan.first_window_ns, node.memory.page_cache_bytes)
    max_w = stats[0].max_w if len(stats) == 1 else summed_max_w(integrals, plan.scope)
    resolved = [resolution_s(g, plan.span_ns) for g in node.gpus]
    interval_s = worst_known([r for r, _ in resolved], max)
    json = _node_json(
        node, stats, idle, (memory, cache), plan.gate_threshold, max_w=max_w, interval_s=interval_s
    )
    json["null_reasons"].update(_memory_reasons("memory_used_bytes", memory, plan.first_window_ns))
    json["null_reasons"].update(_memory_reasons("memory_page_cache_bytes", cache, plan.first_window_ns))
    json.update(_idle_and_split(json, integrals, plan, idle_why))
    split = window_split(integrals, plan.tokens)
    per_gpu = [window_stats(i, plan.starts, plan.ends) for i in integrals]
    del integrals  # a GPU's integrals are a dozen columns its samples' length: gone before the domains'
    system = domain_figures(
        node.domains,
        plan.scope,
        plan.gate_threshold,
        plan.starts,
        plan.ends,
        baseline=(plan.first_window_ns, plan.before_first),
    )
    json["system"] = system.system
    json["null_reasons"].update(system.null_reasons)
    if system.system is None:
        json["null_reasons"]["system"] = NO_SENSOR
    signals = window_signals(node.signals, plan.starts, plan.ends)
    no_util = json["null_reasons"].get("power_w.gated_mean", "")
    gate_why = (  # why a window's gated mean is unknown where its energy is known
        no_util
        if no_util.startswith("no utilisation sample")
        else f"no interval in the window with the node's GPU utilisation >= {plan.gate_threshold:g}"
    )
    windows = _window_entries(node.node, per_gpu, plan, split, (system, signals), gate_why=gate_why)
    return NodeFigures(
        json=json,
        windows=windows,
        gpu_power_w=[s.gated_mean_w for s in stats],
        memory_peak_bytes=memory.peak_bytes,
        system=system,
        split_j=split,
        counter_interval_s=max((c for _, c in resolved if c), default=None),
    )


def _node_json(
    node: NodeInput,
    stats: Sequence[PowerStats],
    idle: Sequence[float | None],
    memory: tuple[MemoryStats, MemoryStats],
    threshold: float,
    *,
    max_w: float | None,
    interval_s: float | None,
) -> dict[str, Any]:
    return {
        "node": node.node,
        "hardware": node.hardware,
        "memory_model": node.memory_model,
        "clock": node.clock.to_json(),
        "unsupported": node.unsupported,
        **_node_power(stats, max_w),
        **{
            key: {"baseline": m.baseline_bytes, "peak": m.peak_bytes, "mean": m.mean_bytes}
            for key, m in zip(("memory_used_bytes", "memory_page_cache_bytes"), memory, strict=True)
        },
        "samples": {
            "count": min([s.samples for s in stats] or [0]),
            "coverage_ratio": floored(worst_known([s.coverage_ratio for s in stats], min)),
            "max_gap_s": rounded(worst_known([s.max_gap_s for s in stats], max), 3),
            "implausible_intervals": sum(s.implausible for s in stats),
            "interval_s": rounded(interval_s, 4),
        },
        "gpus": [
            {
                "uuid": uuid,
                "power_w_gated_mean": rounded(s.gated_mean_w),
                "energy_j": rounded(s.energy_j),
                "gated_s": rounded(s.gated_s),
                "excluded_s": rounded(s.excluded_s),
                "idle_power_w": rounded(w),
                "energy_above_idle_j": rounded(above_idle_j(s.energy_j, w, s.covered_s)),
            }
            for uuid, s, w in zip(node.gpu_uuids, stats, idle, strict=True)
        ],
        "null_reasons": _null_reasons(stats, threshold, _without_util(node), max_w),
    }


def _idle_and_split(
    json: dict[str, Any], integrals: Sequence[Integrals], plan: Plan, idle_why: Sequence[str]
) -> dict[str, Any]:
    """The node's idle power and energy above it (per-GPU sums, from its ``gpus``), and its prefill/decode
    split over the run's token spans (core.phases), with the reasons of those unknown."""
    gpus = json["gpus"]
    idle = sum_known([g["idle_power_w"] for g in gpus])
    above = sum_known([g["energy_above_idle_j"] for g in gpus])
    prefill, decode = node_split(integrals, plan.tokens)
    reasons = json["null_reasons"]
    if idle is None:
        reasons["idle_power_w"] = "; ".join(dict.fromkeys(idle_why)) or "no GPU samples from this node"
    if above is None:
        needs = "idle power (see idle_power_w)" if idle is None else "energy (see energy_j)"
        reasons["energy_above_idle_j"] = f"needs the {needs}"
    for key, value in (("prefill_energy_j", prefill), ("decode_energy_j", decode)):
        if value is None:
            reasons[key] = plan.tokens.unknown_why or "a GPU has no valid sample interval in the phase"
    return {
        "idle_power_w": rounded(idle),
        "energy_above_idle_j": rounded(above),
        "prefill_energy_j": rounded(prefill),
        "decode_energy_j": rounded(decode),
    }


def _window_entries(
    name: str,
    per_gpu: Sequence[WindowPower],
    plan: Plan,
    split: tuple[F64, F64],
    beside: tuple[DomainFigures, WindowRows[dict[str, Any]]],
    *,
    gate_why: str,
) -> WindowRows[dict[str, Any]]:
    """The node's entry in each window: its GPUs' figures summed (unknown when any GPU's is), the worst
    coverage, its domains' and its clock signals' entries, and why a power or energy in it is null
    (``gate_why`` where only the gate left it so); kept as columns, made a slice at a time."""
    unknown = np.full(len(plan.starts), np.nan)
    gated, energy, coverage = (
        reduce([getattr(wp, field) for wp in per_gpu], axis=0) if per_gpu else unknown
        for field, reduce in (("gated_mean_w", np.sum), ("energy_j", np.sum), ("coverage_ratio", np.min))
    )  # NaN in any GPU's stays NaN: unknown, as sum_known and worst_known have it
    implausible = np.sum([wp.implausible for wp in per_gpu], axis=0) if per_gpu else np.zeros(len(unknown))
    implausible = implausible.astype(np.int64)
    system, signals = beside
    domains = system.windows if system.system is not None else None

    def make(lo: int, hi: int) -> list[dict[str, Any]]:
        per_domain = domains.between(lo, hi) if domains is not None else [None] * (hi - lo)
        rows = [
            {
                "node": name,
                "power_w_gated_mean": g,
                "energy_j": e,
                "prefill_energy_j": p,
                "decode_energy_j": d,
                "coverage_ratio": c,
                "implausible_intervals": i,
                "system": s,
                **signal,
            }
            for g, e, p, d, c, i, s, signal in zip(
                rounded_list(gated[lo:hi]),
                rounded_list(energy[lo:hi]),
                rounded_list(split[0][lo:hi]),
                rounded_list(split[1][lo:hi]),
                floored_list(coverage[lo:hi]),
                implausible[lo:hi].tolist(),
                per_domain,
                signals.between(lo, hi),
                strict=True,
            )
        ]
        for row in rows:
            why = _entry_reasons(row, gate_why)
            if why:  # only where a figure is null: 40 000 empty objects would say nothing
                row["null_reasons"] = why
        return rows

    return WindowRows(len(plan.starts), make)


def _entry_reasons(entry: dict[str, Any], gate_why: str) -> dict[str, str]:
    """Why a node's power or energy in a window is null, its domains' keyed ``system.DOMAIN.FIELD``: no
    valid sample interval in the window (a gap, a window of no length), or none the gate let in (a window
    inside one scrape interval of an idle sample). The clock signals' nulls have no reasons of their own."""
    out: dict[str, str] = {}
    for part in (entry, *(entry["system"] or ())):
        if part["energy_j"] is not None and part["power_w_gated_mean"] is not None:
            continue  # nearly every entry: no key made for it (40 000 node entries, 3 domains each)
        prefix = "" if part is entry else f"system.{part['domain']}."
        if part["energy_j"] is None:
            out[f"{prefix}energy_j"] = out[f"{prefix}power_w_gated_mean"] = NO_WINDOW_INTERVAL
        else:
            out[f"{prefix}power_w_gated_mean"] = gate_why
    return out


def _node_power(stats: Sequence[PowerStats], max_w: float | None) -> dict[str, Any]:
    """A node's figures: per-GPU figures summed (a GB10 has one GPU, so they are its own)."""
    methods = {s.method for s in stats if s.method != "none"}
    return {
        "power_w": {
            "gated_mean": rounded(sum_known([s.gated_mean_w for s in stats])),
            "mean": rounded(sum_known([s.mean_w for s in stats])),
            "max": rounded(max_w),  # the most the GPUs drew together, not the sum of their maxima
        },
        "energy_j": rounded(sum_known([s.energy_j for s in stats])),
        "energy_method": methods.pop() if len(methods) == 1 else ("mixed" if methods else "none"),
        "gated_s": rounded(sum(s.gated_s for s in stats)),
        "excluded_s": rounded(sum(s.excluded_s for s in stats)),
    }


def _without_util(node: NodeInput) -> list[str]:
    """The GPUs none of whose samples has a utilisation: a source without the gate's series (a DCGM target
    serving power only) is not a GPU that idled."""
    return [
        uuid for uuid, g in zip(node.gpu_uuids, node.gpus, strict=True) if not np.isfinite(g.util_ratio).any()
    ]


def _null_reasons(
    stats: Sequence[PowerStats], threshold: float, without_util: Sequence[str], max_w: float | None
) -> dict[str, str]:
    """Why a figure is null; ``without_util``: the GPUs with no utilisation sample at all; ``max_w``: the
    node's maximum (null where no time has every GPU's power)."""
    reasons: dict[str, str] = {}
    if not stats:
        reasons["power_w"] = "no GPU samples from this node"
        return reasons
    if any(s.covered_s == 0 for s in stats):
        reasons["power_w.mean"] = "no valid sample interval inside the scope"
        reasons["energy_j"] = "no valid sample interval inside the scope"
        reasons["power_w.max"] = "no valid sample interval inside the scope"
    elif max_w is None:
        reasons["power_w.max"] = "no time inside the scope at which every GPU's power is known"
    if any(s.covered_s == 0 for s in stats):  # a node down through the scope: not a GPU that idled
        reasons["power_w.gated_mean"] = "no valid sample interval inside the scope"
    elif any(s.gated_s == 0 for s in stats):
        reasons["power_w.gated_mean"] = (
            f"no utilisation sample (the gate's series) from GPU {', '.join(without_util)}"
            if without_util
            else f"no interval inside the scope with utilisation >= {threshold:g}"
        )
    return reasons


def _memory_reasons(key: str, memory: MemoryStats, before_ns: int | None) -> dict[str, str]:
    """Why a node's memory figure ``key`` (used, or page cache) is unknown, where it is."""
    what = "page cache reading" if key == "memory_page_cache_bytes" else "memory sample"
    reasons: dict[str, str] = {}
    if memory.peak_bytes is None:
        reasons[key] = f"no {what} inside the scope"
    if memory.baseline_bytes is None:
        reasons[f"{key}.baseline"] = no_baseline(what, before_ns)
    return reasons


def spans(starts: list[int], ends: list[int]) -> tuple[I64, I64]:
    return int_column(starts, len(starts)), int_column(ends, len(ends))
