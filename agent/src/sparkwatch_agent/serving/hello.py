"""The hello frame and the capability map: who this agent is and what it can measure (sent first on every
stream, answered at /v1/capabilities, printed by probe)."""

from __future__ import annotations

from sparkwatch_agent import __version__
from sparkwatch_agent.hardware.host_facts import HostFacts
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.serving.lmx_hardware import lmx_hardware
from sparkwatch_agent.shared.protocol import FRAME_HELLO


def capabilities_json(snap: Snapshot) -> dict[str, object]:
    """The capability map: for every GPU field supported / unsupported (reason) / untrusted (reason), host
    memory, and the hwmon sensors the latest sample carried."""
    inventory = snap.inventory
    gpus = [
        {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "fields": {name: status.to_json() for name, status in gpu.capabilities.items()},
        }
        for gpu in (inventory.gpus if inventory else ())
    ]
    return {
        "memory_model": snap.memory_model,
        "gpus": gpus,
        "host_memory": {"supported": snap.host_memory_ok},
        "sensors": [s.sensor for s in snap.sample.sensors] if snap.sample else [],
    }


def hardware_json(snap: Snapshot, host: HostFacts) -> dict[str, object]:
    """Driver, GPUs, host facts and the lmx ``hardware.json`` object, as this node reports them now."""
    inv = snap.inventory
    return {
        "backend": snap.backend,
        "simulated": bool(inv and inv.simulated),
        "driver_version": inv.driver_version if inv else None,
        "cuda_driver_version": inv.cuda_driver_version if inv else None,
        "gpus": [g.to_json() for g in inv.gpus] if inv else [],
        "host": host.to_json(),
        "memory_total_bytes": snap.sample.memory.total_bytes if snap.sample and snap.sample.memory else None,
        "lmx": lmx_hardware(snap, host),
    }


def hello_frame(snap: Snapshot, host: HostFacts) -> dict[str, object]:
    return {
        "type": FRAME_HELLO,
        "agent_version": __version__,
        "node": snap.node,
        "boot_id": snap.boot_id,
        "backend": snap.backend,
        "memory_model": snap.memory_model,
        "interval_s": snap.interval_s,
        "last_seq": snap.sample.seq if snap.sample else 0,
        "ring_dropped": snap.dropped_total,
        "gpu_ok": snap.gpu_ok,
        "gpu_reason": snap.gpu_reason,
        "capabilities": capabilities_json(snap),
        "hardware": hardware_json(snap, host),
    }
