"""`sparkwatch-agent probe`: one look at the node — capability map, hardware (with the lmx hardware object)
and one sample, as JSON. A probe run on real hardware is what tests/fixtures/captures/ keeps."""

from __future__ import annotations

from dataclasses import dataclass

from sparkwatch_agent import __version__
from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.serving.hello import capabilities_json, hardware_json

#: The exit code of a probe that printed what it read but could not read a GPU (usage errors are 2).
EXIT_GPU_UNREAD = 1


@dataclass(frozen=True, slots=True)
class ProbeResult:
    report: dict[str, object]
    gpu_problem: str | None  # why no GPU was read (the probe then exits non-zero); None when one was


def gpu_problem(snap: Snapshot) -> str | None:
    """Why the probe read no GPU: the backend did not open (NVML missing, init failed, probe failed), or it
    opened and found none. A script checking a node before a run needs to hear that from the exit code."""
    if not snap.gpu_ok:
        return snap.gpu_reason or "the GPU backend did not open"
    if snap.inventory is None or not snap.inventory.gpus:
        return f"GPU backend {snap.backend} found no GPU"
    return None


def probe(sampler: Sampler) -> ProbeResult:
    """Take one sample with ``sampler`` (not started) and describe the node; the sampler is stopped after."""
    try:
        sample = sampler.tick()
    finally:
        sampler.stop(timeout_s=0.5)
    snap = sampler.snapshot
    report: dict[str, object] = {
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
    return ProbeResult(report=report, gpu_problem=gpu_problem(snap))
