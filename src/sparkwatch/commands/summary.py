"""Text for people: the end-of-run table (shaped like a published result) and the live per-node line."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

from sparkwatch.core.domains import headline_entry
from sparkwatch.core.power import INCOMPLETE_COVERAGE, falls_short
from sparkwatch.core.rounding import ratio_text
from sparkwatch.outputs import command_line, shown
from sparkwatch.report.doubt import doubt_mark, doubt_note, measured_windows
from sparkwatch.report.facts import said_once
from sparkwatch_agent.shared.units import GIB, one_decimal


def _num(value: float | None, fmt: str) -> str:
    """n/a, or ``value`` in ``fmt``; to one decimal as lmx rounds it (half away from zero)."""
    if value is None:
        return "n/a"
    return one_decimal(value) if fmt == ".1f" else format(value, fmt)


def _ratio(value: float | None) -> str:
    """A coverage to 3 decimals, never rounded up (0.9999 is not 1.000: whole)."""
    return "n/a" if value is None else ratio_text(value)


def _gib(value: int | None, *, unit: bool = False) -> str:
    """GiB to one decimal (``unit``: with its unit, which an unknown, ``n/a``, goes without)."""
    return "n/a" if value is None else one_decimal(value / GIB) + (" GiB" if unit else "")


#: Signals that stop a command on purpose (Ctrl-C, a kill, a closed terminal): an interruption. Any other
#: (SIGKILL from the OOM killer, SIGSEGV, SIGABRT) is the command failing.
STOPPED_BY = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def command_outcome(code: int) -> str:
    """How the wrapped command ended; a code of 128 + N is the shell's (and `run`'s) "ended by signal N"."""
    if code == 0:
        return "succeeded"
    try:
        sig = signal.Signals(code - 128) if code > 128 else None
    except ValueError:
        sig = None
    if sig in STOPPED_BY:
        return f"ended by {sig.name} (exit code {code})"
    return f"FAILED with exit code {code}" + (f" (killed by {sig.name})" if sig else "")


def summary_table(export: dict[str, Any]) -> str:
    """Per node gated watts, energy and peak memory, their sums, tokens, J/token and every window whose
    verdict is not ``ok`` — what a run report quotes, with unknowns shown as n/a, never as 0."""
    export = {**export, "windows": list(export["windows"])}  # read several times: made once (WindowRows)
    run, method = export["run"], export["method"]
    measured = measured_windows(export)
    lines = [
        f"run {shown(run['id'])} ({shown(run['name'])}): {len(measured)} measured window(s) of"
        f" {len(export['windows'])},"
        f" scope {method['scope']} {method['scope_s']} s, gate {method['gate']['source']}"
        f" >= {method['gate']['threshold_ratio']:g}, sampled every {method['interval_s']:g} s",
    ]
    command = run.get("command")
    if command is not None:
        outcome = command_outcome(command["exit_code"])
        lines.append(
            f"command {outcome}: {command_line(command['argv'])}"
        )  # quoted, control characters escaped
    with_system = any(node.get("system") for node in export["nodes"])
    mark = doubt_mark(export)
    lines += [
        "",
        *_node_rows(export, with_system, mark),
        "",
        *_totals_lines(export["totals"], with_system, mark),
    ]
    if mark:
        lines.append(doubt_note(export))
    throttled = [w for w in measured if any(e.get("throttle") for e in w["nodes"])]
    if throttled:
        lines.append(
            f"WARNING: {len(throttled)} of {len(measured)} measured window(s) ran throttled"
            " (heat, a power brake or a low SM clock): their figures are low_confidence, see below"
        )
    not_ok = [w for w in export["windows"] if w["verdict"] != "ok"]
    for w in not_ok[:20]:
        lines.append(f"window {w['id']} ({w['phase']}): {w['verdict']}: {'; '.join(w['reasons'])}")
    if len(not_ok) > 20:
        lines.append(f"... and {len(not_ok) - 20} more window(s) not ok")
    return "\n".join(lines)


def _node_rows(export: dict[str, Any], with_system: bool, mark: str = "") -> list[str]:
    """The per-node table with its sum row (and the system W column when any node has a domain); ``mark``
    after each power and energy figure when they rest on windows that are not ``ok``."""
    totals = export["totals"]
    systems = [system_watts(node) for node in export["nodes"]]
    column = f" {'system W':>9}" if with_system else ""
    width = max([16, *(len(node["node"]) for node in export["nodes"])])  # long names keep the columns
    # named as the report names them: beside "system W", "energy J" read as the whole node's energy
    figures = f"{'gated GPU W':>11}{column} {'GPU energy J':>13} {'peak mem GiB':>13} {'coverage':>9}"
    header = f"{'node':<{width}} {figures}"
    lines = [header, "-" * len(header)]
    for node, system_w in zip(export["nodes"], systems, strict=True):
        cell = f" {_marked(system_w, mark):>9}" if with_system else ""
        lines.append(
            f"{node['node']:<{width}} {_marked(node['power_w']['gated_mean'], mark):>11}{cell}"
            f" {_marked(node['energy_j'], mark):>13} {_gib(node['memory_used_bytes']['peak']):>13}"
            f" {_ratio(node['samples']['coverage_ratio']):>9}"
        )
    lines.append("-" * len(header))
    known = [w for w in systems if w is not None]
    short = _short_headlines(export["nodes"])  # a node's mean over a sliver of the scope: not summed
    system_sum = sum(known) if len(known) == len(systems) and not short else None
    cell = f" {_marked(system_sum, mark):>9}" if with_system else ""
    lines.append(
        f"{'sum':<{width}} {_marked(totals['power_w_gated_mean_sum'], mark):>11}{cell}"
        f" {_marked(totals['energy_j'], mark):>13} {_gib(totals['memory_used_bytes_peak_sum']):>13}"
    )
    if with_system:
        lines.append(
            "system W: each node's whole-node domain (a wall meter, else dc_input, sys_total or power_meter),"
            " gated like GPU W; it contains the GPU rail and is never added to it"
        )
    if with_system and short:
        lines.append(
            f"  n/a sum system W: the whole-node domain of {', '.join(short)} covers less than"
            f" {INCOMPLETE_COVERAGE} of the scope"
        )
    return lines + _node_reasons(export["nodes"])


def _marked(value: float | None, mark: str, fmt: str = ".1f") -> str:
    """A figure with ``mark`` after it (an unknown, n/a, is not marked: there is nothing to doubt)."""
    return _num(value, fmt) + (mark if value is not None else "")


def _short_headlines(nodes: Sequence[dict[str, Any]]) -> list[str]:
    """The nodes whose headline domain covers less of the scope than a whole figure needs, with how much."""
    short = []
    for node in nodes:
        entry = headline_entry(node)
        coverage = None if entry is None else (entry.get("samples") or {}).get("coverage_ratio")
        if isinstance(coverage, float | int) and falls_short(coverage):
            short.append(f"{node['node']} ({ratio_text(coverage)})")
    return short


#: The node figures the table shows, by their keys in a node's ``null_reasons`` (a parent key says it too).
_SHOWN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gated GPU W", ("power_w.gated_mean", "power_w")),
    ("GPU energy J", ("energy_j", "power_w")),
    ("peak mem", ("memory_used_bytes",)),
)


def _node_reasons(nodes: list[dict[str, Any]]) -> list[str]:
    """Why each n/a in a node's row is n/a, from the node's own ``null_reasons`` (system W: its headline
    domain's; a node without a domain is n/a there for want of a sensor, which its row says already)."""
    lines = []
    for node in nodes:
        reasons = node.get("null_reasons") or {}
        headline = (node.get("system") or {}).get("headline_domain")
        system = (("system W", (f"system.{headline}.power_w.gated_mean",)),) if headline else ()
        for label, keys in (*_SHOWN[:1], *system, *_SHOWN[1:]):
            why = next((reasons[k] for k in keys if isinstance(reasons.get(k), str)), None)
            if why is not None:
                lines.append(f"  n/a {node['node']} {label}: {why}")
    return lines


def _totals_lines(totals: dict[str, Any], with_system: bool, mark: str = "") -> list[str]:
    tokens = totals["completion_tokens"]
    lines = [
        f"completion tokens {tokens if tokens is not None else 'n/a'},"
        f" GPU J/token {_marked(totals['joules_per_token'], mark, '.3f')},"
        f" peak of summed memory {_gib(totals['memory_used_bytes_peak_of_sum'], unit=True)}"
    ]
    if with_system:
        lines.append(
            f"system energy J {_marked(totals.get('system_energy_j'), mark)},"
            f" system J/token {_marked(totals.get('system_joules_per_token'), mark, '.3f')}"
        )
    lines += [f"  n/a {reason}" for reason in said_once(totals["null_reasons"])]
    return lines


def system_watts(node: dict[str, Any]) -> float | None:
    """The gated mean of the node's headline (whole-node) domain; None without one."""
    entry = headline_entry(node)
    return None if entry is None else entry["power_w"]["gated_mean"]


def live_parts(nodes: Sequence[dict[str, Any]]) -> list[str]:
    """One short text per node: power, utilisation, memory used, samples stored, lag."""
    parts = []
    for n in nodes:
        latest = n.get("latest") or {}
        if not n.get("connected"):
            parts.append(f"{n['node']}: down")
            continue
        util = latest.get("util_ratio")
        lag = n.get("lag_s")
        parts.append(
            f"{n['node']}: {_num(latest.get('power_w'), '.1f')} W"
            f" {'n/a' if util is None else f'{util * 100:.0f}'}%"
            f" {_gib(latest.get('memory_used_bytes'))} GiB"
            f" {n.get('samples_ingested', 0)} samples, lag {_num(lag, '.1f')} s"
        )
    return parts
