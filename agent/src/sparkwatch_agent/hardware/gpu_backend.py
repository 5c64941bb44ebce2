"""The seam between the sampler and whatever answers GPU questions (NVML, the simulator, a test fake)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sparkwatch_agent.hardware.readings import GpuInventory, GpuReading, MemoryModel


class GpuBackend(Protocol):
    """Open once (probe), capture many times, close; device-level trouble raises ``DeviceError``."""

    name: str

    def open(self, host_mem_total_bytes: int | None) -> tuple[GpuInventory, MemoryModel]:
        """Initialise and probe every field once; ``host_mem_total_bytes`` decides the memory model."""
        ...

    def capture(self) -> Any:
        """Read every supported field of every GPU without decoding (an opaque value for ``decode``);
        device-level trouble raises ``DeviceError`` here, a single field failure waits for ``decode``."""
        ...

    def decode(self, captured: Any) -> tuple[GpuReading, ...]:
        """The readings of one capture, with a field failure as a gap (``None`` plus a read error); may
        run later and on another thread, even after the backend was closed and reopened."""
        ...

    def close(self) -> None:
        """Release the library; must be safe to call after a failure."""
        ...


def detect_memory_model(
    memory_info_reason: str | None, gpu_total_bytes: int | None, host_total_bytes: int | None
) -> MemoryModel:
    """Unified when NVML cannot report GPU memory, or reports none or (nearly) the whole host's memory.

    "Nearly" is 90–110 % of MemTotal: a discrete card with more memory than a small host is not unified.

    ``memory_info_reason`` is the NVML reason when the memory-info probe failed, else ``None``.
    """
    if memory_info_reason == "NOT_SUPPORTED":
        return "unified"
    if memory_info_reason is not None:
        return "discrete"  # e.g. NO_PERMISSION: nothing says unified, and the GPU has its own memory API
    if gpu_total_bytes is None or gpu_total_bytes == 0:
        return "unified"
    if host_total_bytes and 0.9 * host_total_bytes <= gpu_total_bytes <= 1.1 * host_total_bytes:
        return "unified"
    return "discrete"


def node_memory_model(gpu_models: Sequence[MemoryModel]) -> MemoryModel:
    """The node's model from its GPUs' own, whatever their order: ``unified`` when any GPU shares host
    memory (then the host's MemTotal − MemAvailable holds GPU allocations and is the figure to publish),
    ``none`` without GPUs, else ``discrete``."""
    if not gpu_models:
        return "none"
    return "unified" if "unified" in gpu_models else "discrete"
