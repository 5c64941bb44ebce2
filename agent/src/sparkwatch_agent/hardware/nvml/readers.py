"""Reading each GPU field through nvidia-ml-py's wrappers: what the probe tries, in order of preference,
and what polling falls back to where a direct reader (``direct``) cannot serve a field.

A reader puts its values into an ``Out`` dict under GpuReading's names, or raises: an ``NVMLError``, a
``FieldValueError`` for a failed field-value entry, or ``ValueError`` for a value that cannot be true.
"""

from __future__ import annotations

from typing import Any

from sparkwatch_agent.hardware.nvml.direct import (
    CLOCK_EVENT_FUNCTIONS,
    CLOCK_SM,
    FI_DEV_POWER_INSTANT,
    POWER_SCOPES,
    TEMPERATURE_GPU,
    Out,
    Reader,
    field_value,
    process_total,
)

#: Per field, (detail recorded when it answers, reader), in order of preference.
Candidates = dict[str, list[tuple[str | None, Reader]]]


def candidate_readers(lib: Any) -> Candidates:
    """Every field's readers over ``lib`` (built once per probe and kept by the devices it opens)."""
    return {
        "power": [(None, _scaled(lib, "nvmlDeviceGetPowerUsage", "power_w"))],
        "power_instant": [(f"scope={name}", _instant(lib, scope)) for name, scope in POWER_SCOPES],
        "energy": [(None, _scaled(lib, "nvmlDeviceGetTotalEnergyConsumption", "energy_j"))],
        "utilization": [(None, _utilization(lib))],
        "memory_utilization": [(None, _memory_utilization(lib))],
        "memory_info": [(None, _memory_info(lib))],
        "power_limit": [
            ("enforced", _scaled(lib, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_w")),
            ("management", _scaled(lib, "nvmlDeviceGetPowerManagementLimit", "power_limit_w")),
        ],
        "temperature": [(None, _temperature(lib))],
        "sm_clock": [(None, _sm_clock(lib))],
        # the current name, then the one before it (deprecated in 13.0)
        "clock_events": [(detail, _bitmask(lib, name)) for detail, name in CLOCK_EVENT_FUNCTIONS.items()],
        "process_memory": [(None, _process_memory(lib))],
    }


def without_key(reader: Reader, key: str) -> Reader:
    """``reader`` minus one of its values (utilisation rates without memory utilisation, say)."""

    def read(h: Any, out: Out) -> None:
        reader(h, out)
        out.pop(key, None)

    return read


def _scaled(lib: Any, name: str, key: str) -> Reader:
    """An integer in NVML's milli-units (mW, mJ) as ours (W, J); the function is looked up per call."""

    def read(h: Any, out: Out) -> None:
        out[key] = getattr(lib, name)(h) / 1000.0

    return read


def _instant(lib: Any, scope: int) -> Reader:
    request = [(FI_DEV_POWER_INSTANT, scope)]

    def read(h: Any, out: Out) -> None:
        out["power_instant_w"] = field_value(lib.nvmlDeviceGetFieldValues(h, request)[0]) / 1000.0

    return read


def _percent_ratio(percent: int) -> float:
    if not 0 <= percent <= 100:
        raise ValueError(f"utilisation {percent} % out of range")
    return percent / 100.0


def _utilization(lib: Any) -> Reader:
    def read(h: Any, out: Out) -> None:
        rates = lib.nvmlDeviceGetUtilizationRates(h)
        gpu, memory = rates.gpu, rates.memory
        if not (0 <= gpu <= 100 and 0 <= memory <= 100):
            raise ValueError(f"utilisation {gpu} % / {memory} % out of range")
        out["util_ratio"] = gpu / 100.0
        out["mem_util_ratio"] = memory / 100.0

    return read


def _memory_utilization(lib: Any) -> Reader:
    def read(h: Any, out: Out) -> None:
        out["mem_util_ratio"] = _percent_ratio(lib.nvmlDeviceGetUtilizationRates(h).memory)

    return read


def _memory_info(lib: Any) -> Reader:
    def read(h: Any, out: Out) -> None:
        mem = lib.nvmlDeviceGetMemoryInfo(h)
        out["mem_used_bytes"] = int(mem.used)
        out["mem_total_bytes"] = int(mem.total)

    return read


def _temperature(lib: Any) -> Reader:
    def read(h: Any, out: Out) -> None:
        out["temperature_c"] = float(lib.nvmlDeviceGetTemperature(h, TEMPERATURE_GPU))

    return read


class MissingFunction(ValueError):
    """The binding lacks a function (an older or newer nvidia-ml-py): FUNCTION_NOT_FOUND, for good."""


def _sm_clock(lib: Any) -> Reader:
    def read(h: Any, out: Out) -> None:
        out["sm_clock_hz"] = float(lib.nvmlDeviceGetClockInfo(h, CLOCK_SM)) * 1e6

    return read


def _bitmask(lib: Any, name: str) -> Reader:
    """A 64-bit mask as an int; a binding without the function leaves the field unsupported."""

    def read(h: Any, out: Out) -> None:
        fn = getattr(lib, name, None)
        if fn is None:
            raise MissingFunction(f"this nvidia-ml-py has no {name}")
        out["clock_event_reasons"] = int(fn(h))

    return read


def _process_memory(lib: Any) -> Reader:
    def read(h: Any, out: Out) -> None:
        procs = lib.nvmlDeviceGetComputeRunningProcesses(h)
        out["process_mem_bytes"] = process_total([p.usedGpuMemory for p in procs])

    return read
