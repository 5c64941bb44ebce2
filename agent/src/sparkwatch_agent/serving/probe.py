"""`sparkwatch-agent probe`: one look at the node — capability map, hardware (with the lmx hardware object)
and one sample, as JSON. A probe run on real hardware is what tests/fixtures/captures/ keeps."""

from __future__ import annotations

from sparkwatch_agent import __version__
from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.serving.hello import capabilities_json, hardware_json


def probe(sampler: Sampler) -> dict[str, object]:
    """Take one sample with ``sampler`` (not started) and describe the node; the sampler is stopped after."""
    try:
        sample = sampler.tick()
    finally:
        sampler.stop(timeout_s=0.5)
    snap = sampler.snapshot
    return {
        "agent_version": __version__,
        "node": snap.node,
        "backend": snap.backend,
        "gpu_ok": snap.gpu_ok,
        "gpu_reason": snap.gpu_reason,
        "memory_model": snap.memory_model,
        "capabilities": capabilities_json(snap),
        "hardware": hardware_json(snap, read_host_facts()),
        "sample": sample.to_json(),
    }
