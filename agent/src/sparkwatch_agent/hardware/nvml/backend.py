"""NVML through nvidia-ml-py; the only module that imports ``pynvml``.

Every field is probed once at open: a field NVML refuses (NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION:
``PERMANENT_ERRORS``) is never polled again. A field that failed for now at the probe (TIMEOUT, UNKNOWN, a
value out of range, …) is polled all the same: one such answer at the start switched the gate's only source
on GB10 off for the agent's life. After the probe, a failing read is a gap for that sample (reported with
its reason); device-level codes (GPU lost, driver gone) raise ``DeviceError`` so the sampler can
re-initialise with backoff.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from sparkwatch_agent.hardware.gpu_backend import detect_memory_model, node_memory_model
from sparkwatch_agent.hardware.nvml.codes import DEVICE_LEVEL_ERRORS, TRANSIENT_ERRORS, error_name
from sparkwatch_agent.hardware.nvml.direct import (
    CLOCK_SM,
    VALUE_SLOTS,
    DirectCapture,
    DirectDevice,
    DirectReaders,
    FieldValueError,
    Out,
    Reader,
)
from sparkwatch_agent.hardware.nvml.readers import Candidates, MissingFunction, candidate_readers, without_key
from sparkwatch_agent.hardware.readings import (
    GPU_FIELDS,
    KEY_FIELDS,
    KEY_PROBE_PAUSE_S,
    KEY_PROBE_TRIES,
    PLAUSIBLE_MAX,
    READ_ORDER,
    DeviceError,
    FieldStatus,
    GpuFacts,
    GpuInventory,
    GpuReading,
    MemoryModel,
)

log = logging.getLogger(__name__)


def nvml_reason(exc: BaseException) -> str:
    """NVML error name (e.g. ``NOT_SUPPORTED``) for an NVMLError, or the exception type for anything else."""
    code = getattr(exc, "value", None)
    return error_name(code) if isinstance(code, int) else type(exc).__name__


def _probe_reason(exc: BaseException) -> str:
    """A failed probe read's reason: a binding without the function is FUNCTION_NOT_FOUND (for good), a value
    no GPU can have OUT_OF_RANGE (for now), else NVML's."""
    if isinstance(exc, MissingFunction):
        return "FUNCTION_NOT_FOUND"
    return "OUT_OF_RANGE" if isinstance(exc, ValueError) else nvml_reason(exc)


@dataclass(frozen=True, slots=True)
class _Device:
    index: int
    handle: Any
    uuid: str
    direct: DirectDevice | None  # the polled fields it covers are read through it
    pairs: tuple[tuple[str, Reader], ...]  # the other polled fields, through their wrappers


#: Per GPU: its device, what its direct calls left (or ``None``), and its wrapper-read values and errors.
GpuCapture = tuple[tuple[_Device, DirectCapture | None, tuple[Out, list[tuple[str, str]]] | None], ...]


class NvmlBackend:
    """GPU backend over an nvidia-ml-py-shaped module (the real ``pynvml`` unless a test injects one)."""

    def __init__(
        self, lib: Any = pynvml, name: str = "nvml", simulated: bool = False, *, direct: bool = True
    ) -> None:
        """``direct=False`` polls through the wrappers only (tests compare the two paths)."""
        self.name = name
        self._direct = direct
        self._simulated = simulated
        self._lib = lib
        self._devices: tuple[_Device, ...] = ()
        self._open = False

    # ---- lifecycle -------------------------------------------------------------------------------
    def open(self, host_mem_total_bytes: int | None) -> tuple[GpuInventory, MemoryModel]:
        lib = self._lib
        try:
            lib.nvmlInit()
        except Exception as exc:
            raise DeviceError(nvml_reason(exc), "nvmlInit failed") from exc
        self._open = True
        try:
            return self._probe(host_mem_total_bytes)
        except DeviceError:
            self.close()
            raise
        except Exception as exc:  # NVMLError outside a field, or a binding that misbehaves: retry later
            self.close()
            raise DeviceError(nvml_reason(exc), f"probe failed: {exc}") from exc

    def close(self) -> None:
        self._devices = ()
        if self._open:
            self._open = False
            try:
                self._lib.nvmlShutdown()
            except Exception as exc:  # shutting down a lost device may fail; nothing to do about it
                log.debug("nvmlShutdown failed: %s", nvml_reason(exc))

    # ---- probe -----------------------------------------------------------------------------------
    def _probe(self, host_mem_total_bytes: int | None) -> tuple[GpuInventory, MemoryModel]:
        lib = self._lib
        readers = candidate_readers(lib)
        driver = self._optional(lib.nvmlSystemGetDriverVersion)
        cuda = self._optional(getattr(lib, "nvmlSystemGetCudaDriverVersion_v2", None))
        if cuda is None:
            cuda = self._optional(lib.nvmlSystemGetCudaDriverVersion)
        probed = [
            self._probe_gpu(index, readers, host_mem_total_bytes)
            for index in range(int(lib.nvmlDeviceGetCount()))
        ]
        self._devices = tuple(device for _facts, device, _model in probed)
        inventory = GpuInventory(
            backend=self.name,
            driver_version=str(driver) if driver is not None else None,
            cuda_driver_version=_cuda_version_text(cuda),
            gpus=tuple(facts for facts, _device, _model in probed),
            simulated=self._simulated,
        )
        return inventory, node_memory_model([model for _facts, _device, model in probed])

    def _probe_gpu(
        self, index: int, readers: Candidates, host_mem_total_bytes: int | None
    ) -> tuple[GpuFacts, _Device, MemoryModel]:
        """One GPU's facts, polling device and memory model (its own: GPUs of one node may differ)."""
        lib = self._lib
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        name = str(self._optional(lib.nvmlDeviceGetName, handle) or "unknown")
        uuid = str(self._optional(lib.nvmlDeviceGetUUID, handle) or f"index-{index}")
        caps, first, for_now = self._probe_fields(handle, readers)
        refused = [f"{f} ({caps[f].reason})" for f in KEY_FIELDS if caps[f].state == "unsupported"]
        if refused:  # power read as not supported once was off for good, and nothing said so
            log.warning(
                "GPU %d (%s): %s cannot be read (NVML asked up to %d times at the probe): not read until"
                " the agent starts again",
                *(index, uuid, ", ".join(refused), KEY_PROBE_TRIES),
            )
        gpu_total = first.get("mem_total_bytes")
        # memory info that failed for now is no sign of unified memory (NOT_SUPPORTED is): discrete
        memory_reason = caps["memory_info"].reason or for_now.get("memory_info")
        model = detect_memory_model(memory_reason, gpu_total, host_mem_total_bytes)
        if model == "unified":
            caps = self._distrust_on_unified(caps)
        facts = GpuFacts(
            index=index,
            name=name,
            uuid=uuid,
            memory_total_bytes=gpu_total if caps["memory_info"].polled else None,
            pcie_link_gen=self._optional(getattr(lib, "nvmlDeviceGetCurrPcieLinkGeneration", None), handle),
            pcie_link_width=self._optional(getattr(lib, "nvmlDeviceGetCurrPcieLinkWidth", None), handle),
            pcie_link_trusted=model != "unified",
            capabilities=caps,
            max_sm_clock_hz=self._max_sm_clock_hz(handle),
            clock_events_supported=self._supported_clock_events(handle),
        )
        return facts, self._device(index, handle, uuid, caps, readers), model

    def _supported_clock_events(self, handle: Any) -> int | None:
        for name in (
            "nvmlDeviceGetSupportedClocksEventReasons",
            "nvmlDeviceGetSupportedClocksThrottleReasons",
        ):
            mask = self._optional(getattr(self._lib, name, None), handle)
            if isinstance(mask, int):
                return mask
        return None

    def _max_sm_clock_hz(self, handle: Any) -> float | None:
        mhz = self._optional(getattr(self._lib, "nvmlDeviceGetMaxClockInfo", None), handle, CLOCK_SM)
        return float(mhz) * 1e6 if isinstance(mhz, int) and mhz > 0 else None

    def _optional(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """Call for a static fact; ``None`` when NVML does not answer (device-level codes still raise)."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except self._lib.NVMLError as exc:
            reason = nvml_reason(exc)
            if reason in DEVICE_LEVEL_ERRORS:
                raise DeviceError(reason, "probe failed") from exc
            return None

    def _probe_fields(
        self, handle: Any, readers: Candidates
    ) -> tuple[dict[str, FieldStatus], Out, dict[str, str]]:
        """Each field's first candidate reader that answers; else the first that failed only for now
        (polled, its failures gaps; its reason in the third part); else unsupported, with the last
        refusal."""
        caps: dict[str, FieldStatus] = {}
        first: Out = {}
        failed_for_now: dict[str, str] = {}
        for field in GPU_FIELDS:
            status = FieldStatus("unsupported", "NOT_PROBED")
            for_now: tuple[str | None, str] | None = None  # (detail, reason) of the first transient failure
            tries = KEY_PROBE_TRIES if field in KEY_FIELDS else 1
            for detail, reader in readers[field]:
                out: Out = {}
                exc = self._probe_read(reader, handle, out, tries)
                if exc is not None:
                    reason = _probe_reason(exc)
                    if reason in DEVICE_LEVEL_ERRORS:
                        raise DeviceError(reason, f"probing {field}") from exc
                    if reason in TRANSIENT_ERRORS and for_now is None:
                        for_now = (detail, reason)
                    status = FieldStatus("unsupported", reason, status.detail)
                    continue
                status = FieldStatus("supported", None, detail)
                first.update(out)
                break
            if status.state == "unsupported" and for_now is not None:
                log.warning("GPU field %s failed at the probe (%s): polled all the same", field, for_now[1])
                status = FieldStatus("supported", None, for_now[0])
                failed_for_now[field] = for_now[1]
            caps[field] = status
        return caps, first, failed_for_now

    def _probe_read(self, reader: Reader, handle: Any, out: Out, tries: int) -> BaseException | None:
        """None once ``reader`` answered in ``tries`` asks, else its last failure: a refusal that would hold
        for the agent's life is asked again; a failure for now or of the device is not."""
        failure: BaseException | None = None
        for n in range(tries):
            if n:  # apart: a refusal now and then is not one for good
                time.sleep(KEY_PROBE_PAUSE_S)
            try:
                reader(handle, out)
                return None
            except (self._lib.NVMLError, FieldValueError, ValueError) as exc:
                failure = exc
                if (reason := _probe_reason(exc)) in TRANSIENT_ERRORS or reason in DEVICE_LEVEL_ERRORS:
                    break
        return failure

    @staticmethod
    def _distrust_on_unified(caps: dict[str, FieldStatus]) -> dict[str, FieldStatus]:
        caps = dict(caps)
        if caps["memory_utilization"].polled:
            caps["memory_utilization"] = FieldStatus(
                "untrusted", "BOGUS_ON_UNIFIED_MEMORY", "memory utilisation reads 0 on unified memory"
            )
        if caps["memory_info"].polled:
            caps["memory_info"] = FieldStatus(
                "untrusted",
                "BOGUS_ON_UNIFIED_MEMORY",
                "on unified memory use host memory (MemTotal - MemAvailable)",
            )
        return caps

    def _device(
        self, index: int, handle: Any, uuid: str, caps: dict[str, FieldStatus], readers: Candidates
    ) -> _Device:
        """The device's readers: direct for what nvml_direct covers, else the probe's wrapper reader.
        Utilisation rates are read once for both ratios."""
        with_memory_util = caps["memory_utilization"].polled
        polled = {  # in READ_ORDER, which the direct calls follow too
            field: caps[field].detail
            for field in READ_ORDER
            if caps[field].polled and not (field == "memory_utilization" and caps["utilization"].polled)
        }
        direct = (
            DirectReaders(self._lib).device(handle, polled, with_memory_util=with_memory_util)
            if self._direct
            else None
        )
        covered = direct.fields if direct is not None else ()
        pairs: list[tuple[str, Reader]] = []
        for field in READ_ORDER:
            if field not in polled or field in covered:
                continue
            for detail, reader in readers[field]:
                if detail == caps[field].detail:
                    drop = field == "utilization" and not with_memory_util
                    pairs.append((field, without_key(reader, "mem_util_ratio") if drop else reader))
                    break
        return _Device(index, handle, uuid, direct, tuple(pairs))

    @property
    def wrapped_fields(self) -> dict[int, tuple[str, ...]]:
        """Per GPU index, the polled fields read through nvidia-ml-py's wrappers rather than directly."""
        return {dev.index: tuple(field for field, _ in dev.pairs) for dev in self._devices}

    @property
    def read_order(self) -> dict[int, tuple[str, ...]]:
        """Per GPU index, the polled fields in the order a capture reads them (direct, then wrapped)."""
        return {
            dev.index: (dev.direct.fields if dev.direct is not None else ()) + tuple(f for f, _ in dev.pairs)
            for dev in self._devices
        }

    # ---- sampling --------------------------------------------------------------------------------
    def capture(self) -> GpuCapture:
        """Every polled call on every GPU, undecoded; a device-level code raises ``DeviceError`` now, so
        the sampler re-initialises at once, while field gaps wait for ``decode``."""
        if not self._open:
            raise DeviceError("UNINITIALIZED", "backend is not open")
        captured = []
        for dev in self._devices:
            direct, raw = dev.direct, None
            if direct is not None:
                raw = direct.capture()
                if not direct.clean(raw):
                    self._raise_device_level(dev, direct.decode(raw)[1])
            wrapped = self._read_wrapped(dev) if dev.pairs else None
            captured.append((dev, raw, wrapped))
        return tuple(captured)

    def _read_wrapped(self, dev: _Device) -> tuple[Out, list[tuple[str, str]]]:
        """The fields read through nvidia-ml-py's wrappers, decoded as they are read."""
        nvml_error = self._lib.NVMLError
        out: Out = {}
        errors: list[tuple[str, str]] = []
        for field, reader in dev.pairs:
            try:
                reader(dev.handle, out)
            except (nvml_error, FieldValueError, ValueError) as exc:
                reason = nvml_reason(exc) if not isinstance(exc, ValueError) else "OUT_OF_RANGE"
                errors.append((field, reason))
                self._raise_device_level(dev, errors[-1:])  # the device is gone: skip the other calls
        return out, errors

    @staticmethod
    def _raise_device_level(dev: _Device, errors: list[tuple[str, str]]) -> None:
        for field, reason in errors:
            if reason in DEVICE_LEVEL_ERRORS:
                raise DeviceError(reason, f"reading {field} on GPU {dev.index}")

    @staticmethod
    def decode(captured: GpuCapture) -> tuple[GpuReading, ...]:
        """The readings of one capture (any thread, any time later: it holds the devices it used)."""
        readings = []
        for dev, raw, wrapped in captured:
            if raw is not None and dev.direct is not None:
                values, errors = dev.direct.decode(raw)
            else:
                values, errors = [None] * len(VALUE_SLOTS), []
            if wrapped is not None:
                out, more = wrapped
                for key, value in out.items():
                    values[VALUE_SLOTS[key]] = value
                errors.extend(more)
            _bounded(values, errors)
            if len(errors) > 1:
                errors.sort(key=lambda e: GPU_FIELDS.index(e[0]))
            readings.append(GpuReading._make((dev.index, dev.uuid, *values, tuple(errors))))
        return tuple(readings)

    def read(self) -> tuple[GpuReading, ...]:
        """Capture and decode at once (probe, tests)."""
        return self.decode(self.capture())


#: ``PLAUSIBLE_MAX`` by value slot, looked up once: :func:`_bounded` runs for every GPU on every tick.
_BOUNDS = tuple((VALUE_SLOTS[key], field, most) for key, (field, most) in PLAUSIBLE_MAX.items())


def _bounded(values: list[Any], errors: list[tuple[str, str]]) -> None:
    """``values`` (in ``VALUE_SLOTS`` order) with each past its ``PLAUSIBLE_MAX`` made None, its field's
    OUT_OF_RANGE added once: whichever way it was read (ctypes or nvidia-ml-py's wrappers)."""
    for slot, field, most in _BOUNDS:
        value = values[slot]
        if value is not None and not 0 <= value <= most:
            values[slot] = None
            if (field, "OUT_OF_RANGE") not in errors:
                errors.append((field, "OUT_OF_RANGE"))


def _cuda_version_text(raw: Any) -> str | None:
    """NVML encodes the CUDA driver version as 1000*major + 10*minor (13000 → "13.0")."""
    if raw is None:
        return None
    value = int(raw)
    return f"{value // 1000}.{(value % 1000) // 10}"
