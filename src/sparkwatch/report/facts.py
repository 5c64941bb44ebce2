"""What the report's tables say, taken from the export alone: the run's header, the summary in the shape
people publish (per node gated GPU W, system W, peak memory, coverage; the totals; the method line), each
node's facts, and one compact row per window for the page's table.

Every number shown in a summary cell keeps the export path it came from (``key``) and the digits it is
printed to, so a reader (and the browser test) can check the page against the export."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from sparkwatch.core.domains import headline_entry
from sparkwatch.core.export import digest, quoted_digest
from sparkwatch.outputs import command_line
from sparkwatch.report.doubt import doubt_mark
from sparkwatch_agent.shared.units import GIB, one_decimal

NA = "n/a"
#: Reasons the export gives as codes, in words (``system``: "no_sensor", schema-fixed).
_REASON_WORDS = {"no_sensor": "no sensor: no hwmon power channel or wall meter on this node"}


@dataclass(frozen=True, slots=True)
class Cell:
    """One printed figure: its text, the export path it came from (``None`` for labels), its digits."""

    text: str
    key: str | None = None
    digits: int | None = None
    scale: float = 1.0  # the export value is divided by this before printing (bytes → GiB)
    mark: str = ""  # shown after the text: report.doubt's mark on a figure resting on windows not ok


def marked(cell: Cell, mark: str) -> Cell:
    """``cell`` carrying ``mark`` (an unknown, n/a, is not marked: there is nothing to doubt)."""
    return cell if not mark or cell.text.startswith(NA) else dataclasses.replace(cell, mark=mark)


def figure(export: dict[str, Any], key: str, digits: int, scale: float = 1.0) -> Cell:
    """The value at ``key`` (dotted path, list indices as numbers) printed to ``digits``; n/a when unknown."""
    value = lookup(export, key)
    if value is None:
        text = NA
    else:  # one decimal as lmx rounds it: the figures a reader checks against the line they publish
        text = one_decimal(value / scale) if digits == 1 else f"{value / scale:.{digits}f}"
    return Cell(text, key, digits, scale)


def lookup(tree: Any, key: str) -> Any:
    """The value at a dotted path such as ``nodes.0.power_w.gated_mean``; ``None`` where it is absent."""
    for part in key.split("."):
        if isinstance(tree, list) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        elif isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return None
    return tree


def utc(t_ns: int | None) -> str:
    if t_ns is None:
        return NA
    try:
        return dt.datetime.fromtimestamp(t_ns / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # a stamp the schema does not bound: as it is
        return f"{t_ns} ns (not a date)"


def an_object(value: Any) -> dict[str, Any]:
    """A free-form part of an export (an agent's hardware facts, which the schema says only is an object)
    as a dict; anything else there reads as empty, so every fact in it shows as n/a."""
    return value if isinstance(value, dict) else {}


def series_commands(export: dict[str, Any]) -> list[str]:
    """What exports this run again with its ``series`` block: the same `export --prometheus` where a TSDB
    was its source (a database's commands would not find the run), else `export --db` or `runs export`."""
    if an_object(export.get("source")).get("kind") not in (None, "sqlite"):
        return ["sparkwatch export --prometheus URL … --series"]
    return ["sparkwatch export --db FILE --series", "sparkwatch runs export ID --series"]


def a_number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def origin_ns(export: dict[str, Any]) -> int:
    """Where the report's time axis and window times count from: the series' start (the run's, or its
    first window's when that started earlier), else the run's start."""
    series = export.get("series")
    return int(series["t0_ns"] if series else export["run"]["t_start_ns"])


def axis_span_s(export: dict[str, Any]) -> float:
    """The length of the time axis: the series' span, else the run's."""
    series = export.get("series")
    end = series["t_end_ns"] if series else export["run"]["t_end_ns"]
    return float(end - origin_ns(export)) / 1e9


def header(export: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's facts, label and text, in reading order."""
    run = export["run"]
    command = run.get("command")
    if command:
        code = command.get("exit_code")
        outcome = "" if code is None else f" (exit code {code})"
        command_text = command_line([str(a) for a in command.get("argv", [])]) + outcome
    else:
        command_text = "none (windows came from the API, the proxy or an import)"
    duration_s = (run["t_end_ns"] - run["t_start_ns"]) / 1e9
    return [
        ("run", f"{run['name']} ({run['id']})"),
        ("command", command_text),
        ("start", utc(run["t_start_ns"])),
        ("end", utc(run["t_end_ns"])),
        ("duration", f"{duration_s:.1f} s"),
        ("sparkwatch", str(run.get("sparkwatch_version", NA))),
        ("export sha256", digest_text(export)),
        *(("note", str(note)) for note in run.get("notes", [])),
    ]


def digest_text(export: dict[str, Any]) -> str:
    """The export's digest, and whether it is the one its lmx notes quote (a hand-edited export is not)."""
    sha, quoted = digest(export), quoted_digest((export.get("lmx") or {}).get("notes"))
    return sha if quoted in (None, sha) else f"{sha} (the lmx notes quote {quoted}: edited since)"


def method_line(export: dict[str, Any]) -> str:
    """The export's method in words; the parts the schema does not require (an export from before they
    were written) are n/a."""
    method = export["method"]
    gate = method["gate"]
    phases = ", ".join(method["phases"]) if "phases" in method else NA
    return (
        f"scope {method['scope']} of the {phases} windows ({method.get('scope_s', NA)} s);"
        f" gate {gate['source']} >= {gate['threshold_ratio']:g}; sampled every {method['interval_s']:g} s;"
        f" a gap is longer than {method.get('gap_intervals', NA)} intervals and is never bridged"
    )


def has_system(export: dict[str, Any]) -> bool:
    return any(node.get("system") for node in export["nodes"])


def has_page_cache(export: dict[str, Any]) -> bool:
    """Whether some node's page cache was measured (not in exports made before it was, nor from samples
    stored before it was kept, nor from a TSDB without its series)."""
    return any(
        (node.get("memory_page_cache_bytes") or {}).get("peak") is not None for node in export["nodes"]
    )


def node_rows(export: dict[str, Any]) -> list[list[Cell]]:
    """Per node: name, gated GPU W, system W (when any node has a domain), peak memory GiB, peak page
    cache GiB (when measured), coverage; the power figures marked when they rest on windows not ok."""
    with_system, with_cache = has_system(export), has_page_cache(export)
    mark = doubt_mark(export)
    rows = []
    for i, node in enumerate(export["nodes"]):
        row = [Cell(node["node"]), marked(figure(export, f"nodes.{i}.power_w.gated_mean", 1), mark)]
        if with_system:
            row.append(marked(_system_cell(export, i), mark))
        row.append(figure(export, f"nodes.{i}.memory_used_bytes.peak", 1, GIB))
        if with_cache:
            row.append(figure(export, f"nodes.{i}.memory_page_cache_bytes.peak", 1, GIB))
        row.append(figure(export, f"nodes.{i}.samples.coverage_ratio", 4))  # as exported: never rounded up
        rows.append(row)
    return rows


def _system_cell(export: dict[str, Any], i: int) -> Cell:
    """The node's headline (whole-node) domain's gated mean, named, with its coverage where it covered less
    than the whole scope (the row's coverage is the GPU's: a wall meter at 0.713 showed 1.0000 beside its
    watts); n/a (no sensor) without one."""
    node = export["nodes"][i]
    entry = headline_entry(node)
    if entry is None:
        return Cell(f"{NA} (no sensor)")
    k = node["system"]["domains"].index(entry)
    cell = figure(export, f"nodes.{i}.system.domains.{k}.power_w.gated_mean", 1)
    coverage = a_number(an_object(entry.get("samples")).get("coverage_ratio"))
    short = f", coverage {_floored(coverage)}" if coverage is not None and coverage < 1 else ""
    return Cell(f"{cell.text} ({entry['domain']}{short})", cell.key, cell.digits)


def node_columns(export: dict[str, Any]) -> list[str]:
    system = ["system W (whole node)"] if has_system(export) else []
    cache = ["peak page cache GiB"] if has_page_cache(export) else []
    return ["node", "gated GPU W", *system, "peak memory GiB", *cache, "GPU coverage"]


def total_rows(export: dict[str, Any]) -> list[tuple[str, Cell]]:
    """The run's totals, label and figure: what the seed line quotes, and the system figures when known;
    the power and energy figures (and J/token) marked when they rest on windows not ok."""
    mark = doubt_mark(export)
    rows = [
        ("sum of gated GPU W", marked(figure(export, "totals.power_w_gated_mean_sum", 1), mark)),
        ("GPU energy J", marked(figure(export, "totals.energy_j", 1), mark)),
        ("completion tokens", figure(export, "totals.completion_tokens", 0)),
        ("GPU J/token", marked(figure(export, "totals.joules_per_token", 3), mark)),
        ("peak of summed memory GiB", figure(export, "totals.memory_used_bytes_peak_of_sum", 1, GIB)),
        ("sum of per-node peak memory GiB", figure(export, "totals.memory_used_bytes_peak_sum", 1, GIB)),
    ]
    if has_system(export):
        rows += [
            ("system energy J", marked(figure(export, "totals.system_energy_j", 1), mark)),
            ("system J/token", marked(figure(export, "totals.system_joules_per_token", 3), mark)),
        ]
    return rows


def null_reasons(export: dict[str, Any]) -> list[str]:
    """Why each unknown total is unknown, as the export says, each root reason said once."""
    return said_once(export["totals"].get("null_reasons", {}))


def said_once(reasons: dict[str, str]) -> list[str]:
    """``name: why`` per reason, where a reason that quotes an earlier one whole (the export's reasons stand
    alone: ``needs system_energy_j, which is unknown: <its reason>``) says ``(above)`` instead: a table
    repeated one sentence three times."""
    out: list[str] = []
    earlier: list[str] = []
    for name, why in reasons.items():
        told = why
        for before in earlier:
            told = told.replace(f": {before}", " (above)").replace(f"({before})", "(above)")
        out.append(f"{name}: {told}")
        earlier.append(why)
    return out


def node_facts(node: dict[str, Any]) -> list[tuple[str, str]]:
    """A node's hardware, driver, clock alignment and unsupported fields (with their reasons)."""
    hardware = an_object(node.get("hardware"))
    listed = hardware.get("gpus")
    gpus = [an_object(g) for g in listed] if isinstance(listed, list) else []
    host = an_object(hardware.get("host"))
    total = _gib(a_number(hardware.get("memory_total_bytes")))
    clock = node.get("clock") or {}
    offset, uncertainty = clock.get("offset_ns"), clock.get("uncertainty_ns")
    offset_text = NA if offset is None else f"{offset / 1e6:+.3f} ms"
    if uncertainty is not None:
        offset_text += f" ± {uncertainty / 1e6:.3f} ms"
    facts = [
        ("GPU", ", ".join(f"{_say(g.get('name'))} ({_say(g.get('uuid'))})" for g in gpus) or NA),
        ("driver", _driver(hardware)),
        ("host", f"{_say(host.get('hostname'))}: {_say(host.get('cpu'))}, {_say(host.get('os'))}"),
        ("memory", f"{_say(node.get('memory_model'))}, total {total} GiB"),
        ("clock offset", f"{offset_text} ({_say(clock.get('method'))}, {_probes(clock)})"),
    ]
    if hardware.get("simulated"):
        facts.insert(0, ("backend", "simulated"))
    facts += [(f"unsupported: {name}", str(why)) for name, why in sorted(node.get("unsupported", {}).items())]
    facts += _domain_facts(node)
    facts += [
        (f"n/a {name}", _REASON_WORDS.get(str(why), str(why)))
        for name, why in sorted(node.get("null_reasons", {}).items())
    ]
    return facts


def _domain_facts(node: dict[str, Any]) -> list[tuple[str, str]]:
    """Each power domain that covered less than the scope or whose meter failed polls: its coverage and why
    its polls failed, as the export tallies them (the report said nothing of a meter's failures)."""
    facts = []
    for domain in (node.get("system") or {}).get("domains") or []:
        coverage = a_number(an_object(domain.get("samples")).get("coverage_ratio"))
        errors = [an_object(e) for e in domain.get("errors") or []]
        if not errors and (coverage is None or coverage >= 1):
            continue
        said = [f"coverage {NA if coverage is None else _floored(coverage)}"]
        said += [_failure(e) for e in errors]
        if omitted := domain.get("errors_omitted"):
            said.append(f"{_say(omitted)} more failed polls of other reasons")
        facts.append((f"{_say(domain.get('domain'))} ({_say(domain.get('source'))})", "; ".join(said)))
    return facts


def _floored(ratio: float) -> str:
    """A coverage to 3 decimals, never rounded up: 0.9996 is no 1.000, as the export's are floored."""
    return f"{math.floor(ratio * 1000) / 1000:.3f}"


def _failure(error: dict[str, Any]) -> str:
    """``why ×N (first – last)``: a reason of failed polls, how many said it, and when."""
    count, first, last = error.get("count"), error.get("t_ns"), error.get("last_t_ns")
    times = utc(first) if last in (None, first) else f"{utc(first)} – {utc(last)}"
    polls = f" ×{count}" if isinstance(count, int) and count > 1 else ""
    return f"{_say(error.get('error'))}{polls} ({times})"


def _probes(clock: dict[str, Any]) -> str:
    return f"{_say(clock.get('probes_used'))} of {_say(clock.get('probes_total'))} probes"


def _driver(hardware: dict[str, Any]) -> str:
    return f"{_say(hardware.get('driver_version'))} (CUDA {_say(hardware.get('cuda_driver_version'))})"


def _say(value: Any) -> str:
    """A fact as text; unknown (absent or null) as n/a, never "None"."""
    return NA if value is None else str(value)


def _gib(value: Any) -> str:
    return NA if value is None else one_decimal(value / GIB)


def window_rows(export: dict[str, Any]) -> dict[str, Any]:
    """The window table as compact columns (one list per column, one entry per window), times in seconds
    from the time axis' origin; per-node gated W and energy in node order."""
    t0 = origin_ns(export)
    windows = export["windows"]

    def rel(t_ns: int | None) -> float | None:
        return None if t_ns is None else round((t_ns - t0) / 1e9, 3)

    return {
        "nodes": [n["node"] for n in export["nodes"]],
        "id": [w["id"] for w in windows],
        "phase": [w["phase"] for w in windows],
        "in_scope": [w["in_scope"] for w in windows],
        "t_start_s": [rel(w["t_start_ns"]) for w in windows],
        "t_end_s": [rel(w["t_end_ns"]) for w in windows],
        # from the stamps, not the rounded ends: 9.602378 s was shown as 9.603 (ends rounded, then subtracted)
        "duration_s": [round((w["t_end_ns"] - w["t_start_ns"]) / 1e9, 3) for w in windows],
        "t_first_token_s": [rel(w.get("t_first_token_ns")) for w in windows],
        "t_last_token_s": [rel(w.get("t_last_token_ns")) for w in windows],
        "tokens": [w.get("completion_tokens") for w in windows],
        "power_w": [[e.get("power_w_gated_mean") for e in w["nodes"]] for w in windows],
        "energy_j": [[e.get("energy_j") for e in w["nodes"]] for w in windows],
        "coverage": [_worst([e.get("coverage_ratio") for e in w["nodes"]]) for w in windows],
        "verdict": [w["verdict"] for w in windows],
        "reasons": ["; ".join(w["reasons"]) for w in windows],
    }


def _worst(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return min(v for v in values if v is not None)
