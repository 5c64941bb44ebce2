"""A pynvml-shaped object for unit tests at the hardware seam (no ctypes, fully scriptable)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED = 3
NO_PERMISSION = 4
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
DRIVER_NOT_LOADED = 9
UNKNOWN = 999


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class FakeGpu:
    name: str = "NVIDIA GB10"
    uuid: str = "GPU-test-0"
    power_mw: int = 7000
    instant_mw: int = 7100
    energy_mj: int = 5_000_000
    util: int = 40
    mem_util: int = 0
    temp_c: int = 45
    sm_mhz: int = 1500
    max_sm_mhz: int = 3003
    clock_events: int = 0
    mem_total: int = 0
    mem_used: int = 0
    limit_mw: int = 0
    procs: list[int | None] = field(default_factory=lambda: [1 << 30])


class FakeNvml:
    """Set ``errors[function_name] = code`` (any time) to make that call raise; ``field_errors`` per scope."""

    NVMLError = FakeNvmlError

    def __init__(self, gpus: list[FakeGpu] | None = None) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.errors: dict[str, int] = {}
        self.field_errors: dict[int, int] = {}  # scope -> code
        self.calls: list[str] = []
        self.initialised = False

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        code = self.errors.get(name)
        if code is not None:
            raise FakeNvmlError(code)

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex")
        return self.gpus[index]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._enter("nvmlDeviceGetName")
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._enter("nvmlDeviceGetUUID")
        return h.uuid

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPowerUsage")
        return h.power_mw

    def nvmlDeviceGetFieldValues(self, h: FakeGpu, ids: list[tuple[int, int]]) -> list[Any]:
        self._enter("nvmlDeviceGetFieldValues")
        out = []
        for _fid, scope in ids:
            code = self.field_errors.get(scope, 0)
            out.append(
                SimpleNamespace(nvmlReturn=code, valueType=1, value=SimpleNamespace(uiVal=h.instant_mw))
            )
        return out

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption")
        return h.energy_mj

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=h.util, memory=h.mem_util)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=h.mem_total, used=h.mem_used, free=h.mem_total - h.mem_used)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit")
        return h.limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPowerManagementLimit")
        return h.limit_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, _sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature")
        return h.temp_c

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, _clock: int) -> int:
        self._enter("nvmlDeviceGetClockInfo")
        return h.sm_mhz

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, _clock: int) -> int:
        self._enter("nvmlDeviceGetMaxClockInfo")
        return h.max_sm_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons")
        return h.clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons")
        return h.clock_events

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=100 + i, usedGpuMemory=m) for i, m in enumerate(h.procs)]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkGeneration")
        return 1

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrPcieLinkWidth")
        return 1


def gb10_fake() -> FakeNvml:
    """GB10 as domain.md describes it: memory info and power limits NOT_SUPPORTED, module scope too."""
    lib = FakeNvml()
    lib.errors.update(
        nvmlDeviceGetMemoryInfo=NOT_SUPPORTED,
        nvmlDeviceGetEnforcedPowerLimit=NOT_SUPPORTED,
        nvmlDeviceGetPowerManagementLimit=NOT_SUPPORTED,
    )
    lib.field_errors[1] = NOT_SUPPORTED
    return lib
