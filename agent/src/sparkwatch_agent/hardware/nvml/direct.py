"""Polling that calls the NVML entry points nvidia-ml-py resolved, into one buffer per device.

nvidia-ml-py's wrappers allocate a result struct, look the function up under a lock and check the return
code on every call; for processes they call NVML twice and build a Python object per process; their
structs read every member through a Python ``__getattribute__``. Here each device gets one buffer with a
place for every polled result and each C call's arguments are built once. A tick only makes the calls
and copies the buffer (``capture``); one precompiled ``struct`` unpack decodes it later (``decode``),
in a batch with other ticks' captures. After each sleep the caches are cold, and what a tick costs then
follows how much distinct code it runs, so code that can wait runs where it is warm.

Each call is the one the wrapper makes, with the same arguments and the same arithmetic on the result,
so probing (which still goes through the wrappers) and polling read the same values; a test holds them
equal on every fake-library profile. Layouts come from nvidia-ml-py's own ctypes structs. A binding
without the function table (a test double) gets no direct device; one without a struct, or without a
symbol, keeps that field's wrapper.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Mapping
from typing import Any

from sparkwatch_agent.hardware.nvml.buffer_layout import UNSIGNED, BufferLayout
from sparkwatch_agent.hardware.nvml.codes import NVML_ERROR_INSUFFICIENT_SIZE, error_name
from sparkwatch_agent.hardware.readings import GpuReading

Out = dict[str, Any]
Reader = Callable[[Any, Out], None]

FI_DEV_POWER_INSTANT = 186
#: Where NVML_FI_DEV_POWER_INSTANT is asked for, in order of preference, as (name, scopeId).
POWER_SCOPES = (("gpu", 0), ("module", 1))
CLOCK_SM = 1
#: The clock-event reasons reader by the probe's detail: the current name, and the one before it.
CLOCK_EVENT_FUNCTIONS = {
    "events": "nvmlDeviceGetCurrentClocksEventReasons",
    "throttle": "nvmlDeviceGetCurrentClocksThrottleReasons",
}
TEMPERATURE_GPU = 0
#: ctypes union member per NVML value type (nvmlValueType_t).
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
VALUE_TYPE_UINT = 1
#: Process slots allocated up front; grown (and kept) when NVML says more are running.
PROCESS_SLOTS = 32
#: Bytes of the per-device result buffer (a GB10 needs ~90, a discrete GPU ~120).
BUFFER_BYTES = 256

#: Index of each GpuReading value (power_w … process_mem_bytes) in the list a read returns.
VALUE_SLOTS: dict[str, int] = {key: i for i, key in enumerate(GpuReading._fields[2:-1])}

#: What one device's calls leave behind: their return codes, the result buffer, the process entries.
DirectCapture = tuple[list[int], bytes, bytes]


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
    if kind == VALUE_TYPE_UINT:
        return int(entry.value.uiVal)
    if not 0 <= kind < len(VALUE_MEMBERS):
        raise ValueError(f"unknown NVML value type {kind}")
    value: float | int = getattr(entry.value, VALUE_MEMBERS[kind])
    return value


class DirectDevice:
    """One device's polled fields: ``read`` makes every C call, then decodes the buffer once.

    ``fields`` lists what it covers; the backend reads any other polled field through its wrapper.
    """

    def __init__(self, lib: Any, lookup: Callable[[str], Any], handle: Any) -> None:
        self._lib = lib
        self._lookup = lookup
        self._handle = handle
        self._buf = (ctypes.c_char * BUFFER_BYTES)()
        self._layout = BufferLayout(BUFFER_BYTES)
        self._calls: list[tuple[Any, tuple[Any, ...]]] = []
        self._unpack: Callable[[Any], tuple[int, ...]] = struct.Struct("=").unpack_from
        self.fields: tuple[str, ...] = ()
        # (field, call, slot, raw, mul, div): value = raw * mul / div
        self._scalars: list[tuple[str, int, int, int, float, float]] = []
        self._integers: list[tuple[str, int, int, int]] = []  # (field, call, slot, raw): value = raw
        self._utilization: tuple[int, int, int, bool] | None = None  # call, raw gpu, raw memory, +memory
        self._memory: tuple[int, int, int] | None = None  # call, raw total, raw used
        # call, raw type, raw entry return, raw uint, (ctype, offset) per value type
        self._instant: tuple[int, int, int, int, tuple[tuple[Any, int], ...]] | None = None
        self._entry_ret: tuple[slice, bytes] | None = None  # the entry's return code: where, and success
        self._process: int | None = None  # call
        self._process_count = ctypes.c_uint()
        self._process_buf: Any = None
        self._process_slots = 0
        self._process_size = 0
        self._process_used: struct.Struct | None = None
        self._not_available = 0

    # ---- building --------------------------------------------------------------------------------
    def build(self, polled: Mapping[str, str | None], with_memory_util: bool) -> None:
        """Cover each polled field (name → the probe's detail) that this binding can read directly."""
        covered = []
        for field, detail in polled.items():
            mark = self._layout.mark()
            try:
                ok = self._add(field, detail, with_memory_util)
            except (AttributeError, ValueError):  # a binding without a struct we borrow, or odd layout
                ok = False
            if ok:
                covered.append(field)
            else:
                self._layout.reset(mark)
        self.fields = tuple(covered)
        self._unpack = self._layout.compile().unpack_from

    def _fn(self, name: str) -> Any:
        try:
            return self._lookup(name)
        except self._lib.NVMLError:
            return None

    def _call(self, fn: Any, args: tuple[Any, ...]) -> int:
        self._calls.append((fn, args))
        return len(self._calls) - 1

    def _at(self, offset: int) -> Any:
        return ctypes.byref(self._buf, offset)

    def _add(self, field: str, detail: str | None, with_memory_util: bool) -> bool:
        u32, u64 = ctypes.c_uint, ctypes.c_uint64
        if field == "power":
            return self._scalar(field, "nvmlDeviceGetPowerUsage", "power_w", u32, div=1000.0)
        if field == "energy":
            return self._scalar(field, "nvmlDeviceGetTotalEnergyConsumption", "energy_j", u64, div=1000.0)
        if field == "power_limit":
            kind = {"enforced": "Enforced", "management": "PowerManagement"}.get(detail or "")
            name = f"nvmlDeviceGet{kind}PowerLimit"
            return kind is not None and self._scalar(field, name, "power_limit_w", u32, div=1000.0)
        if field == "temperature":
            name, key = "nvmlDeviceGetTemperature", "temperature_c"
            return self._scalar(field, name, key, u32, selector=TEMPERATURE_GPU)
        if field == "sm_clock":
            name, key = "nvmlDeviceGetClockInfo", "sm_clock_hz"
            return self._scalar(field, name, key, u32, mul=1e6, selector=CLOCK_SM)
        if field == "clock_events":
            fn_name = CLOCK_EVENT_FUNCTIONS.get(detail or "")
            return fn_name is not None and self._scalar(
                field, fn_name, "clock_event_reasons", u64, integer=True
            )
        if field == "power_instant":
            scopes = {f"scope={name}": scope for name, scope in POWER_SCOPES}
            return detail in scopes and self._add_instant(scopes[detail or ""])
        if field == "utilization":
            return self._add_utilization(with_memory_util)
        if field == "memory_info":
            return self._add_memory_info()
        if field == "process_memory":
            return self._add_process_memory()
        return False

    def _scalar(
        self,
        field: str,
        name: str,
        key: str,
        ctype: type[ctypes.c_uint] | type[ctypes.c_uint64],
        *,
        mul: float = 1.0,
        div: float = 1.0,
        selector: int | None = None,
        integer: bool = False,
    ) -> bool:
        """``fn(handle, [selector,] ctype *)``, its value as ``raw * mul / div`` (the wrapper-based
        reader's operations, so the floats are identical; exact for counters below 2**53), or the raw
        integer itself (a bitmask)."""
        fn = self._fn(name)
        if fn is None:
            return False
        size = ctypes.sizeof(ctype)
        offset = self._layout.place(size)
        raw = self._layout.decode(offset, size)
        out = self._at(offset)
        args = (self._handle, out) if selector is None else (self._handle, ctypes.c_uint(selector), out)
        call = self._call(fn, args)
        if integer:
            self._integers.append((field, call, VALUE_SLOTS[key], raw))
        else:
            self._scalars.append((field, call, VALUE_SLOTS[key], raw, mul, div))
        return True

    def _add_utilization(self, with_memory_util: bool) -> bool:
        fn = self._fn("nvmlDeviceGetUtilizationRates")
        if fn is None:
            return False
        rates = self._lib.c_nvmlUtilization_t
        offset = self._layout.place(ctypes.sizeof(rates), ctypes.alignment(rates))
        gpu = self._layout.decode(offset + rates.gpu.offset, rates.gpu.size)
        memory = self._layout.decode(offset + rates.memory.offset, rates.memory.size)
        self._utilization = (self._call(fn, (self._handle, self._at(offset))), gpu, memory, with_memory_util)
        return True

    def _add_memory_info(self) -> bool:
        fn = self._fn("nvmlDeviceGetMemoryInfo")
        if fn is None:
            return False
        memory = self._lib.c_nvmlMemory_t
        offset = self._layout.place(ctypes.sizeof(memory), ctypes.alignment(memory))
        total = self._layout.decode(offset + memory.total.offset, memory.total.size)
        used = self._layout.decode(offset + memory.used.offset, memory.used.size)
        self._memory = (self._call(fn, (self._handle, self._at(offset))), total, used)
        return True

    def _add_instant(self, scope: int) -> bool:
        fn = self._fn("nvmlDeviceGetFieldValues")
        if fn is None:
            return False
        entry, value = self._lib.c_nvmlFieldValue_t, self._lib.c_nvmlValue_t
        offset = self._layout.place(ctypes.sizeof(entry), ctypes.alignment(entry))
        request = entry.from_buffer(self._buf, offset)
        request.fieldId, request.scopeId = FI_DEV_POWER_INSTANT, scope
        kind = self._layout.decode(offset + entry.valueType.offset, entry.valueType.size)
        ret = self._layout.decode(offset + entry.nvmlReturn.offset, entry.nvmlReturn.size)
        # every member of the value union starts at its first byte, so this is uiVal on any byte order
        uint = self._layout.decode(offset + entry.value.offset, ctypes.sizeof(ctypes.c_uint))
        members = dict(value._fields_)
        at = offset + entry.value.offset
        if not set(VALUE_MEMBERS) <= members.keys():  # a binding whose union lacks one: the wrapper reads it
            return False
        call = self._call(fn, (self._handle, ctypes.c_int32(1), self._at(offset)))
        self._instant = (call, kind, ret, uint, tuple((members[m], at) for m in VALUE_MEMBERS))
        ret_at = offset + entry.nvmlReturn.offset
        self._entry_ret = slice(ret_at, ret_at + entry.nvmlReturn.size), bytes(entry.nvmlReturn.size)
        return True

    def _add_process_memory(self) -> bool:
        fn = self._fn("nvmlDeviceGetComputeRunningProcesses_v3")
        if fn is None:
            return False
        info = self._lib.c_nvmlProcessInfo_v3_t
        used = info.usedGpuMemory
        self._process_size = size = ctypes.sizeof(info)
        tail = size - used.offset - used.size
        self._process_used = struct.Struct(f"={used.offset}x{UNSIGNED[used.size]}{tail}x")
        self._not_available = int(self._lib.NVML_VALUE_NOT_AVAILABLE_ulonglong.value)
        self._process = self._call(fn, ())
        self._grow_processes(PROCESS_SLOTS)
        return True

    def _grow_processes(self, slots: int) -> None:
        assert self._process is not None
        self._process_slots = slots
        self._process_buf = (ctypes.c_char * (slots * self._process_size))()
        fn = self._calls[self._process][0]
        self._calls[self._process] = (
            fn,
            (self._handle, ctypes.byref(self._process_count), self._process_buf),
        )

    # ---- reading ---------------------------------------------------------------------------------
    def capture(self) -> DirectCapture:
        """Make every C call: the return codes, a copy of the result buffer and the process entries'
        bytes. Nothing is decoded here (``decode`` does that, later and in batches, where the code is
        warm); only the process list's sizing protocol is followed, as the wrapper does."""
        if self._process is not None:
            self._process_count.value = self._process_slots
        rets = [fn(*args) for fn, args in self._calls]
        processes = b""
        if self._process is not None:
            call = self._process
            if rets[call] == NVML_ERROR_INSUFFICIENT_SIZE:  # more processes than slots: grow and retry
                self._grow_processes(self._process_count.value * 2 + 5)
                self._process_count.value = self._process_slots
                fn, args = self._calls[call]
                rets[call] = fn(*args)
            if not rets[call]:
                processes = self._process_buf[: self._process_count.value * self._process_size]
        return rets, self._buf.raw, processes

    def clean(self, capture: DirectCapture) -> bool:
        """Whether every call and the field-value entry succeeded (the common case, checked per tick)."""
        rets, raw, _ = capture
        entry = self._entry_ret
        return not any(rets) and (entry is None or raw[entry[0]] == entry[1])

    def decode(self, capture: DirectCapture) -> tuple[list[Any], list[tuple[str, str]]]:
        """GpuReading values in ``VALUE_SLOTS`` order (``None`` where not read) and (field, reason) errors."""
        rets, buf, processes = capture
        raw = self._unpack(buf)
        values: list[Any] = [None] * len(VALUE_SLOTS)
        errors: list[tuple[str, str]] = []
        for field, call, slot, at, mul, div in self._scalars:
            if rets[call]:
                errors.append((field, error_name(rets[call])))
            else:
                values[slot] = raw[at] * mul / div
        for field, call, slot, at in self._integers:
            if rets[call]:
                errors.append((field, error_name(rets[call])))
            else:
                values[slot] = raw[at]
        if self._utilization is not None:
            call, gpu_at, memory_at, with_memory = self._utilization
            gpu, memory = raw[gpu_at], raw[memory_at]
            if rets[call]:
                errors.append(("utilization", error_name(rets[call])))
            elif gpu > 100 or memory > 100:
                errors.append(("utilization", "OUT_OF_RANGE"))
            else:
                values[_UTIL] = gpu / 100.0
                if with_memory:
                    values[_MEM_UTIL] = memory / 100.0
        if self._memory is not None:
            call, total_at, used_at = self._memory
            if rets[call]:
                errors.append(("memory_info", error_name(rets[call])))
            else:
                values[_MEM_USED], values[_MEM_TOTAL] = raw[used_at], raw[total_at]
        if self._instant is not None:
            self._decode_instant(rets, raw, buf, values, errors)
        if self._process is not None:
            if rets[self._process]:
                errors.append(("process_memory", error_name(rets[self._process])))
            else:
                values[_PROCESS] = self._process_sum(processes)
        return values, errors

    def _decode_instant(
        self,
        rets: list[int],
        raw: tuple[int, ...],
        buf: bytes,
        values: list[Any],
        errors: list[tuple[str, str]],
    ) -> None:
        assert self._instant is not None
        call, kind_at, ret_at, uint_at, members = self._instant
        ret = rets[call] or raw[ret_at]  # the call, then the entry
        kind = raw[kind_at]
        if ret:
            errors.append(("power_instant", error_name(ret)))
        elif kind == VALUE_TYPE_UINT:
            values[_INSTANT] = raw[uint_at] / 1000.0
        elif kind < len(members):
            ctype, offset = members[kind]
            values[_INSTANT] = ctype.from_buffer_copy(buf, offset).value / 1000.0
        else:
            errors.append(("power_instant", "OUT_OF_RANGE"))

    def _process_sum(self, processes: bytes) -> int | None:
        """:func:`process_total` of the entries' ``usedGpuMemory``."""
        assert self._process_used is not None
        na = self._not_available
        return process_total([None if m == na else m for (m,) in self._process_used.iter_unpack(processes)])


def process_total(used: list[int | None]) -> int | None:
    """The compute processes' GPU memory summed; 0 with no process, ``None`` where NVML does not know one
    process's (``NVML_VALUE_NOT_AVAILABLE``: unified memory, or a process in another container): the sum of
    the others would be a total too low, shown as the whole."""
    known = [m for m in used if m is not None]
    return sum(known) if len(known) == len(used) else None


_UTIL, _MEM_UTIL = VALUE_SLOTS["util_ratio"], VALUE_SLOTS["mem_util_ratio"]
_MEM_USED, _MEM_TOTAL = VALUE_SLOTS["mem_used_bytes"], VALUE_SLOTS["mem_total_bytes"]
_INSTANT, _PROCESS = VALUE_SLOTS["power_instant_w"], VALUE_SLOTS["process_mem_bytes"]


class DirectReaders:
    """Builds direct devices over one nvidia-ml-py module (none for a binding without the function
    table, such as a test double)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._lookup: Callable[[str], Any] | None = getattr(lib, "_nvmlGetFunctionPointer", None)

    def device(
        self, handle: Any, polled: Mapping[str, str | None], *, with_memory_util: bool
    ) -> DirectDevice | None:
        """A direct device for the polled fields it can read (``None`` when it can read none)."""
        if self._lookup is None:
            return None
        device = DirectDevice(self._lib, self._lookup, handle)
        device.build(polled, with_memory_util)
        return device if device.fields else None
