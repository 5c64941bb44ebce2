"""The sampler's published state: one immutable value, replaced whole by every settle.

HTTP handlers, the stream and systemd's status read only this (and the ring), so they never touch hardware.
"""

from __future__ import annotations

from typing import NamedTuple

from sparkwatch_agent.hardware.readings import GpuInventory, MemoryModel
from sparkwatch_agent.sampling.sample import Sample


class Counters(NamedTuple):
    samples_total: int
    read_errors: dict[tuple[str, str], int]  # a copy; never mutated once in a snapshot
    late_ticks_total: int
    gpu_reinit_total: int


class Snapshot(NamedTuple):
    """Everything /metrics, /healthz and the stream need, replaced whole by every settle (a NamedTuple:
    cheaper to build than a frozen dataclass)."""

    node: str
    boot_id: str
    backend: str
    sample: Sample | None
    inventory: GpuInventory | None
    memory_model: MemoryModel
    gpu_ok: bool
    gpu_reason: str | None
    inventory_rev: int
    inventory_seq: int  # seq of the first sample taken with this inventory
    counters: Counters
    dropped_total: int
    interval_s: float
    host_memory_ok: bool


#: A sample older than this many intervals (and at least ``STALE_MIN_S``) is not the hardware's state now:
#: the sampler is stuck (a read that blocks: a hung NVML call after an Xid, a file that never answers).
STALE_INTERVALS, STALE_MIN_S = 3, 5.0


def sample_age_s(snap: Snapshot, mono_ns: int) -> float | None:
    """How old the snapshot's sample is, None before the first."""
    return None if snap.sample is None else (mono_ns - snap.sample.t_mono_ns) / 1e9


def is_stale(snap: Snapshot, age_s: float | None) -> bool:
    """Whether a sample ``age_s`` old (:func:`sample_age_s`) is too old to be served as the present."""
    return age_s is not None and age_s > max(STALE_MIN_S, STALE_INTERVALS * snap.interval_s)
