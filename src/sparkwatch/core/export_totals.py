"""The export's ``totals``: sums over nodes and measured windows, each unknown with a reason that says what
happened (which nodes, which windows).

The rule for a missing value is the same everywhere: a total is a sum over every node (or every measured
window) or it is ``null`` — never a sum over the ones that happen to be known, which would be a smaller
figure presented as the whole. The reason names what was missing. An energy total is ``null`` too when a
node's samples cover less of the scope than INCOMPLETE_COVERAGE: its energy is that of the covered time
only, the same smaller figure; so is the sum of gated mean powers, where that node's mean is of the covered
time only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparkwatch.core.export_nodes import NodeFigures, sum_known
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.phases import no_measured_window
from sparkwatch.core.power import INCOMPLETE_COVERAGE, falls_short
from sparkwatch.core.rounding import ratio_text, rounded
from sparkwatch.core.windows import NS_MAX, Window
from sparkwatch.defaults import ScopeKind
from sparkwatch_agent.shared.strict_text import quoted_number


@dataclass(frozen=True, slots=True)
class Measured:
    """The run's windows, which of them are measured, and the phases a measured window comes from."""

    windows: Sequence[Window]
    measured: Sequence[Window]
    phases: frozenset[str]
    scope: ScopeKind = "request"


def totals(figures: Sequence[NodeFigures], runs: Measured, peak_of: int | None) -> dict[str, Any]:
    reasons: dict[str, str] = {}
    energy = _node_sum(figures, "energy_j", reasons)
    power = sum_known([f.json["power_w"]["gated_mean"] for f in figures])
    completion, why_tokens = completion_tokens(runs)
    peaks = [f.memory_peak_bytes for f in figures]
    peak_sum = sum(p for p in peaks if p) if peaks and None not in peaks else None
    if why_tokens is not None:
        reasons["completion_tokens"] = why_tokens
    if power is None:
        reasons["power_w_gated_mean_sum"] = "a node's gated power is unknown (see its null_reasons)"
    elif partial := _partial(figures, _gpu_coverage(figures), "GPU samples", NOT_WHOLE_POWER):
        power, reasons["power_w_gated_mean_sum"] = None, partial
    if peak_sum is None:
        reasons["memory_used_bytes_peak_sum"] = "a node has no memory sample inside the scope"
    if peak_of is None:
        reasons["memory_used_bytes_peak_of_sum"] = "no time inside the scope when every node had a reading"
    any_measured = bool(runs.measured)
    per_token = _per_token(
        energy, completion, reasons, "joules_per_token", "energy_j", any_measured=any_measured
    )
    system = _system_sum(figures, "headline_energy_j", "energy_j", reasons, "system_energy_j")
    system_per_token = _per_token(
        system, completion, reasons, "system_joules_per_token", "system_energy_j", any_measured=any_measured
    )
    uncounted = _uncounted_in_run(runs)
    if uncounted is not None and per_token is not None:  # a figure unknown already keeps its own reason
        per_token, reasons["joules_per_token"] = None, uncounted
    if uncounted is not None and system_per_token is not None:
        system_per_token, reasons["system_joules_per_token"] = None, uncounted
    return {
        "power_w_gated_mean_sum": rounded(power),
        "energy_j": rounded(energy),
        "energy_above_idle_j": rounded(_node_sum(figures, "energy_above_idle_j", reasons)),
        "prefill_energy_j": rounded(_node_sum(figures, "prefill_energy_j", reasons)),
        "decode_energy_j": rounded(_node_sum(figures, "decode_energy_j", reasons)),
        "memory_used_bytes_peak_sum": peak_sum,
        "memory_used_bytes_peak_of_sum": peak_of,
        "completion_tokens": completion,
        "joules_per_token": rounded(per_token, 4),
        "system_energy_j": rounded(system),
        "system_energy_above_idle_j": rounded(
            _system_sum(
                figures, "headline_above_idle_j", "energy_above_idle_j", reasons, "system_energy_above_idle_j"
            )
        ),
        "system_joules_per_token": rounded(system_per_token, 4),
        "null_reasons": reasons,
    }


def completion_tokens(runs: Measured) -> tuple[int | None, str | None]:
    """The measured windows' completion tokens, or ``None`` with why: no measured window (and whether any
    of the run's phases was recorded at all), or the windows that lack a count, by id."""
    if not runs.measured:
        return None, no_measured_window(runs.windows, runs.phases)
    lacking = [w for w in runs.measured if w.completion_tokens is None]
    if not lacking:
        total = sum(w.completion_tokens or 0 for w in runs.measured)
        if total > NS_MAX:  # each window's count fits 64 bits; their sum may not, nor any JSON reader's int
            return None, f"the measured windows' completion tokens sum past 2^63 - 1 ({quoted_number(total)})"
        return total, None
    marks = [w.id for w in lacking if _is_mark(w)]
    requests = [w for w in lacking if not _is_mark(w)]
    said = []
    if marks:  # a mark times a stretch of the run by hand: it never has tokens
        said.append(f"{len(marks)} of {len(runs.measured)} measured window(s) are marks, which carry no token"
                    f" counts: {name_ids(marks)}")  # fmt: skip
    if requests:
        named = name_ids([f"{w.id} ({_ending(w)})" for w in requests])
        said.append(
            f"{len(requests)} of {len(runs.measured)} measured window(s) have no completion token count:"
            f" {named}; the request reported no usage (a client that disconnected before the end, or a"
            " server or importer that gave none)"
        )
    return None, "; ".join(said)


def _uncounted_in_run(runs: Measured) -> str | None:
    """In the ``run`` scope the energy is the whole run's: where requests that are not measured (warm-up,
    failed, another phase) ran in it too, their energy is in it and their tokens are not, so per token it
    would be the measured tokens' share of everything (10 s of warm-up beside 10 s of timed requests read
    twice the joules per token)."""
    if runs.scope != "run":
        return None
    measured = {w.id for w in runs.measured}
    others = [w.id for w in runs.windows if w.id not in measured and not _is_mark(w)]
    if not others:
        return None
    return (
        f"the run scope's energy is the whole run's, and {len(others)} request window(s) in it are not"
        f" measured (warm-up, failed or of another phase: {name_ids(others)}): their tokens are not"
        " counted, so the energy is not divided by the measured windows' tokens alone"
    )


def _is_mark(w: Window) -> bool:
    """A mark's window, or one re-measured from an export that took it from a mark (``source.taken``)."""
    taken = w.source.get("taken")
    return w.source.get("kind") == "mark" or (isinstance(taken, dict) and taken.get("kind") == "mark")


def _ending(w: Window) -> str:
    """What a window says of how its request ended."""
    if w.finish_reason is not None:
        return f"finish_reason {w.finish_reason}"
    return "no finish_reason" + (", no last token" if w.t_last_token_ns is None else "")


def _per_token(
    energy: float | None,
    completion: int | None,
    reasons: dict[str, str],
    key: str,
    energy_key: str,
    *,
    any_measured: bool,
) -> float | None:
    """Energy per completion token, or ``None`` with the reason of whichever part is missing. Over a
    subset of windows it is never given: the energy covers every measured window's time (said only where
    there is a measured window: a run without one has no other windows' tokens to speak of)."""
    if energy is not None and completion:
        return energy / completion
    if completion is None:
        subset = (
            "; the energy covers every measured window, so it is not divided by the other windows' tokens"
            if any_measured
            else ""
        )
        reasons[key] = f"the completion token count is unknown ({reasons['completion_tokens']}){subset}"
    elif completion == 0:
        reasons[key] = "the measured windows report 0 completion tokens"
    else:
        reasons[key] = f"needs {energy_key}, which is unknown: {reasons[energy_key]}"
    return None


def _node_sum(figures: Sequence[NodeFigures], key: str, reasons: dict[str, str]) -> float | None:
    """Σ over nodes of their ``key`` (an energy); ``None`` with the nodes that lack it (their null_reasons
    say why) or whose GPU samples cover too little of the scope for it to be the whole."""
    value = sum_known([f.json[key] for f in figures])
    if value is None:
        lacking = [str(f.json["node"]) for f in figures if f.json[key] is None]
        shared = {f.json["null_reasons"].get(key) for f in figures if f.json[key] is None}
        why = f": {shared.pop()}" if len(shared) == 1 and None not in shared else " (see its null_reasons)"
        reasons[key] = f"unknown on {name_ids(lacking)}{why}" if lacking else "no node"
        return value
    partial = _partial(figures, _gpu_coverage(figures), "GPU samples")
    if partial:
        reasons[key] = partial
        return None
    return value


#: Why a sum over nodes of an energy, or of a mean power, is left unknown when a node covers too little.
NOT_WHOLE_ENERGY = "the energy of the covered time only is not the whole"
NOT_WHOLE_POWER = "a mean over the covered time only, summed with the other nodes', is not the cluster's draw"


def _partial(
    figures: Sequence[NodeFigures],
    coverage: Sequence[float | None],
    what: str,
    why: str = NOT_WHOLE_ENERGY,
) -> str | None:
    """Why a sum over nodes would not be the whole: the nodes whose ``what`` cover less of the scope."""
    short = [
        f"{f.json['node']} ({ratio_text(c)})"
        for f, c in zip(figures, coverage, strict=True)
        if c is not None and falls_short(c)
    ]
    if not short:
        return None
    return f"the {what} of {name_ids(short)} cover less than {INCOMPLETE_COVERAGE} of the scope: {why}"


def _system_lacking(figures: Sequence[NodeFigures], values: Sequence[float | None], field: str) -> str:
    """Which nodes lack a whole-node ``field``, and why: no such domain, or its own null reason."""
    absent, unknown = [], []
    for f, v in zip(figures, values, strict=True):
        if v is not None:
            continue
        node, headline = str(f.json["node"]), f.system.headline
        if headline is None:
            absent.append(node)
        else:
            why = f.system.null_reasons.get(f"system.{headline}.{field}", "see the node's null_reasons")
            unknown.append(f"{node}'s {headline}: {why}")
    parts = [f"no whole-node power domain on {name_ids(absent)}"] if absent else []
    if unknown:
        parts.append(f"unknown on {'; '.join(unknown)}")
    return "; ".join(parts)


def _gpu_coverage(figures: Sequence[NodeFigures]) -> list[float | None]:
    return [f.json["samples"]["coverage_ratio"] for f in figures]


def _system_sum(
    figures: Sequence[NodeFigures], attr: str, field: str, reasons: dict[str, str], key: str
) -> float | None:
    """Σ over nodes of their headline domain's ``attr`` (its ``field`` in the export); ``None`` with the
    nodes that lack it: those without a whole-node domain, and those whose domain's ``field`` is unknown,
    with the domain's own reason (a zero-window run's ``dc_input`` has no energy, but it exists)."""
    values = [getattr(f.system, attr) for f in figures]
    value = sum_known(values)
    if value is None:
        reasons[key] = _system_lacking(figures, values, field) if figures else "no node"
        return value
    partial = _partial(figures, [f.system.headline_coverage for f in figures], "headline domains")
    if partial:
        reasons[key] = partial
        return None
    return value
