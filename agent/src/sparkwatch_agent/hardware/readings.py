"""Typed values that cross the hardware boundary.

Every field read is either a value or ``None``; *why* a field is missing lives in the capability map
(probed once) or in the per-sample read errors — never in the value itself (no 0, no NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

#: The probed GPU fields, in the order they appear in capability maps and /metrics.
GPU_FIELDS: tuple[str, ...] = (
    "power",
    "power_instant",
    "energy",
    "utilization",
    "memory_utilization",
    "memory_info",
    "power_limit",
    "temperature",
    "sm_clock",
    "clock_events",
    "process_memory",
)
#: The fields sparkwatch's figures stand on (power, its energy counter, the gate's utilisation). A refusal at
#: the probe holds for the agent's life, so one of these is asked ``KEY_PROBE_TRIES`` times before it is
#: believed (NOT_SUPPORTED may come sporadically under fast polling), and is said as a warning.
KEY_FIELDS, KEY_PROBE_TRIES, KEY_PROBE_PAUSE_S = ("power", "energy", "utilization"), 3, 0.05
#: The order a capture reads a GPU's fields in: the energy counter first, right after the sample's stamp,
#: because power is ΔE/Δt over the stamps. Every NVML call hands the GIL to the agent's other threads, which
#: may keep it for Python's 5 ms switch interval: behind two calls, the counter could be read 10 ms late.
READ_ORDER: tuple[str, ...] = ("energy", *(field for field in GPU_FIELDS if field != "energy"))

FieldState = Literal["supported", "unsupported", "untrusted"]
MemoryModel = Literal["unified", "discrete", "none", "unknown"]
#: What a power sensor measures; only ``system`` may ever be presented as system power.
SensorKind = Literal["system", "module", "gpu", "cpu", "other"]


@dataclass(frozen=True, slots=True)
class FieldStatus:
    """Outcome of probing one field once at start.

    ``untrusted`` means the call answers but its value is known to be bogus on this hardware (GB10 memory
    utilisation reads 0 forever); such a field is not polled, exactly like an unsupported one.
    """

    state: FieldState
    reason: str | None = None
    detail: str | None = None

    @property
    def polled(self) -> bool:
        return self.state == "supported"

    def to_json(self) -> dict[str, str | bool]:
        out: dict[str, str | bool] = {"supported": self.state == "supported", "state": self.state}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """Static facts about one GPU, read at probe time."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int | None
    pcie_link_gen: int | None
    pcie_link_width: int | None
    pcie_link_trusted: bool
    capabilities: dict[str, FieldStatus]
    max_sm_clock_hz: float | None = None  # nvmlDeviceGetMaxClockInfo(SM): the clock ratio's denominator
    #: nvmlDeviceGetSupportedClocksEventReasons: the reasons this GPU can report (None: it does not say)
    clock_events_supported: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_total_bytes": self.memory_total_bytes,
            "pcie_link": {
                "gen": self.pcie_link_gen,
                "width": self.pcie_link_width,
                "trusted": self.pcie_link_trusted,
            },
            "max_sm_clock_hz": self.max_sm_clock_hz,
            "clock_events_supported": self.clock_events_supported,
        }


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """What an opened GPU backend found: driver facts, GPUs and their probed capabilities."""

    backend: str
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[GpuFacts, ...]
    simulated: bool = False


#: The most a GPU's value can be, by its :class:`GpuReading` key, with the field its errors name: past it a
#: value is no reading — NVML's NVML_VALUE_NOT_AVAILABLE (0xFFFFFFFF: 4294967.295 W or an SM clock of
#: 4.3e15 Hz once scaled, both published as read) or a value read wrong — and is null with OUT_OF_RANGE, as a
#: utilisation over 100 % is.
PLAUSIBLE_MAX: dict[str, tuple[str, float]] = {
    "power_w": ("power", 5_000.0),  # no GPU draws 5 kW (a B200's limit is about 1 kW)
    "power_instant_w": ("power_instant", 5_000.0),
    "power_limit_w": ("power_limit", 5_000.0),
    "energy_j": ("energy", 1e15),  # 5 kW for 6 000 years; 2**64 - 1 mJ would be 1.8e16 J
    "temperature_c": ("temperature", 200.0),
    "sm_clock_hz": ("sm_clock", 10e9),
    "mem_used_bytes": ("memory_info", 2.0**50),  # 1 PiB; 2**64 - 1 is NVML's unavailable
    "mem_total_bytes": ("memory_info", 2.0**50),
    "process_mem_bytes": ("process_memory", 2.0**50),
}


class GpuReading(NamedTuple):
    """One GPU's values in one sample; ``None`` = not known for this sample.

    A NamedTuple rather than a frozen dataclass: it is built for every GPU on every tick, and tuple
    construction costs a third of a frozen dataclass's ``__init__``.
    """

    gpu_index: int  # not "index": that name is tuple.index
    uuid: str
    power_w: float | None = None
    power_instant_w: float | None = None
    energy_j: float | None = None
    util_ratio: float | None = None
    mem_util_ratio: float | None = None
    temperature_c: float | None = None
    sm_clock_hz: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_limit_w: float | None = None
    process_mem_bytes: int | None = None
    #: nvmlDeviceGetCurrentClocksEventReasons: why the clocks are below their maximum (a bitmask).
    clock_event_reasons: int | None = None
    #: (field, reason) for fields that were supported at probe time but failed in this read.
    read_errors: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = dict(zip(_GPU_JSON_KEYS, self, strict=True))
        out["read_errors"] = [list(e) for e in self.read_errors]
        return out


#: JSON keys of GpuReading, in field order ("index" for ``gpu_index``); zip beats a dict literal per tick.
_GPU_JSON_KEYS = ("index", *GpuReading._fields[1:])


class HostMemory(NamedTuple):
    """Host memory from /proc/meminfo; on unified-memory machines this *is* the GPU's memory."""

    total_bytes: int | None
    available_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    page_cache_bytes: int | None
    swap_used_bytes: int | None

    def to_json(self) -> dict[str, int | None]:
        return dict(zip(self._fields, self, strict=True))


@dataclass(frozen=True, slots=True)
class SensorReading:
    """One hwmon power channel. ``kind`` keeps GPU-rail power apart from system power."""

    sensor: str
    kind: SensorKind
    power_w: float | None
    energy_j: float | None
    source: str = "hwmon"  # where the channel lives: ``hwmon:<chip name>``, ``sim:spbm``

    def to_json(self) -> dict[str, object]:
        return {
            "sensor": self.sensor,
            "kind": self.kind,
            "source": self.source,
            "power_w": self.power_w,
            "energy_j": self.energy_j,
        }


class StatusReading(NamedTuple):
    """A dimensionless status a power controller reports (spbm: ``prochot``, ``pl_level``); ``None`` when it
    could not be read this tick."""

    name: str
    source: str  # hwmon:<chip name>
    value: int | None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "source": self.source, "value": self.value}


class DeviceError(Exception):
    """A device-level NVML failure (library missing, driver not loaded, GPU lost): not a field gap."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
