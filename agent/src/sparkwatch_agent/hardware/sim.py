"""A deterministic simulated GB10 (DGX Spark) node for demos and tests on machines without a GPU.

The simulator speaks the nvidia-ml-py API (``SimNvml``), so it runs through the very same
``NvmlBackend`` probe and read path as a real GPU, and answers NOT_SUPPORTED exactly where a GB10 does
(memory info, power limits, module-scope power). Its unified memory is a synthetic /proc/meminfo.
Power is a pure function of the load, and energy its exact integral over the injected monotonic clock,
so a test can predict every joule.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sparkwatch_agent.hardware.hwmon import Channel, SensorCapture, decode_channels
from sparkwatch_agent.hardware.meminfo import MeminfoReader
from sparkwatch_agent.hardware.readings import SensorReading, StatusReading
from sparkwatch_agent.shared.units import GIB

#: The clock event reasons the simulated GPU can report: idle, power cap, slowdowns, thermal, power brake
#: (not applications/display clocks, sync boost, board limit or reliability).
SIM_SUPPORTED_CLOCK_EVENTS = 0x1 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80
#: Where the simulated spbm channels say they come from.
SIM_SPBM_SOURCE = "sim:spbm"


@dataclass(frozen=True, slots=True)
class SimSpec:
    """The simulated node's constants (GB10-like; GPU-rail power only, as NVML reports it)."""

    mem_total_bytes: int = 125_000_000 * 1024  # 128.0 GB of LPDDR5x, as MemTotal reports it
    base_used_bytes: int = 6 * GIB  # OS and unrelated services
    page_cache_bytes: int = 3 * GIB
    idle_w: float = 5.0  # nothing resident
    resident_idle_w: float = 11.0  # a model resident, GPU idle
    busy_slope_w: float = 50.0  # added at utilisation 1.0
    energy_start_j: float = 1234.567  # the counter counts since "driver load", not since us
    sm_clock_idle_mhz: int = 208
    sm_clock_busy_mhz: int = 2418  # what a GB10 runs at under load (its applications clock)
    sm_clock_max_mhz: int = 3003  # what a GB10's NVML reports as its maximum SM clock
    # the node around the GPU rail, as spbm's sys_total reports it: ≈ 25 W idle, 60–90 W in inference
    sys_base_w: float = 20.0  # board, CPU idle, memory, fans
    sys_cpu_busy_w: float = 8.0  # CPU cores feeding the GPU, at utilisation 1.0
    dc_input_ratio: float = 1.04  # dc_input (the USB-C input) ≥ sys_total: conversion losses
    #: The spbm gpu accumulator's starting count, mJ: 500 J before its 32-bit wrap, so a demo crosses it.
    spbm_gpu_start_mj: int = 2**32 - 500_000


class SimGb10:
    """Load state and physics of one simulated GB10; thread-safe (sampler thread vs. HTTP handlers)."""

    def __init__(self, node: str, now_mono_ns: Callable[[], int], spec: SimSpec | None = None) -> None:
        self.node = node
        self.spec = spec or SimSpec()
        self._now = now_mono_ns
        self._lock = threading.Lock()
        self._util = 0.0
        self._model_bytes = 0
        self._since_ns = now_mono_ns()
        self._energy_j = self.spec.energy_start_j
        self._sys_energy_j = 0.0  # since the simulator started: the truth a sys_total integral should give
        self._throttle: tuple[int, int] | None = None  # scripted episode: (clock event reasons, SM clock MHz)

    def mono_s(self) -> float:
        """The simulator's monotonic clock, in seconds (what its readings are stamped with)."""
        return self._now() / 1e9

    def _power_locked(self) -> float:
        s = self.spec
        idle = s.resident_idle_w if self._model_bytes > 0 else s.idle_w
        return idle + s.busy_slope_w * self._util

    def _sys_power_locked(self) -> float:
        return self.spec.sys_base_w + self._power_locked() + self.spec.sys_cpu_busy_w * self._util

    def check_load(self, util_ratio: float | None, model_bytes: int | None) -> None:
        """ValueError unless :meth:`set_load` would take these: a caller that changes several things checks
        them all first, so a refusal changes none."""
        if util_ratio is not None and not 0.0 <= util_ratio <= 1.0:
            raise ValueError("util_ratio must be within [0, 1]")
        if model_bytes is not None and not 0 <= model_bytes <= self.spec.mem_total_bytes:
            raise ValueError("model_bytes must be within [0, total memory]")

    def check_throttle(self, reasons: int | None, sm_clock_mhz: int | None) -> None:
        """ValueError unless :meth:`set_throttle` would take these."""
        if reasons is not None and not 0 < reasons < 2**64:
            raise ValueError("clock_event_reasons must be a bitmask within (0, 2^64)")
        if sm_clock_mhz is not None and not 0 < sm_clock_mhz <= self.spec.sm_clock_max_mhz:
            raise ValueError(f"sm_clock_mhz must be within (0, {self.spec.sm_clock_max_mhz}]")

    def set_load(self, util_ratio: float | None = None, model_bytes: int | None = None) -> None:
        """Change the load from now on; the energy counter integrates the old power up to this instant."""
        self.check_load(util_ratio, model_bytes)
        with self._lock:
            now = self._now()
            self._energy_j += self._power_locked() * (now - self._since_ns) / 1e9
            self._sys_energy_j += self._sys_power_locked() * (now - self._since_ns) / 1e9
            self._since_ns = now
            if util_ratio is not None:
                self._util = util_ratio
            if model_bytes is not None:
                self._model_bytes = model_bytes

    def set_throttle(self, reasons: int | None, sm_clock_mhz: int | None = None) -> None:
        """Start a throttle episode (clock event reasons bitmask, the SM clock it holds the GPU at), or end
        it with ``None``; power and energy are not changed by it."""
        self.check_throttle(reasons, sm_clock_mhz)
        mhz = sm_clock_mhz or self.spec.sm_clock_busy_mhz
        with self._lock:
            self._throttle = None if reasons is None else (reasons, mhz)

    def clocks(self) -> tuple[int, int]:
        """(SM clock MHz, clock event reasons) now: a throttle episode's, else idle (GPU idle reason, 0x1)
        or busy (no reason)."""
        with self._lock:
            if self._throttle is not None:
                reasons, mhz = self._throttle
                return mhz, reasons
            busy = self._util > 0
        spec = self.spec
        return (spec.sm_clock_busy_mhz, 0) if busy else (spec.sm_clock_idle_mhz, 0x1)

    def state(self) -> dict[str, float | int]:
        """Current load, power and energy: the GPU's as NVML would report them now, and the whole node's
        (``sys_power_w``, ``sys_energy_j`` since the simulator started) as spbm's sys_total would."""
        with self._lock:
            elapsed_s = (self._now() - self._since_ns) / 1e9
            power, sys_power = self._power_locked(), self._sys_power_locked()
            return {
                "util_ratio": self._util,
                "model_bytes": self._model_bytes,
                "power_w": power,
                "energy_j": self._energy_j + power * elapsed_s,
                "sys_power_w": sys_power,
                "sys_energy_j": self._sys_energy_j + sys_power * elapsed_s,
            }

    def meminfo_text(self) -> bytes:
        """A /proc/meminfo as a GB10 under this load would show it (CUDA allocations lower MemAvailable)."""
        s = self.spec
        with self._lock:
            model = self._model_bytes
        total_kb = s.mem_total_bytes // 1024
        used_kb = min(total_kb, (s.base_used_bytes + model) // 1024)
        cache_kb = min(total_kb - used_kb, s.page_cache_bytes // 1024)
        free_kb = total_kb - used_kb - cache_kb
        sreclaim_kb = cache_kb // 8
        return (
            f"MemTotal:       {total_kb} kB\n"
            f"MemFree:        {free_kb} kB\n"
            f"MemAvailable:   {total_kb - used_kb} kB\n"
            f"Buffers:        0 kB\n"
            f"Cached:         {cache_kb - sreclaim_kb} kB\n"
            f"SReclaimable:   {sreclaim_kb} kB\n"
            f"SwapTotal:      0 kB\n"
            f"SwapFree:       0 kB\n"
        ).encode()


class SimMeminfoReader(MeminfoReader):
    """The simulated node's /proc/meminfo, parsed by the same code as the real file."""

    def __init__(self, sim: SimGb10) -> None:
        super().__init__()
        self._sim = sim

    def capture(self) -> bytes:
        return self._sim.meminfo_text()


class SimSpbm:
    """The simulated node's spbm hwmon channels, decoded by the same code as a real sysfs tree: power-only
    ``sys_total`` and ``dc_input`` (µW), and the ``gpu`` rail with its accumulator (µJ, a 32-bit count of
    mJ that wraps, as spbm's does)."""

    def __init__(self, sim: SimGb10) -> None:
        self._sim = sim
        self._channels = (
            Channel("sys_total", "system", SIM_SPBM_SOURCE),
            Channel("dc_input", "system", SIM_SPBM_SOURCE),
            Channel("gpu", "gpu", SIM_SPBM_SOURCE),
        )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.sensor for c in self._channels)

    def refresh(self) -> None:
        return None  # the simulated chip never changes

    def capture(self) -> SensorCapture:
        state = self._sim.state()
        spec = self._sim.spec
        sys_w = float(state["sys_power_w"])
        gpu_mj = spec.spbm_gpu_start_mj + int((float(state["energy_j"]) - spec.energy_start_j) * 1000)
        return SensorCapture(
            (
                (b"%d\n" % round(sys_w * 1e6), None),
                (b"%d\n" % round(sys_w * spec.dc_input_ratio * 1e6), None),
                (b"%d\n" % round(float(state["power_w"]) * 1e6), b"%d\n" % (gpu_mj % 2**32 * 1000)),
            ),
            t_s=self._sim.mono_s(),
        )

    def decode(
        self, captured: SensorCapture, errors: list[tuple[str, str]] | None = None
    ) -> tuple[SensorReading, ...]:
        return decode_channels(self._channels, captured, errors)

    def decode_status(self, captured: SensorCapture) -> tuple[StatusReading, ...]:
        return ()  # the simulated spbm has no status attributes

    def close(self) -> None:
        pass


class SimNvmlError(Exception):
    """Shaped like ``pynvml.NVMLError``: the NVML return code is in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


_NOT_SUPPORTED = 3


class SimNvml:
    """The slice of the nvidia-ml-py API that sparkwatch uses, answered like a GB10 does."""

    NVMLError = SimNvmlError

    def __init__(self, sim: SimGb10) -> None:
        self._sim = sim
        digest = zlib.crc32(sim.node.encode())
        self._uuid = f"GPU-{digest:08x}-5157-4000-8000-{digest:012x}"  # stable per node name
        self._handle = object()

    def _check(self, handle: Any) -> None:
        if handle is not self._handle:
            raise SimNvmlError(2)

    @staticmethod
    def _unsupported(*_args: Any) -> Any:
        raise SimNvmlError(_NOT_SUPPORTED)

    nvmlDeviceGetMemoryInfo = _unsupported
    nvmlDeviceGetEnforcedPowerLimit = _unsupported
    nvmlDeviceGetPowerManagementLimit = _unsupported

    def nvmlInit(self) -> None:
        return None

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if index != 0:
            raise SimNvmlError(2)
        return self._handle

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._check(handle)
        return "NVIDIA GB10"

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._check(handle)
        return self._uuid

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        self._check(handle)
        return round(float(self._sim.state()["power_w"]) * 1000)

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[tuple[int, int]]) -> list[Any]:
        self._check(handle)
        power_mw = round(float(self._sim.state()["power_w"]) * 1000)
        out = []
        for field_id, scope in field_ids:
            ok = field_id in (185, 186) and scope == 0  # GB10: GPU scope only, MODULE scope unsupported
            out.append(
                SimpleNamespace(
                    nvmlReturn=0 if ok else _NOT_SUPPORTED,
                    valueType=1,
                    value=SimpleNamespace(uiVal=power_mw if ok else 0),
                )
            )
        return out

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        self._check(handle)
        return int(float(self._sim.state()["energy_j"]) * 1000)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self._check(handle)
        util = float(self._sim.state()["util_ratio"])
        return SimpleNamespace(gpu=round(util * 100), memory=0)  # GB10: memory utilisation is always 0

    def nvmlDeviceGetTemperature(self, handle: Any, _sensor: int) -> int:
        self._check(handle)
        return round(38 + 30 * float(self._sim.state()["util_ratio"]))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        self._check(handle)
        if clock_type != 1:
            raise SimNvmlError(_NOT_SUPPORTED)
        return self._sim.clocks()[0]

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int:
        self._check(handle)
        if clock_type != 1:
            raise SimNvmlError(_NOT_SUPPORTED)
        return self._sim.spec.sm_clock_max_mhz

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any) -> int:
        self._check(handle)
        return SIM_SUPPORTED_CLOCK_EVENTS

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._check(handle)
        return self._sim.clocks()[1]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._check(handle)
        model = int(self._sim.state()["model_bytes"])
        # Per-process accounting sees less than MemAvailable drops by (nvtop #466); model it as 92 %.
        return [SimpleNamespace(pid=4242, usedGpuMemory=model * 92 // 100)] if model else []

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        self._check(handle)
        return 1  # bogus on GB10: no PCIe between CPU and GPU

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        self._check(handle)
        return 1
