"""The sample and hello frames, as Python objects and as the JSON lines every stream carries."""

from __future__ import annotations

import json
from typing import NamedTuple

from sparkwatch_agent.readings import GpuInventory, GpuReading, HostMemory, MemoryModel, SensorReading
from sparkwatch_agent.ring import SampleRing

FRAME_SAMPLE = "sample"
FRAME_HELLO = "hello"
FRAME_GAP = "gap"


class Sample(NamedTuple):
    """One tick of one node. ``gpu_error`` is set when a device-level failure left ``gpus`` empty.

    A NamedTuple, like the readings it holds: one is built on every tick.
    """

    seq: int
    boot_id: str
    node: str
    t_wall_ns: int
    t_mono_ns: int
    read_duration_s: float
    interval_s: float
    gpus: tuple[GpuReading, ...]
    gpu_error: str | None
    memory: HostMemory | None
    memory_error: str | None
    sensors: tuple[SensorReading, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "type": FRAME_SAMPLE,
            "seq": self.seq,
            "boot_id": self.boot_id,
            "node": self.node,
            "t_wall_ns": self.t_wall_ns,
            "t_mono_ns": self.t_mono_ns,
            "read_duration_s": round(self.read_duration_s, 7),
            "interval_s": self.interval_s,
            "gpu_error": self.gpu_error,
            "gpus": [g.to_json() for g in self.gpus],
            "memory": self.memory.to_json() if self.memory is not None else None,
            "memory_error": self.memory_error,
            "sensors": [s.to_json() for s in self.sensors],
        }


#: Built once: ``json.dumps`` with non-default options constructs a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_frame(obj: dict[str, object]) -> bytes:
    """Compact JSON, one line, UTF-8 — the unit of every stream (WebSocket message lines, stdout lines)."""
    return _ENCODER.encode(obj).encode()


def capabilities_json(
    inventory: GpuInventory | None, memory_model: MemoryModel, sensors: tuple[str, ...], host_memory_ok: bool
) -> dict[str, object]:
    """The capability map: for every GPU field supported / unsupported (reason) / untrusted (reason)."""
    gpus = []
    for gpu in inventory.gpus if inventory else ():
        gpus.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "fields": {name: status.to_json() for name, status in gpu.capabilities.items()},
            }
        )
    return {
        "memory_model": memory_model,
        "gpus": gpus,
        "host_memory": {"supported": host_memory_ok},
        "sensors": list(sensors),
    }


def frames_after(ring: SampleRing, last_seq: int, limit: int) -> tuple[list[bytes], int]:
    """The next frames a reader that has seen ``last_seq`` should get, a gap frame first if it fell
    behind the ring; returns them with the new last seq. An empty list means it is up to date."""
    piece = ring.after(last_seq, limit)
    lines: list[bytes] = []
    if piece.missing:
        gap = {"type": FRAME_GAP, "after": last_seq, "missing": piece.missing, "next_seq": piece.first_seq}
        lines.append(encode_frame(gap))
        last_seq += piece.missing
    if piece.frames and piece.last_seq is not None:
        lines.extend(piece.frames)
        last_seq = piece.last_seq
    return lines, last_seq
