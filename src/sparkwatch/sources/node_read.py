"""A node's boots, each read on its own (coordinator/boot_reads.py), as one set of columns in boot order.

A node's tracks are picked out of these columns (views where rows step evenly). With one boot the columns
are that read's own. With more, each column is joined once, and each boot's part is let go as soon as it
is joined: a node with an agent restart held its boots' columns beside their concatenations, and every
track's, domain's and signal's own concatenation besides (an 8 h node: 125 MiB at its peak, against 87 for
a node of one boot).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkwatch.coordinator.boot_reads import BootRead
from sparkwatch.core.clock import ClockStep, MonoFit
from sparkwatch.core.tracks import F64, I64
from sparkwatch.store.rows import Channel, SensorRows, Text, samples_of_rows


@dataclass(frozen=True, slots=True)
class NodeRead:
    """One row per GPU per sample (``gpu_*``, with the clock signals), one per sample (``memory_*``), one
    per power channel per sample (``sensor_*``); times on the coordinator's clock."""

    samples: tuple[int, ...]  # samples per boot
    gpu_rows: tuple[int, ...]  # GPU rows per boot
    gpu_t_ns: I64
    gpu_interval_s: F64
    gpu_index: I64
    gpu_uuid: Text
    power_w: F64
    energy_j: F64
    util_ratio: F64
    sm_clock_hz: F64
    temperature_c: F64
    reasons: I64
    memory_t_ns: I64
    memory_interval_s: F64
    used_bytes: F64
    page_cache_bytes: F64
    sensor_counts: I64  # power channel rows per sample
    sensor_power_w: F64
    sensor_energy_j: F64
    sensor_channel: I64  # each row's channel, an index into ``channels``
    channels: tuple[Channel, ...]  # in the order the node first streamed them
    fits: tuple[MonoFit | None, ...]  # per boot; None: placed by its wall offsets
    steps: tuple[ClockStep, ...]  # the wall-clock steps seen, every boot's

    def sensor_samples(self, rows: I64) -> I64:
        """Each of ``rows``' sample (a position among the node's samples)."""
        return samples_of_rows(self.sensor_counts, rows)


#: The columns taken from each boot's read, by name: (getter, dtype).
_COLUMNS: dict[str, tuple[Callable[[BootRead], np.ndarray], Any]] = {
    "gpu_t_ns": (lambda r: r.gpu_t_ns, np.int64),
    "gpu_interval_s": (lambda r: r.gpu.interval_s, np.float64),
    "gpu_index": (lambda r: r.gpu.gpu_index, None),  # as read: int32 or int64
    "gpu_uuid": (lambda r: r.gpu.uuid, object),
    "power_w": (lambda r: r.gpu.power_w, np.float64),
    "energy_j": (lambda r: r.gpu.energy_j, np.float64),
    "util_ratio": (lambda r: r.gpu.util_ratio, np.float64),
    "sm_clock_hz": (lambda r: r.signals.sm_clock_hz, np.float64),
    "temperature_c": (lambda r: r.signals.temperature_c, np.float64),
    "reasons": (lambda r: r.signals.reasons, np.int64),
    "memory_t_ns": (lambda r: r.memory_t_ns, np.int64),
    "memory_interval_s": (lambda r: r.memory.interval_s, np.float64),
    "used_bytes": (lambda r: r.memory.used_bytes, np.float64),
    "page_cache_bytes": (lambda r: r.memory.page_cache_bytes, np.float64),
    "sensor_counts": (lambda r: r.sensors.counts, None),
    "sensor_power_w": (lambda r: r.sensors.power_w, np.float64),
    "sensor_energy_j": (lambda r: r.sensors.energy_j, np.float64),
}
#: Columns that are another's own array in every read of a one-GPU node (its GPU rows are its samples):
#: joined once, shared.
_SAME_AS = {"memory_t_ns": "gpu_t_ns", "memory_interval_s": "gpu_interval_s"}


def join_reads(reads: list[BootRead]) -> NodeRead:
    """The boots' reads as one; ``reads`` is emptied (its columns are let go as they are joined)."""
    channels: dict[Channel, int] = {}
    numbers = [_channel_numbers(r.sensors, channels) for r in reads]
    parts = {name: [get(r) for r in reads] for name, (get, _) in _COLUMNS.items()}
    same = {
        name: all(a is b for a, b in zip(parts[name], parts[other], strict=True))
        for name, other in _SAME_AS.items()
    }
    samples = tuple(len(r.memory_t_ns) for r in reads)
    gpu_rows = tuple(len(r.gpu_t_ns) for r in reads)
    fits = tuple(r.fit for r in reads)
    steps = tuple(s for r in reads for s in r.steps)
    reads.clear()
    c: dict[str, np.ndarray] = {}
    for name, (_, dtype) in _COLUMNS.items():
        other = _SAME_AS.get(name)
        c[name] = c[other] if other is not None and same[name] else _joined(parts[name], dtype)
        parts[name].clear()  # this column's parts go now, not with the last column
    channel = _joined(numbers, np.int64)
    numbers.clear()
    return NodeRead(
        samples=samples,
        gpu_rows=gpu_rows,
        gpu_t_ns=c["gpu_t_ns"],
        gpu_interval_s=c["gpu_interval_s"],
        gpu_index=c["gpu_index"],
        gpu_uuid=c["gpu_uuid"],
        power_w=c["power_w"],
        energy_j=c["energy_j"],
        util_ratio=c["util_ratio"],
        sm_clock_hz=c["sm_clock_hz"],
        temperature_c=c["temperature_c"],
        reasons=c["reasons"],
        memory_t_ns=c["memory_t_ns"],
        memory_interval_s=c["memory_interval_s"],
        used_bytes=c["used_bytes"],
        page_cache_bytes=c["page_cache_bytes"],
        sensor_counts=c["sensor_counts"],
        sensor_power_w=c["sensor_power_w"],
        sensor_energy_j=c["sensor_energy_j"],
        sensor_channel=channel,
        channels=tuple(channels),
        fits=fits,
        steps=steps,
    )


def _channel_numbers(rows: SensorRows, numbers: dict[Channel, int]) -> I64:
    """Each row's channel as a number from ``numbers`` (extended in the order channels first appear): from
    the read's own channel codes, a few distinct among many rows, so nothing is compared per row."""
    codes = np.flatnonzero(np.bincount(rows.channel)) if len(rows.channel) else np.empty(0, np.int64)
    first = [int(np.argmax(rows.channel == code)) for code in codes.tolist()]  # where each first appears
    remap = np.zeros(int(codes.max()) + 1 if len(codes) else 1, np.int64)
    for code, _at in sorted(zip(codes.tolist(), first, strict=True), key=lambda pair: pair[1]):
        channel = rows.channels[code]
        assert channel is not None  # a code some row has
        remap[code] = numbers.setdefault(channel, len(numbers))
    out: I64 = remap[rows.channel]
    return out


def _joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """The boots' columns one after another (one boot, the usual case: its column itself, not a copy), as
    ``dtype`` (None: the parts' own)."""
    if not parts:
        return np.empty(0, dtype=dtype or np.int64)
    out = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return out if dtype is None else out.astype(dtype, copy=False)
