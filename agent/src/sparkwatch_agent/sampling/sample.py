"""The sample, as a Python object and as the JSON line every stream carries; the frame type names."""

from __future__ import annotations

import json
import math
from typing import NamedTuple

from sparkwatch_agent.hardware.readings import GpuReading, HostMemory, SensorReading, StatusReading
from sparkwatch_agent.shared.protocol import FRAME_SAMPLE


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
    status: tuple[StatusReading, ...] = ()

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
            "status": [s.to_json() for s in self.status],
        }


#: Built once: ``json.dumps`` with non-default options constructs a new encoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_frame(obj: dict[str, object]) -> bytes:
    """Compact JSON, one line, UTF-8 — the unit of every stream (WebSocket message lines, stdout lines)."""
    return _ENCODER.encode(obj).encode()


def _num(value: float | None) -> str:
    """A JSON number, or null for unknown (and for a non-finite value, which is never a measurement)."""
    if value is None or not math.isfinite(value):
        return "null"
    return repr(value)


_str = _ENCODER.encode


def _gpu_frame(g: GpuReading) -> str:
    errors = ",".join(f"[{_str(f)},{_str(r)}]" for f, r in g.read_errors)
    return (
        f'{{"index":{g.gpu_index},"uuid":{_str(g.uuid)},"power_w":{_num(g.power_w)},'
        f'"power_instant_w":{_num(g.power_instant_w)},"energy_j":{_num(g.energy_j)},'
        f'"util_ratio":{_num(g.util_ratio)},"mem_util_ratio":{_num(g.mem_util_ratio)},'
        f'"temperature_c":{_num(g.temperature_c)},"sm_clock_hz":{_num(g.sm_clock_hz)},'
        f'"mem_used_bytes":{_num(g.mem_used_bytes)},"mem_total_bytes":{_num(g.mem_total_bytes)},'
        f'"power_limit_w":{_num(g.power_limit_w)},"process_mem_bytes":{_num(g.process_mem_bytes)},'
        f'"clock_event_reasons":{_num(g.clock_event_reasons)},"read_errors":[{errors}]}}'
    )


def encode_sample(s: Sample) -> bytes:
    """The sample frame, written directly: the same JSON as ``encode_frame(s.to_json())`` (a test holds
    them equal) at a fraction of the cost, since it runs on every tick."""
    m = s.memory
    memory = (
        "null"
        if m is None
        else (
            f'{{"total_bytes":{_num(m.total_bytes)},"available_bytes":{_num(m.available_bytes)},'
            f'"used_bytes":{_num(m.used_bytes)},"free_bytes":{_num(m.free_bytes)},'
            f'"page_cache_bytes":{_num(m.page_cache_bytes)},"swap_used_bytes":{_num(m.swap_used_bytes)}}}'
        )
    )
    sensors = ",".join(
        f'{{"sensor":{_str(x.sensor)},"kind":{_str(x.kind)},"source":{_str(x.source)},'
        f'"power_w":{_num(x.power_w)},'
        f'"energy_j":{_num(x.energy_j)}}}'
        for x in s.sensors
    )
    status = ",".join(
        f'{{"name":{_str(x.name)},"source":{_str(x.source)},"value":{_num(x.value)}}}' for x in s.status
    )
    gpu_error = "null" if s.gpu_error is None else _str(s.gpu_error)
    memory_error = "null" if s.memory_error is None else _str(s.memory_error)
    return (
        f'{{"type":"sample","seq":{s.seq},"boot_id":{_str(s.boot_id)},"node":{_str(s.node)},'
        f'"t_wall_ns":{s.t_wall_ns},"t_mono_ns":{s.t_mono_ns},'
        f'"read_duration_s":{_num(round(s.read_duration_s, 7))},"interval_s":{_num(s.interval_s)},'
        f'"gpu_error":{gpu_error},"gpus":[{",".join(_gpu_frame(g) for g in s.gpus)}],'
        f'"memory":{memory},"memory_error":{memory_error},"sensors":[{sensors}],"status":[{status}]}}'
    ).encode()
