"""A node's power domains beside its GPU rail: hwmon channels (``sys_total``, ``dc_input``, a Grace module, an
ACPI ``power_meter``…) and wall meters, each measured on its own and never summed with the GPU figures or
with each other (they nest: ``dc_input`` holds ``sys_total`` holds the ``gpu`` rail).

A domain is measured exactly like a GPU (``integrals``: counter ΔE/Δt where the channel has an energy
accumulator, else the trapezoid; gaps are gaps), and gated by the node's GPU utilisation at each interval's
end, so its gated mean covers the same time as the GPU's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sparkwatch.core.baseline import above_idle_j, idle_power_w
from sparkwatch.core.failures import Failures
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.power import PowerStats, WindowPower, scope_stats, window_stats
from sparkwatch.core.rounding import floored, floored_list, rounded, rounded_list
from sparkwatch.core.tracks import F64, I64, GpuTrack, in_time_order
from sparkwatch.core.window_rows import WindowRows
from sparkwatch.core.windows import Scope

#: Power no single node draws (an 8-GPU server peaks near 10-12 kW): an interval above it is rejected.
MAX_PLAUSIBLE_NODE_W = 20_000.0
#: The domain that stands for the whole node, best first: a wall meter, then the board's own input and
#: total sensors, then an ACPI meter (matched by source).
HEADLINE_PREFERENCE = ("wall", "dc_input", "sys_total")
HEADLINE_SOURCE = "hwmon:power_meter"
#: Why a node has no ``system`` object.
NO_SENSOR = "no_sensor"


@dataclass(frozen=True, slots=True)
class DomainInput:
    """One domain's samples on the coordinator's clock; ``track.util_ratio`` holds the node's GPU
    utilisation at each sample (see :func:`gate_util`)."""

    domain: str
    kind: str  # system, module, cpu, gpu, other
    source: str  # hwmon:<chip>, sim:spbm, meter:<kind>
    track: GpuTrack
    errors: Failures = field(default_factory=Failures)  # a meter's failed polls: the reasons of its gaps
    #: a meter's readings: how far apart in time what they say is (its poll interval, or the BMC's own
    #: refresh period when longer); None for an agent's channels, judged by the run's sampling interval
    reading_s: float | None = None


@dataclass(frozen=True, slots=True)
class DomainFigures:
    system: dict[str, Any] | None  # the node's ``system`` object, None when it has no domain
    windows: WindowRows[list[dict[str, Any]]]  # per window, the node's per-domain entries
    headline: str | None  # the domain that stands for the whole node
    headline_energy_j: float | None
    headline_above_idle_j: float | None = None
    headline_coverage: float | None = None  # of the scope, by the headline domain's valid intervals
    headline_window_coverage: F64 | None = None  # of each window, likewise (NaN: no interval in it)
    headline_reading_s: float | None = None  # the headline domain's DomainInput.reading_s
    null_reasons: dict[str, str] = field(default_factory=dict)  # ``system.<domain>.<field>``: why unknown


def gate_util(gpus: Sequence[GpuTrack], t_ns: I64) -> F64:
    """The node's GPU utilisation at each time: per GPU, the value its next sample at or after ``t`` reports
    (what gates that GPU's interval ending there) unless that sample is more than a gap away; the highest
    over the node's GPUs (the node is busy when any GPU is). NaN where no GPU says."""
    out = np.full(len(t_ns), np.nan)
    for track in gpus:
        if len(track.t_ns) == 0:
            continue
        i = np.searchsorted(track.t_ns, t_ns, side="left")
        inside = i < len(track.t_ns)
        j = np.minimum(i, len(track.t_ns) - 1)
        near = inside & (track.t_ns[j] - t_ns <= track.max_gap_ns[j])
        util = np.where(near, track.util_ratio[j], np.nan)
        out = np.fmax(out, util)  # fmax ignores NaN unless both are
    return out


def gated_track(
    t_ns: I64, segment: I64, interval_s: F64, power_w: F64, energy_j: F64, *, gpus: Sequence[GpuTrack]
) -> GpuTrack:
    """A domain's samples as a track whose utilisation is the node's GPU gate at each sample. A one-GPU
    node whose domains ride its GPU samples (a GB10's hwmon channels) shares the GPU track's columns: at
    the GPU's own sample times its gate is its own utilisation."""
    gpu = _same_samples(gpus, t_ns, segment, interval_s)
    if gpu is not None:
        return dataclasses.replace(gpu, power_w=power_w, energy_j=energy_j)
    track = GpuTrack.from_arrays(
        t_ns, segment, interval_s, power_w=power_w, energy_j=energy_j, util_ratio=np.zeros(len(t_ns))
    )
    return dataclasses.replace(track, util_ratio=gate_util(gpus, track.t_ns))


def _same_samples(gpus: Sequence[GpuTrack], t_ns: I64, segment: I64, interval_s: F64) -> GpuTrack | None:
    """The node's one GPU track when its samples are exactly these (same times, boots and gap limits, times
    strictly rising so each time is one sample), else None."""
    if len(gpus) != 1 or len(gpus[0].t_ns) != len(t_ns) or len(t_ns) < 2:
        return None
    gpu = gpus[0]
    if not (np.array_equal(gpu.t_ns, t_ns) and np.array_equal(gpu.segment, segment)):
        return None
    if not bool(np.all(t_ns[1:] > t_ns[:-1])) or not bool(np.all(gpu.max_gap_ns >= 0)):
        return None
    _, _, _, max_gap = in_time_order(t_ns, segment, interval_s)
    return gpu if np.array_equal(gpu.max_gap_ns, max_gap) else None


def headline_domain(domains: Sequence[DomainInput]) -> str | None:
    """The node's whole-node domain by :data:`HEADLINE_PREFERENCE`, a wall meter's under another name (its
    ``domain`` in nodes.toml; the first by name where a TSDB holds several) right after ``wall``, else a
    ``power_meter``; never a rail."""
    names = {d.domain for d in domains if d.kind == "system"}
    meters = sorted(d.domain for d in domains if d.kind == "system" and d.source.startswith("meter"))
    for name in (HEADLINE_PREFERENCE[0], *meters[:1], *HEADLINE_PREFERENCE[1:]):
        if name in names:
            return name
    return next((d.domain for d in domains if d.kind == "system" and d.source == HEADLINE_SOURCE), None)


#: How a node's domains are listed (``nodes[].system.domains``, the windows' entries, the series' lines):
#: the headline first, then by kind in this order, then by name. Not the order a source found them in: the
#: store keeps the order the agent first streamed its channels, a TSDB keeps none.
KIND_ORDER = ("system", "module", "cpu", "gpu", "other")


def listed(domains: Sequence[DomainInput]) -> list[DomainInput]:
    """``domains`` in the order every source lists them (:data:`KIND_ORDER`)."""
    headline = headline_domain(domains)
    rank = {kind: n for n, kind in enumerate(KIND_ORDER)}
    return sorted(domains, key=lambda d: (d.domain != headline, rank.get(d.kind, len(rank)), d.domain))


def headline_entry(node: dict[str, Any]) -> dict[str, Any] | None:
    """An exported node's headline domain entry (from ``nodes[].system``); None without one."""
    system = node.get("system") or {}
    headline = system.get("headline_domain")
    return next((d for d in system.get("domains", []) if d["domain"] == headline), None) if headline else None


def domain_figures(
    domains: Sequence[DomainInput],
    scope: Scope,
    threshold: float,
    starts: I64,
    ends: I64,
    *,
    baseline: tuple[int | None, Scope | None] = (None, None),
) -> DomainFigures:
    """Each domain over the scope and every window, with its idle power over the baseline period (core.
    baseline: the time before the first measured window, less every request's) and its energy above it."""
    domains = listed(domains)
    if not domains:
        none: WindowRows[list[dict[str, Any]]] = WindowRows(
            len(starts), lambda lo, hi: [[] for _ in range(lo, hi)]
        )
        return DomainFigures(None, none, None, None)
    stats, idle_and_why, per_window = [], [], []
    for d in domains:  # one domain's integrals at a time: each is a few arrays the length of its samples
        integrals = Integrals.build(d.track, threshold, MAX_PLAUSIBLE_NODE_W)
        stats.append(scope_stats(integrals, scope))
        idle_and_why.append(idle_power_w(integrals, *baseline))
        per_window.append(window_stats(integrals, starts, ends))
        del integrals
    idle = [w for w, _ in idle_and_why]
    above = [above_idle_j(s.energy_j, w, s.covered_s) for s, w in zip(stats, idle, strict=True)]
    headline = headline_domain(domains)
    names = [d.domain for d in domains]
    energy = dict(zip(names, [s.energy_j for s in stats], strict=True))
    reasons = _idle_reasons(names, [why for _, why in idle_and_why], above)
    reasons |= _measured_reasons(domains, stats, threshold)
    return DomainFigures(
        system={
            "headline_domain": headline,
            "domains": [
                _domain_json(d, s, w, a) for d, s, w, a in zip(domains, stats, idle, above, strict=True)
            ],
        },
        windows=_window_entries(domains, per_window, len(starts)),
        headline=headline,
        headline_energy_j=energy.get(headline) if headline is not None else None,
        headline_above_idle_j=dict(zip(names, above, strict=True)).get(headline) if headline else None,
        headline_coverage=stats[names.index(headline)].coverage_ratio if headline is not None else None,
        headline_window_coverage=per_window[names.index(headline)].coverage_ratio if headline else None,
        headline_reading_s=domains[names.index(headline)].reading_s if headline is not None else None,
        null_reasons=reasons,
    )


def _measured_reasons(
    domains: Sequence[DomainInput], stats: Sequence[PowerStats], threshold: float
) -> dict[str, str]:
    """Why a domain's figures are unknown: nothing covered the scope (then none is known), or, for its
    gated mean alone, the node's GPUs said no utilisation at all (a source without the gate's series), or
    they never reached the gate in it (the domain is gated by them)."""
    reasons = {}
    for d, s in zip(domains, stats, strict=True):
        key = f"system.{d.domain}.power_w.gated_mean"
        if s.covered_s == 0:
            for figure in ("energy_j", "power_w.mean", "power_w.max", "power_w.gated_mean"):
                reasons[f"system.{d.domain}.{figure}"] = "no valid sample interval inside the scope"
        elif s.gated_s == 0 and not np.isfinite(d.track.util_ratio).any():
            reasons[key] = "no utilisation sample (the gate's series) from the node's GPUs"
        elif s.gated_s == 0:
            reasons[key] = f"no interval inside the scope with the node's GPU utilisation >= {threshold:g}"
    return reasons


def _idle_reasons(
    names: Sequence[str],
    idle_why: Sequence[str | None],
    above: Sequence[float | None],
) -> dict[str, str]:
    reasons = {}
    for name, why, a in zip(names, idle_why, above, strict=True):
        if why is not None:
            reasons[f"system.{name}.idle_power_w"] = why
        if a is None:
            reasons[f"system.{name}.energy_above_idle_j"] = "needs the domain's energy and its idle power"
    return reasons


def _domain_json(
    domain: DomainInput, s: PowerStats, idle_w: float | None, above_j: float | None
) -> dict[str, Any]:
    errors = domain.errors.json() if domain.errors else {}
    return {
        **errors,
        "domain": domain.domain,
        "kind": domain.kind,
        "source": domain.source,
        "power_w": {
            "gated_mean": rounded(s.gated_mean_w),
            "mean": rounded(s.mean_w),
            "max": rounded(s.max_w),
        },
        "energy_j": rounded(s.energy_j),
        "idle_power_w": rounded(idle_w),
        "energy_above_idle_j": rounded(above_j),
        "energy_method": s.method,
        "gated_s": rounded(s.gated_s),
        "samples": {
            "count": s.samples,
            "coverage_ratio": floored(s.coverage_ratio),
            "max_gap_s": rounded(s.max_gap_s),
            "implausible_intervals": s.implausible,
        },
    }


def _window_entries(
    domains: Sequence[DomainInput], per: Sequence[WindowPower], windows: int
) -> WindowRows[list[dict[str, Any]]]:
    """Per window, each domain's entry (made from the domains' columns a slice of windows at a time)."""
    names = [d.domain for d in domains]

    def make(lo: int, hi: int) -> list[list[dict[str, Any]]]:
        per_domain = [  # a domain's entries, one comprehension each; then one list per window
            [
                {"domain": name, "power_w_gated_mean": g, "energy_j": e, "coverage_ratio": c}
                for g, e, c in zip(
                    rounded_list(wp.gated_mean_w[lo:hi]),
                    rounded_list(wp.energy_j[lo:hi]),
                    floored_list(wp.coverage_ratio[lo:hi]),
                    strict=True,
                )
            ]
            for name, wp in zip(names, per, strict=True)
        ]
        return list(map(list, zip(*per_domain, strict=True))) if per_domain else [[] for _ in range(lo, hi)]

    return WindowRows(windows, make)
