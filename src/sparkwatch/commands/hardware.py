"""`sparkwatch hardware`: one lmx ``hardware.json`` for the whole cluster, from the nodes' own hellos.

Each agent reports its lmx hardware object (OS and kernel read when it said hello); this sums the memory
over nodes and refuses to guess when nodes disagree on what they are. Summed memory is rounded once, from
the nodes' bytes, as lmx rounds its own totals (``round1(totalVramMb / 1024)``), not as a sum of rounded
figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparkwatch.hello_facts import listed_hello, shared_identities
from sparkwatch_agent.shared.lmx_fields import discrete_gpus
from sparkwatch_agent.shared.units import lmx_gb, round1


class HardwareError(Exception):
    """The nodes did not all report, or report hardware that cannot be one lmx record."""


def _same(values: Sequence[Any], field: str, names: Sequence[str] = ()) -> Any:
    """The one value the nodes agree on, or theirs joined; for a field one lmx record cannot mix, a
    refusal naming which node has which (``names``: the nodes, in the order of ``values``)."""
    distinct = sorted({str(v) for v in values if v is not None})
    if not distinct:
        return None
    if len(distinct) > 1 and field in ("hwClass", "chipVendor", "chipFamily"):
        held = {d: [n for n, v in zip(names, values, strict=False) if str(v) == d] for d in distinct}
        shown = [f"{d} ({', '.join(held[d])})" if held[d] else d for d in distinct]
        raise HardwareError(f"nodes differ in {field}: {', '.join(shown)}")
    return distinct[0] if len(distinct) == 1 else " / ".join(distinct)


def _sum(values: Sequence[Any], n_bytes: Sequence[Any] = ()) -> float | None:
    """The nodes' memory in lmx GiB: from their byte counts when every node sent one, else the sum of
    their own (already rounded) figures."""
    if n_bytes and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in n_bytes):
        return lmx_gb(sum(n_bytes))
    if not values or any(not isinstance(v, int | float) for v in values):
        return None
    return round1(float(sum(values)))


def _gpu(gpu: Any) -> tuple[str, int | None]:
    """(name, memory bytes) of one GPU as a hello lists it."""
    facts = _facts(gpu)
    size = facts.get("memory_total_bytes")
    return str(facts.get("name", "")), size if isinstance(size, int) and not isinstance(size, bool) else None


def cluster_hardware(nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``nodes`` as /v1/nodes lists them; every node must have said hello with an lmx object."""
    if not nodes:
        raise HardwareError("no nodes")
    records, missing, n_bytes, names = [], [], [], []
    for node in nodes:
        hardware = node.get("hardware") or {}
        lmx = hardware.get("lmx")
        if isinstance(lmx, dict) and lmx.get("hwClass") is None:  # its GPU backend was down at its hello
            why = node.get("gpu_reason") or "its GPU backend was not open"
            missing.append(f"node {node['node']}: hardware class unknown, no GPU read: {why}")
        elif isinstance(lmx, dict):
            records.append(lmx)
            names.append(str(node.get("node")))
            n_bytes.append(hardware.get("memory_total_bytes"))
        else:
            reason = node.get("error") or "it has not said hello (agent down or too old)"
            missing.append(f"node {node['node']}: no hardware report: {reason}")
    if missing:  # every node at fault at once: a token file shared by all is often wrong on all
        raise HardwareError("; ".join(missing))
    shared = shared_identities([(str(n.get("node")), listed_hello(n)) for n in nodes])
    if shared:  # as `nodes check` finds it: the record would count that machine's memory twice
        raise HardwareError("; ".join(map(str, shared)) + " (its memory would be counted twice)")
    hw_class = _same([r.get("hwClass") for r in records], "hwClass", names)
    out: dict[str, Any] = {"hwClass": hw_class}
    if hw_class == "UNIFIED":
        out["chipVendor"] = _same([r.get("chipVendor") for r in records], "chipVendor", names)
        out["chipFamily"] = _same([r.get("chipFamily") for r in records], "chipFamily", names)
        out["chipVariant"] = _same([r.get("chipVariant") for r in records], "chipVariant")
        out["unifiedMemoryGb"] = _sum([r.get("unifiedMemoryGb") for r in records], n_bytes)
    elif hw_class == "DISCRETE_GPU":
        out.update(
            discrete_gpus([_gpu(g) for node in nodes for g in (node.get("hardware") or {}).get("gpus") or ()])
        )
    out["cpu"] = _same([r.get("cpu") for r in records], "cpu")
    out["ramGb"] = _sum([r.get("ramGb") for r in records], n_bytes)
    out["os"] = _same([r.get("os") for r in records], "os")
    out["driverVersion"] = _same([r.get("driverVersion") for r in records], "driverVersion")
    return out


def simulated_nodes(nodes: Sequence[dict[str, Any]]) -> list[str]:
    """The nodes whose hello says their GPU is the simulator's: their lmx object pairs a simulated GB10
    with the host's own CPU and OS, so a record made from them describes no real machine."""
    return [str(n.get("node")) for n in nodes if _facts(n.get("hardware")).get("simulated")]


def _facts(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
