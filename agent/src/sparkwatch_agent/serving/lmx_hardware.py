"""The lmx ``hardware.json`` object for this node, built from what it reports right now.

Its ``...Gb`` figures are GiB rounded like lmx (``round1(mb / 1024)``): the numbers lmx itself would write.
"""

from __future__ import annotations

from sparkwatch_agent.hardware.host_facts import HostFacts
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.shared.lmx_fields import discrete_gpus
from sparkwatch_agent.shared.units import lmx_gb


def lmx_hardware(snap: Snapshot, host: HostFacts) -> dict[str, object]:
    """The lmx ``hardware.json`` object, from what this node reports right now (OS and kernel included)."""
    memory = snap.sample.memory if snap.sample else None
    ram_gb = lmx_gb(memory.total_bytes) if memory and memory.total_bytes else None
    inv = snap.inventory
    gpus = inv.gpus if inv else ()
    out: dict[str, object] = {
        "cpu": host.cpu,
        "ramGb": ram_gb,
        "os": f"{host.os} (kernel {host.kernel})",
        "driverVersion": inv.driver_version if inv else None,
    }
    if not gpus:  # CPU_ONLY only when the backend answered with none; while it is down, the class is unknown
        return {"hwClass": "CPU_ONLY" if snap.gpu_ok or snap.backend == "none" else None, **out}
    name = gpus[0].name
    if snap.memory_model == "unified":
        return {
            "hwClass": "UNIFIED",
            "chipVendor": "NVIDIA" if name.upper().startswith("NVIDIA") else name.split()[0],
            "chipFamily": name.removeprefix("NVIDIA").strip() or name,
            "chipVariant": host.product or name,
            "unifiedMemoryGb": ram_gb,
            **out,
        }
    return {**discrete_gpus([(g.name, g.memory_total_bytes) for g in gpus]), **out}
