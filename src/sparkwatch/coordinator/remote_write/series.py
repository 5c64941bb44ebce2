"""A stored agent sample as the series the agent's own /metrics shows for it: the same names, the same
labels, the same values (agent/src/sparkwatch_agent/serving/metrics.py is the truth; the root package may
not import it, so the names are written again here and tests/coordinator/test_remote_write_series.py feeds
one real sample to both and holds them equal).

What is sent per sample: every GPU value the frame carries, the clock-event reasons, host memory, power
sensors and statuses, the sample's read duration, interval and time; from the stream's hello: the GPU
identity (``sparkwatch_gpu_info``), the probed fields (``sparkwatch_field_supported``) and
``sparkwatch_agent_info``. The agent process's own counters (samples, read errors, ring drops, late ticks,
re-inits) and ``sparkwatch_agent_gpu_up`` are not in the stream and are not sent. Unknown values (null)
are absent series, never 0 or NaN.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkwatch.hello_facts import agent_name
from sparkwatch.wire import LEGACY_SENSOR_SOURCE
from sparkwatch_agent.shared.protocol import CLOCK_EVENT_REASONS

#: A series: its label pairs sorted by name, ``__name__`` first (the order remote write asks for).
Key = tuple[tuple[str, str], ...]

NAME = "__name__"
#: Prometheus' staleness marker (``value.StaleNaN`` in its model/value: a NaN of this bit pattern): the
#: series ended here. Receivers keep it apart from an ordinary NaN by those bits, so it is made once, here.
STALE_NAN: float = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]

#: (metric name, the GPU value's key in a sample frame), in the agent's order.
GPU_VALUES: tuple[tuple[str, str], ...] = (
    ("sparkwatch_gpu_power_watts", "power_w"),
    ("sparkwatch_gpu_power_instant_watts", "power_instant_w"),
    ("sparkwatch_gpu_energy_joules_total", "energy_j"),  # a counter: prometheus_client adds _total
    ("sparkwatch_gpu_utilization_ratio", "util_ratio"),
    ("sparkwatch_gpu_memory_utilization_ratio", "mem_util_ratio"),
    ("sparkwatch_gpu_memory_used_bytes", "mem_used_bytes"),
    ("sparkwatch_gpu_memory_total_bytes", "mem_total_bytes"),
    ("sparkwatch_gpu_power_limit_watts", "power_limit_w"),
    ("sparkwatch_gpu_temperature_celsius", "temperature_c"),
    ("sparkwatch_gpu_sm_clock_hertz", "sm_clock_hz"),
    ("sparkwatch_gpu_process_memory_bytes", "process_mem_bytes"),
)
CLOCK_EVENT = "sparkwatch_gpu_clock_event_active"
HOST_VALUES: tuple[tuple[str, str], ...] = (
    ("sparkwatch_memory_total_bytes", "total_bytes"),
    ("sparkwatch_memory_available_bytes", "available_bytes"),
    ("sparkwatch_memory_used_bytes", "used_bytes"),
    ("sparkwatch_memory_free_bytes", "free_bytes"),
    ("sparkwatch_memory_page_cache_bytes", "page_cache_bytes"),
    ("sparkwatch_memory_swap_used_bytes", "swap_used_bytes"),
)
SENSOR_POWER = "sparkwatch_sensor_power_watts"
SENSOR_ENERGY = "sparkwatch_sensor_energy_joules_total"
SENSOR_STATUS = "sparkwatch_sensor_status"
GPU_INFO = "sparkwatch_gpu_info"
FIELD_SUPPORTED = "sparkwatch_field_supported"
SM_CLOCK_MAX = "sparkwatch_gpu_sm_clock_max_hertz"
AGENT_INFO = "sparkwatch_agent_info"
INTERVAL = "sparkwatch_agent_interval_seconds"
READ_DURATION = "sparkwatch_agent_sample_duration_seconds"
LAST_SAMPLE = "sparkwatch_agent_last_sample_timestamp_seconds"


def key(metric: str, /, **labels: str) -> Key:
    """The series ``metric{labels}`` with its pairs in remote write's order."""
    return ((NAME, metric), *sorted(labels.items()))


def _number(value: Any) -> float | None:
    """A JSON number as the agent's collector gives it (``float(value)``); anything else is unknown."""
    return float(value) if type(value) is float or type(value) is int else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class HelloSeries:
    """What a stream's hello gives every sample after it: the agent's node name, each GPU's clock-event
    mask, and the constant-1 identity series the agent's /metrics shows beside the samples."""

    node: str
    clock_masks: Mapping[str, int | None]
    constants: tuple[tuple[Key, float], ...]  # gpu_info and field_supported per GPU, agent_info

    @classmethod
    def of(cls, node: str, hello: Mapping[str, Any] | None) -> HelloSeries:
        """From a hello as the agent sent it (serving/hello.py); ``node`` (the coordinator's name for the
        node) only where the hello does not name it."""
        agent_node = agent_name(node, hello)
        hello = hello or {}
        hardware = _dict(hello.get("hardware"))
        gpus = [g for g in hardware.get("gpus") or () if isinstance(g, dict)]
        masks = {_text(g.get("uuid")): _mask(g.get("clock_events_supported")) for g in gpus}
        constants: list[tuple[Key, float]] = []
        if hello.get("gpu_ok") is True:
            constants += _gpu_constants(agent_node, hello, hardware, gpus)
        constants.append(
            (
                key(
                    AGENT_INFO,
                    node=agent_node,
                    version=_text(hello.get("agent_version")),
                    boot_id=_text(hello.get("boot_id")),
                    backend=_text(hello.get("backend")),
                ),
                1.0,
            )
        )
        return cls(agent_node, masks, tuple(constants))


def _mask(value: Any) -> int | None:
    return value if type(value) is int else None


def _gpu_constants(
    node: str, hello: Mapping[str, Any], hardware: Mapping[str, Any], gpus: list[dict[str, Any]]
) -> list[tuple[Key, float]]:
    out: list[tuple[Key, float]] = []
    fields = {
        _text(c.get("uuid")): _dict(c.get("fields"))
        for c in _dict(hello.get("capabilities")).get("gpus") or ()
        if isinstance(c, dict)
    }
    for gpu in gpus:
        index, uuid = str(gpu.get("index")), _text(gpu.get("uuid"))
        info = key(
            GPU_INFO,
            node=node,
            gpu=index,
            uuid=uuid,
            name=_text(gpu.get("name")),
            driver_version=_text(hardware.get("driver_version")),
            cuda_driver_version=_text(hardware.get("cuda_driver_version")),
            memory_model=_text(hello.get("memory_model")),
        )
        out.append((info, 1.0))
        top = _number(gpu.get("max_sm_clock_hz"))
        if top:  # what the agent's /metrics shows for it: none when unknown or 0
            out.append((key(SM_CLOCK_MAX, node=node, gpu=index, uuid=uuid), top))
        for field, status in fields.get(uuid, {}).items():
            supported = isinstance(status, dict) and status.get("supported") is True
            out.append((key(FIELD_SUPPORTED, node=node, gpu=index, field=field), 1.0 if supported else 0.0))
    return out


def frame_series(data: Mapping[str, Any], hello: HelloSeries) -> list[tuple[Key, float]]:
    """The series of one parsed sample frame (``orjson.loads(frame.raw)``) and their values."""
    node = hello.node
    out = list(hello.constants) if data.get("gpu_error") is None else [hello.constants[-1]]
    for g in data.get("gpus") or ():
        _gpu_series(g, node, hello.clock_masks, out)
    memory = data.get("memory")
    if isinstance(memory, dict):
        for name, field in HOST_VALUES:
            value = _number(memory.get(field))
            if value is not None:
                out.append((((NAME, name), ("node", node)), value))
    _sensor_series(data, node, out)
    for name, field in ((INTERVAL, "interval_s"), (READ_DURATION, "read_duration_s")):
        value = _number(data.get(field))
        if value is not None:
            out.append((((NAME, name), ("node", node)), value))
    out.append((((NAME, LAST_SAMPLE), ("node", node)), data["t_wall_ns"] / 1e9))
    return out


def _gpu_series(
    g: Mapping[str, Any], node: str, masks: Mapping[str, int | None], out: list[tuple[Key, float]]
) -> None:
    gpu, uuid = str(g.get("index")), _text(g.get("uuid"))
    for name, field in GPU_VALUES:
        value = _number(g.get(field))
        if value is not None:
            out.append((((NAME, name), ("gpu", gpu), ("node", node), ("uuid", uuid)), value))
    reasons = g.get("clock_event_reasons")
    if type(reasons) is not int:
        return
    mask = masks.get(uuid)
    for bit, reason in CLOCK_EVENT_REASONS.items():
        if mask is None or mask & bit or reasons & bit:  # what the GPU can report (the agent's rule)
            labels = ((NAME, CLOCK_EVENT), ("gpu", gpu), ("node", node), ("reason", reason), ("uuid", uuid))
            out.append((labels, 1.0 if reasons & bit else 0.0))


def _sensor_series(data: Mapping[str, Any], node: str, out: list[tuple[Key, float]]) -> None:
    for s in data.get("sensors") or ():
        channel: Key = (
            *(("kind", _text(s.get("kind"))), ("node", node)),
            *(("sensor", _text(s.get("sensor"))), ("source", _text(s.get("source", LEGACY_SENSOR_SOURCE)))),
        )
        for name, field in ((SENSOR_POWER, "power_w"), (SENSOR_ENERGY, "energy_j")):
            value = _number(s.get(field))
            if value is not None:
                out.append((((NAME, name), *channel), value))
    for x in data.get("status") or ():
        value = _number(x.get("value"))
        if value is not None:
            labels = (("node", node), ("source", _text(x.get("source"))), ("status", _text(x.get("name"))))
            out.append((((NAME, SENSOR_STATUS), *labels), value))
