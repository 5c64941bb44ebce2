"""`sparkwatch-agent probe`: one look at the node — capability map, hardware, one sample, lmx hardware.

Its output is also the capture format replayed by tests (tests/fixtures/captures/).
"""

from __future__ import annotations

from sparkwatch_agent import __version__
from sparkwatch_agent.config import AgentConfig
from sparkwatch_agent.hello import hardware_json
from sparkwatch_agent.host_facts import read_host_facts
from sparkwatch_agent.lmx_hardware import lmx_hardware
from sparkwatch_agent.node import build_node
from sparkwatch_agent.sample import capabilities_json


def probe(config: AgentConfig) -> dict[str, object]:
    node = build_node(config)
    sampler = node.sampler
    try:
        sample = sampler.tick()
    finally:
        sampler.stop(timeout_s=0.5)
    snap = sampler.snapshot
    host = read_host_facts()
    sensors = tuple(s.sensor for s in sample.sensors)
    return {
        "agent_version": __version__,
        "node": config.node,
        "backend": snap.backend,
        "gpu_ok": snap.gpu_ok,
        "gpu_reason": snap.gpu_reason,
        "memory_model": snap.memory_model,
        "capabilities": capabilities_json(snap.inventory, snap.memory_model, sensors, snap.host_memory_ok),
        "hardware": hardware_json(snap, host),
        "lmx_hardware": lmx_hardware(snap, host),
        "sample": sample.to_json(),
    }
