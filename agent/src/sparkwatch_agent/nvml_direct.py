"""Polling readers that call the NVML entry points nvidia-ml-py resolved, with their arguments built once.

nvidia-ml-py's wrappers allocate a result struct, look the function up under a lock and check the return
code on every call; for processes they call NVML twice and build a Python object per process. At 10 Hz,
with caches cold after each sleep, the seven wrapped calls of a GB10 tick took ~240 µs of CPU here against
~110 µs for the same C calls with preallocated arguments (``benchmarks/tick_cost.py`` has the warm figure).

Each reader calls the same C function with the same arguments as the wrapper it replaces, so probing
(which still goes through the wrappers) and polling read the same values; a test holds them equal on every
fake-library profile. Readers are built per device (they own their buffers) and only for the sampler
thread. A binding without nvidia-ml-py's function table (a test double) gets ``None`` here and keeps the
wrappers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

Out = dict[str, Any]
Reader = Callable[[Any, Out], None]

FI_DEV_POWER_INSTANT = 186
#: Where NVML_FI_DEV_POWER_INSTANT is asked for, in order of preference, as (name, scopeId).
POWER_SCOPES = (("gpu", 0), ("module", 1))
CLOCK_SM = 1
TEMPERATURE_GPU = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
#: ctypes union member per NVML value type (nvmlValueType_t).
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
#: Process slots allocated up front; grown (and kept) when NVML says more are running.
PROCESS_SLOTS = 32


class FieldValueError(Exception):
    """A per-entry failure inside nvmlDeviceGetFieldValues (the call itself succeeded)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.value = code


def field_value(entry: Any) -> float | int:
    """The number in one nvmlFieldValue_t, by its declared type; a failed entry raises."""
    if entry.nvmlReturn != 0:
        raise FieldValueError(int(entry.nvmlReturn))
    kind = entry.valueType
    if kind == 1:
        return int(entry.value.uiVal)
    if not 0 <= kind < len(VALUE_MEMBERS):
        raise ValueError(f"unknown NVML value type {kind}")
    value: float | int = getattr(entry.value, VALUE_MEMBERS[kind])
    return value


class DirectReaders:
    """Builds readers over one nvidia-ml-py module; ``available`` is False for a binding without the
    function table, and a reader whose symbol the library lacks is ``None`` (the wrapper then reports)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._lookup: Callable[[str], Any] | None = getattr(lib, "_nvmlGetFunctionPointer", None)
        self.available = self._lookup is not None and hasattr(lib, "c_nvmlFieldValue_t")

    def _fn(self, name: str) -> Any:
        assert self._lookup is not None
        try:
            return self._lookup(name)
        except self._lib.NVMLError:
            return None

    def reader(self, field: str, detail: str | None, *, with_memory_util: bool = False) -> Reader | None:
        """The reader for ``field`` read the way the probe chose (``detail``), or ``None``."""
        if not self.available:
            return None
        try:
            return self._build(field, detail, with_memory_util)
        except AttributeError:  # a binding without one of the structs we borrow: its wrapper still works
            return None

    def _build(self, field: str, detail: str | None, with_memory_util: bool) -> Reader | None:
        if field == "power":
            return self._uint("nvmlDeviceGetPowerUsage", "power_w", div=1000.0)
        if field == "power_instant":
            scopes = {f"scope={name}": scope for name, scope in POWER_SCOPES}
            return self._instant_power(scopes[detail]) if detail in scopes else None
        if field == "energy":
            name, c_u64 = "nvmlDeviceGetTotalEnergyConsumption", ctypes.c_uint64
            return self._uint(name, "energy_j", div=1000.0, ctype=c_u64)
        if field == "utilization":
            return self._utilization(with_memory_util)
        if field == "memory_info":
            return self._memory_info()
        if field == "power_limit":
            names = {"enforced": "Enforced", "management": "PowerManagement"}
            kind = names.get(detail or "")
            return self._uint(f"nvmlDeviceGet{kind}PowerLimit", "power_limit_w", div=1000.0) if kind else None
        if field == "temperature":
            return self._uint("nvmlDeviceGetTemperature", "temperature_c", selector=TEMPERATURE_GPU)
        if field == "sm_clock":
            return self._uint("nvmlDeviceGetClockInfo", "sm_clock_hz", mul=1e6, selector=CLOCK_SM)
        if field == "process_memory":
            return self._process_memory()
        return None

    # ---- one per call shape ----------------------------------------------------------------------
    def _uint(
        self,
        name: str,
        key: str,
        *,
        mul: float = 1.0,
        div: float = 1.0,
        selector: int | None = None,
        ctype: type[ctypes.c_uint] | type[ctypes.c_uint64] = ctypes.c_uint,
    ) -> Reader | None:
        """``fn(handle, [selector,] ctype *)``; the value as a float, ``* mul / div`` (the same operations
        as the wrapper-based reader, so the floats are identical; exact for counters below 2**53)."""
        fn = self._fn(name)
        if fn is None:
            return None
        error = self._lib.NVMLError
        value = ctype()
        ref = ctypes.byref(value)
        if selector is None:

            def read(h: Any, out: Out) -> None:
                ret = fn(h, ref)
                if ret:
                    raise error(ret)
                out[key] = value.value * mul / div

            return read
        arg = ctypes.c_uint(selector)

        def read_selected(h: Any, out: Out) -> None:
            ret = fn(h, arg, ref)
            if ret:
                raise error(ret)
            out[key] = value.value * mul / div

        return read_selected

    def _instant_power(self, scope: int) -> Reader | None:
        fn = self._fn("nvmlDeviceGetFieldValues")
        if fn is None:
            return None
        error = self._lib.NVMLError
        values = (self._lib.c_nvmlFieldValue_t * 1)()
        entry = values[0]
        entry.fieldId, entry.scopeId = FI_DEV_POWER_INSTANT, scope
        count, ref = ctypes.c_int32(1), ctypes.byref(values)

        def read(h: Any, out: Out) -> None:
            ret = fn(h, count, ref)
            if ret:
                raise error(ret)
            out["power_instant_w"] = field_value(entry) / 1000.0

        return read

    def _utilization(self, with_memory_util: bool) -> Reader | None:
        fn = self._fn("nvmlDeviceGetUtilizationRates")
        if fn is None:
            return None
        error = self._lib.NVMLError
        rates = self._lib.c_nvmlUtilization_t()
        ref = ctypes.byref(rates)

        def read(h: Any, out: Out) -> None:
            ret = fn(h, ref)
            if ret:
                raise error(ret)
            gpu, memory = rates.gpu, rates.memory
            if not (0 <= gpu <= 100 and 0 <= memory <= 100):
                raise ValueError(f"utilisation {gpu} % / {memory} % out of range")
            out["util_ratio"] = gpu / 100.0
            if with_memory_util:
                out["mem_util_ratio"] = memory / 100.0

        return read

    def _memory_info(self) -> Reader | None:
        fn = self._fn("nvmlDeviceGetMemoryInfo")
        if fn is None:
            return None
        error = self._lib.NVMLError
        memory = self._lib.c_nvmlMemory_t()
        ref = ctypes.byref(memory)

        def read(h: Any, out: Out) -> None:
            ret = fn(h, ref)
            if ret:
                raise error(ret)
            out["mem_used_bytes"] = int(memory.used)
            out["mem_total_bytes"] = int(memory.total)

        return read

    def _process_memory(self) -> Reader | None:
        fn = self._fn("nvmlDeviceGetComputeRunningProcesses_v3")
        if fn is None:
            return None
        lib = self._lib
        error = lib.NVMLError
        not_available = int(lib.NVML_VALUE_NOT_AVAILABLE_ulonglong.value)
        slots = [(lib.c_nvmlProcessInfo_v3_t * PROCESS_SLOTS)()]  # one cell: grown in place when short
        count = ctypes.c_uint()
        count_ref = ctypes.byref(count)

        def read(h: Any, out: Out) -> None:
            infos = slots[0]
            count.value = len(infos)
            ret = fn(h, count_ref, infos)
            if ret == NVML_ERROR_INSUFFICIENT_SIZE:  # more processes than slots: grow as the wrapper does
                infos = slots[0] = (lib.c_nvmlProcessInfo_v3_t * (count.value * 2 + 5))()
                count.value = len(infos)
                ret = fn(h, count_ref, infos)
            if ret:
                raise error(ret)
            used = [m for i in range(count.value) if (m := infos[i].usedGpuMemory) != not_available]
            out["process_mem_bytes"] = sum(used) if used or not count.value else None

        return read
