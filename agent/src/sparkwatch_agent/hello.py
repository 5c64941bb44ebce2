"""The hello frame: who this agent is and what it can measure, sent first on every stream."""

from __future__ import annotations

from sparkwatch_agent import __version__
from sparkwatch_agent.host_facts import HostFacts
from sparkwatch_agent.lmx_hardware import lmx_hardware
from sparkwatch_agent.sample import FRAME_HELLO, capabilities_json
from sparkwatch_agent.snapshot import Snapshot


def hardware_json(snap: Snapshot, host: HostFacts) -> dict[str, object]:
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


def hello_frame(snap: Snapshot, host: HostFacts, sensors: tuple[str, ...]) -> dict[str, object]:
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
        "capabilities": capabilities_json(snap.inventory, snap.memory_model, sensors, snap.host_memory_ok),
        "hardware": hardware_json(snap, host),
    }
