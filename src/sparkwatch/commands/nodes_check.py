"""`sparkwatch nodes check`: a preflight for the cluster — would a run measured now be sound?

Judged from what each node's agent said on a fresh link (hello, clock probes): reachable, version,
memory model, which fields are unsupported, clock offset and its uncertainty, the kernel's NTP state and
the sampling interval. Problems (exit 1) spoil figures; warnings make them weaker but still honest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkwatch.client_waits import refused
from sparkwatch.hello_facts import capability_gaps, listed_hello, misnamed, shared_identities

#: A clock uncertainty above this is more than 1 % of a one-second window.
MAX_UNCERTAINTY_S = 0.010
#: Offsets are corrected, but one this large means the node's clock is not disciplined at all.
WARN_OFFSET_S = 0.5
GATE_FIELD = "utilization"
POWER_FIELDS = ("power", "energy")


@dataclass(slots=True)
class NodeCheck:
    node: str
    reachable: bool
    agent_version: str | None = None
    memory_model: str | None = None
    unsupported: list[str] = field(default_factory=list)
    offset_s: float | None = None
    uncertainty_s: float | None = None
    time_sync: str = "unknown"
    interval_s: float | None = None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    meter: dict[str, Any] | None = None  # the node's wall meter as /v1/nodes shows it

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "reachable": self.reachable,
            "agent_version": self.agent_version,
            "memory_model": self.memory_model,
            "unsupported": self.unsupported,
            "clock_offset_s": self.offset_s,
            "clock_uncertainty_s": self.uncertainty_s,
            "time_sync": self.time_sync,
            "interval_s": self.interval_s,
            "problems": self.problems,
            "warnings": self.warnings,
            "meter": self.meter,
            "ok": not self.problems,
        }


def _time_sync(hardware: dict[str, Any] | None) -> tuple[str, bool | None]:
    sync = ((hardware or {}).get("host") or {}).get("time_sync") or {}
    synced = sync.get("synchronized")
    if synced is None:
        return "unknown", None
    text = "synchronized" if synced else "NOT synchronized"
    if sync.get("est_error_s") is not None and synced:
        text += f" (est. error {sync['est_error_s'] * 1e3:.1f} ms)"
    return f"{text} [{sync.get('source')}]", bool(synced)


def check_node(node: dict[str, Any]) -> NodeCheck:
    """One node as /v1/nodes describes it."""
    check = NodeCheck(
        node=node["node"], reachable=bool(node.get("connected")) and node.get("hardware") is not None
    )
    _check_meter(check, node.get("meter"), (node.get("capabilities") or {}).get("sensors") or [])
    if not check.reachable:
        error = node.get("error") or "no hello yet"
        # the error names the token file it sent, or the service at the address: it was reached
        check.problems.append(error if refused(node) else f"not reachable: {error}")
        return check
    check.agent_version = node.get("agent_version")
    check.memory_model = node.get("memory_model")
    check.interval_s = node.get("interval_s")
    capabilities = node.get("capabilities") or {}
    unsupported = capability_gaps(capabilities)  # field -> the GPUs that do not measure it
    check.unsupported = sorted(unsupported)
    hardware = node.get("hardware") or {}
    if not capabilities.get("gpus"):
        why = node.get("gpu_reason")
        detail = f": {why}" if isinstance(why, str) and why else ""
        check.problems.append(f"no GPU is being read ({hardware.get('backend', '?')} backend{detail})")
    if all(f in unsupported for f in POWER_FIELDS) and capabilities.get("gpus"):
        check.problems.append("neither GPU power nor the energy counter can be read")
    elif "energy" in unsupported:
        check.warnings.append("no energy counter: energy is integrated from power samples (trapezoid)")
    if GATE_FIELD in unsupported:
        check.problems.append("GPU utilisation cannot be read, so power cannot be gated on it")
    if check.memory_model in (None, "unknown"):
        check.problems.append("memory model unknown")
    if (capabilities.get("host_memory") or {}).get("supported") is False:
        check.problems.append("/proc/meminfo cannot be read")
    clock = node.get("clock") or {}
    if clock.get("offset_ns") is None:
        check.problems.append("no clock offset measured")
    else:
        check.offset_s = clock["offset_ns"] / 1e9
        check.uncertainty_s = clock["uncertainty_ns"] / 1e9
        if check.uncertainty_s > MAX_UNCERTAINTY_S:
            check.problems.append(
                f"clock uncertainty {check.uncertainty_s * 1e3:.1f} ms > {MAX_UNCERTAINTY_S * 1e3:.0f} ms"
            )
        if abs(check.offset_s) > WARN_OFFSET_S:  # agent clock + offset = coordinator clock
            side = "behind" if check.offset_s > 0 else "ahead of"
            check.warnings.append(
                f"clock {abs(check.offset_s):.3f} s {side} the coordinator's (corrected, but check NTP)"
            )
    check.time_sync, synced = _time_sync(hardware)
    if synced is False:
        check.warnings.append("kernel clock not synchronized by NTP")
    if skipped := node.get("frames_rejected"):  # each a gap in the samples; the log says the first few
        counts = ", ".join(f"{reason} {count}" for reason, count in sorted(skipped.items()))
        check.warnings.append(
            f"lines from the agent skipped since the coordinator started: {counts} (its log quotes the first"
            " ones; not_json from an exec agent: something else writes to its stdout)"
        )
    return check


def _check_meter(check: NodeCheck, meter: dict[str, Any] | None, sensors: Sequence[str]) -> None:
    """A meter that does not answer would leave its node's wall domain a gap, one named like one of the
    agent's ``sensors`` would give the node two domains by one name: problems."""
    check.meter = meter
    if meter is None:
        return
    if meter.get("domain") in sensors:
        check.problems.append(
            f"the meter's domain {meter['domain']!r} is also a sensor channel of the agent's: rename the"
            " meter's domain in nodes.toml (wall, by default)"
        )
    where = f"{meter['kind']} meter at {meter['url']}"
    if meter.get("error"):
        check.problems.append(f"{where} does not give a reading: {meter['error']}")
    elif not meter.get("polls"):  # the check waited for its first poll: it has not answered in that time
        check.problems.append(f"{where} has not answered yet (its first poll is still waiting)")


def check_cluster(nodes: Sequence[dict[str, Any]]) -> list[NodeCheck]:
    checks = [check_node(n) for n in nodes]
    hellos = [(n["node"], listed_hello(n)) for n in nodes]
    for shared in shared_identities(hellos):
        for c in checks:
            if c.node in (shared.first, shared.second):
                c.problems.append(str(shared))
    for c, (name, hello) in zip(checks, hellos, strict=True):
        if (warning := misnamed(name, hello)) is not None:
            c.warnings.append(warning.removeprefix(f"node {name}: "))  # the line names the node already
    versions = {c.agent_version for c in checks if c.agent_version}
    if len(versions) > 1:
        for c in checks:
            c.warnings.append(f"agent versions differ across nodes: {', '.join(sorted(versions))}")
    return checks


def check_engine(engine: dict[str, Any] | None) -> list[str]:
    """The serving engine's /metrics (nodes.toml's ``[engine]``): a page that does not answer, or that is no
    engine's sparkwatch has a table for, would leave every window's ``engine`` block empty."""
    if engine is None:
        return []
    where = f"engine /metrics at {engine.get('url')}"
    if engine.get("error"):
        return [f"{where} does not answer: {engine['error']}"]
    if not engine.get("scrapes"):
        return [f"{where} has not answered yet"]
    if engine.get("family") is None:
        return [f"{where} answers, but with no vLLM or SGLang series (their figures will be null)"]
    return []


def render(checks: Sequence[NodeCheck], engine: dict[str, Any] | None = None) -> str:
    width = max([14, *(len(c.node) for c in checks)])  # long names keep the columns aligned
    header = (
        f"{'node':<{width}} {'reach':<5} {'agent':<8} {'memory':<8} {'offset ± unc (ms)':<19}"
        f" {'interval':>8}  {'time sync':<30} unsupported"
    )
    lines = [header, "-" * len(header)]
    for c in checks:
        clock = (
            f"{c.offset_s * 1e3:+.2f} ± {c.uncertainty_s * 1e3:.2f}"
            if c.offset_s is not None and c.uncertainty_s is not None
            else "n/a"
        )
        interval = f"{c.interval_s:g} s" if c.interval_s is not None else "n/a"
        lines.append(
            f"{c.node:<{width}} {'yes' if c.reachable else 'NO':<5} {c.agent_version or 'n/a':<8}"
            f" {c.memory_model or 'n/a':<8} {clock:<19} {interval:>8}  {c.time_sync:<30}"
            f" {', '.join(c.unsupported) or '-'}"
        )
    for c in checks:
        if c.meter is not None and c.meter.get("last_power_w") is not None and not c.meter.get("error"):
            lines.append(
                f"meter {c.node}: {c.meter['kind']} {c.meter['domain']} {c.meter['last_power_w']:.1f} W"
            )
    engine_problems = check_engine(engine)
    if engine is not None and not engine_problems:
        lines.append(f"engine: {engine['family']} /metrics at {engine['url']}, {engine['scrapes']} scrape(s)")
    for c in checks:
        lines += [f"PROBLEM {c.node}: {p}" for p in c.problems]
        lines += [f"warning {c.node}: {w}" for w in c.warnings]
    lines += [f"PROBLEM {p}" for p in engine_problems]
    bad = sum(1 for c in checks if c.problems)
    lines.append(f"{len(checks) - bad} of {len(checks)} node(s) ready to measure")
    return "\n".join(lines)
