"""The sampling loop: absolute deadlines on the monotonic clock, run in its own thread.

Each tick reads GPUs, host memory and sensors, stamps the sample, encodes it once, appends it to the ring
and publishes an immutable snapshot. HTTP handlers only ever read the snapshot and the ring, so a scrape
never touches hardware and a slow NVML call never blocks the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from sparkwatch_agent.backoff import ExponentialBackoff
from sparkwatch_agent.gpu_backend import GpuBackend
from sparkwatch_agent.interval_lease import IntervalLeases
from sparkwatch_agent.readings import (
    DeviceError,
    GpuInventory,
    GpuReading,
    HostMemory,
    MemoryModel,
    SensorReading,
)
from sparkwatch_agent.ring import SampleRing
from sparkwatch_agent.sample import Sample, encode_sample

log = logging.getLogger(__name__)

MAX_WAIT_S = 1.0


class MemoryReader(Protocol):
    def read(self) -> HostMemory: ...

    def close(self) -> None: ...


class SensorReader(Protocol):
    @property
    def names(self) -> tuple[str, ...]: ...

    def read(self) -> tuple[SensorReading, ...]: ...


@dataclass(frozen=True, slots=True)
class Clocks:
    """Injected time sources (the loop's waits are on an event, so stop and lease changes wake it)."""

    wall_ns: Callable[[], int] = time.time_ns
    mono_ns: Callable[[], int] = time.monotonic_ns


class Counters(NamedTuple):
    samples_total: int
    read_errors: dict[tuple[str, str], int]  # a copy; never mutated once in a snapshot
    late_ticks_total: int
    gpu_reinit_total: int


class Snapshot(NamedTuple):
    """Everything /metrics, /healthz and the stream need, replaced whole after every tick (a NamedTuple:
    built on every tick, cheaper than a frozen dataclass)."""

    node: str
    boot_id: str
    backend: str
    sample: Sample | None
    inventory: GpuInventory | None
    memory_model: MemoryModel
    gpu_ok: bool
    gpu_reason: str | None
    inventory_rev: int
    inventory_seq: int  # seq of the first sample taken with this inventory
    counters: Counters
    dropped_total: int
    interval_s: float
    host_memory_ok: bool


class Sampler:
    """Owns the hardware readers and the GPU session state (open, failed, retry time)."""

    def __init__(
        self,
        *,
        node: str,
        boot_id: str,
        gpu: GpuBackend | None,
        memory: MemoryReader,
        sensors: SensorReader | None,
        leases: IntervalLeases,
        ring: SampleRing,
        clocks: Clocks | None = None,
        backoff: ExponentialBackoff | None = None,
        on_sample: Callable[[Sample], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.node = node
        self.boot_id = boot_id
        self.leases = leases
        self.ring = ring
        self._gpu = gpu
        self._memory = memory
        self._sensors = sensors
        self._clocks = clocks or Clocks()
        self._backoff = backoff or ExponentialBackoff()
        self._on_sample = on_sample
        self._on_tick = on_tick
        self._gpu_open = False
        self._gpu_retry_ns = 0
        self._gpu_reason: str | None = "not opened yet" if gpu is not None else "no GPU backend"
        self._inventory: GpuInventory | None = None
        self._memory_model: MemoryModel = "unknown" if gpu is not None else "none"
        self._inventory_rev = 0
        self._inventory_seq = 1
        self._seq = 0
        self._samples_total = 0
        self._read_errors: dict[tuple[str, str], int] = {}
        self._errors_copy: dict[tuple[str, str], int] | None = None
        self._late_ticks = 0
        self._open_attempts = 0
        self._host_memory_ok = True
        self._host_total: int | None = None
        self._lock = threading.Lock()  # serialises ticks (loop thread vs. a direct tick() call)
        self._stop = threading.Event()
        # a binary semaphore the loop waits on (held while nobody woke it); cheaper than an Event
        self._wake = threading.Lock()
        self._wake.acquire()
        self._woken = False
        self._thread: threading.Thread | None = None
        self.lateness_ns: list[int] = []  # filled only when record_lateness is on (benchmarks)
        self.record_lateness = False
        self._snapshot = self._make_snapshot(None)

    # ---- state -------------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    def _make_snapshot(self, sample: Sample | None) -> Snapshot:
        interval_s = (
            sample.interval_s if sample is not None else self.leases.current_s(self._clocks.mono_ns())
        )
        return Snapshot(
            node=self.node,
            boot_id=self.boot_id,
            backend=self._gpu.name if self._gpu is not None else "none",
            sample=sample,
            inventory=self._inventory if self._gpu_open else None,
            memory_model=self._memory_model,
            gpu_ok=self._gpu_open,
            gpu_reason=None if self._gpu_open else self._gpu_reason,
            inventory_rev=self._inventory_rev,
            inventory_seq=self._inventory_seq,
            counters=Counters(
                samples_total=self._samples_total,
                read_errors=self._read_errors_view(),
                late_ticks_total=self._late_ticks,
                gpu_reinit_total=max(0, self._open_attempts - 1),
            ),
            dropped_total=self.ring.dropped,
            interval_s=interval_s,
            host_memory_ok=self._host_memory_ok,
        )

    def _read_errors_view(self) -> dict[tuple[str, str], int]:
        """A copy for snapshots, made only after the counts changed (not on every tick)."""
        if self._errors_copy is None:
            self._errors_copy = dict(self._read_errors)
        return self._errors_copy

    def _count_error(self, field_name: str, reason: str) -> None:
        key = (field_name, reason)
        self._read_errors[key] = self._read_errors.get(key, 0) + 1
        self._errors_copy = None

    # ---- GPU session -------------------------------------------------------------------------------
    def _open_gpu(self, now_ns: int) -> None:
        assert self._gpu is not None
        if now_ns < self._gpu_retry_ns:
            return
        self._open_attempts += 1
        try:
            inventory, model = self._gpu.open(self._host_total)
        except DeviceError as exc:
            self._gpu_failed(exc, now_ns, "open")
            return
        self._inventory, self._memory_model = inventory, model
        self._gpu_open = True
        self._gpu_reason = None
        self._inventory_rev += 1
        self._inventory_seq = self._seq + 1
        self._backoff.reset()
        log.info(
            "GPU backend %s open: %d GPU(s), memory model %s", self._gpu.name, len(inventory.gpus), model
        )

    def _gpu_failed(self, exc: DeviceError, now_ns: int, stage: str) -> None:
        assert self._gpu is not None
        first_failure = self._gpu_open or self._open_attempts <= 1
        self._gpu_open = False
        self._gpu.close()
        self._gpu_reason = str(exc)
        delay_s = self._backoff.next_delay_s()
        self._gpu_retry_ns = now_ns + int(delay_s * 1e9)
        level = logging.WARNING if first_failure else logging.DEBUG
        log.log(level, "GPU %s failed (%s); retrying in %.1f s", stage, exc, delay_s)

    def _read_gpus(self, now_ns: int) -> tuple[GpuReading, ...]:
        if self._gpu is None:
            return ()
        if not self._gpu_open:
            self._open_gpu(now_ns)
            if not self._gpu_open:
                return ()
        try:
            readings = self._gpu.read()
        except DeviceError as exc:
            self._gpu_failed(exc, now_ns, "read")
            return ()
        for reading in readings:
            for field_name, reason in reading.read_errors:
                self._count_error(field_name, reason)
        return readings

    # ---- one tick ----------------------------------------------------------------------------------
    def tick(self) -> Sample:
        """Take one sample now (the loop calls this on its deadlines; tests may call it directly)."""
        with self._lock:
            return self._tick_locked()

    def _tick_locked(self) -> Sample:
        clocks = self._clocks
        t_mono = clocks.mono_ns()
        t_wall = clocks.wall_ns()
        t0 = time.perf_counter()
        try:
            memory: HostMemory | None = self._memory.read()
            memory_error = None
            self._host_total = memory.total_bytes if memory is not None else None
            self._host_memory_ok = True
        except OSError as exc:
            memory, memory_error = None, f"{type(exc).__name__}: {exc.strerror or exc}"
            self._count_error("host_memory", type(exc).__name__)
            self._host_memory_ok = False
        gpus = self._read_gpus(t_mono)
        sensors = self._sensors.read() if self._sensors is not None else ()
        duration = time.perf_counter() - t0
        self._seq += 1
        sample = Sample(
            seq=self._seq,
            boot_id=self.boot_id,
            node=self.node,
            t_wall_ns=t_wall,
            t_mono_ns=t_mono,
            read_duration_s=duration,
            interval_s=self.leases.current_s(t_mono),
            gpus=gpus,
            gpu_error=None if self._gpu_open or self._gpu is None else self._gpu_reason,
            memory=memory,
            memory_error=memory_error,
            sensors=sensors,
        )
        # with an encoder the ring encodes later, in batches (see SampleRing); else it is done now
        self.ring.append(sample.seq, sample if self.ring.encodes_later else encode_sample(sample))
        self._samples_total += 1
        self._snapshot = self._make_snapshot(sample)
        if self._on_sample is not None:
            self._on_sample(sample)
        return sample

    # ---- the loop ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._thread = threading.Thread(target=self._run, name="sparkwatch-sampler", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Re-read the interval now (after a lease change) instead of at the next deadline."""
        self._woken = True
        with contextlib.suppress(RuntimeError):  # already released: a wake-up is pending
            self._wake.release()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # stuck inside a hardware call: never shut NVML down under it
                log.warning("sampler did not stop within %.1f s; leaving the GPU library as it is", timeout_s)
                return
        with self._lock:
            if self._gpu is not None and self._gpu_open:
                self._gpu.close()
                self._gpu_open = False
            self._memory.close()

    def _run(self) -> None:
        mono = self._clocks.mono_ns
        deadline = mono()
        interval_ns = int(self.leases.current_s(deadline) * 1e9)
        while not self._stop.is_set():
            now = mono()
            if now < deadline:
                # A lock with a timeout: a wake-up cost ~110 µs of CPU here against ~150 µs for Event.wait
                # (whose Condition allocates a lock per wait). time.sleep (~90 µs) was tried and dropped:
                # under libfaketime (the clock-skew test) it hangs, then fails with EINVAL.
                # At most a second at a time, so the watchdog hears from us even at long intervals.
                self._wake.acquire(True, min((deadline - now) / 1e9, MAX_WAIT_S))
                if self._on_tick is not None:
                    self._on_tick()
                if self._woken:
                    self._woken = False
                    new_ns = int(self.leases.current_s(mono()) * 1e9)
                    if new_ns != interval_ns:
                        # rebase on the last tick's deadline; if that moment has passed, sample now
                        deadline = max(deadline - interval_ns + new_ns, mono())
                        interval_ns = new_ns
                continue
            if self.record_lateness:
                self.lateness_ns.append(now - deadline)
            try:
                self.tick()
            except Exception:  # a bug in a reader must not end sampling; it is logged loudly instead
                log.exception("sample failed")
            if self._on_tick is not None:
                self._on_tick()
            interval_ns = int(self._snapshot.interval_s * 1e9)  # what this tick found the leases to say
            deadline += interval_ns
            now = mono()
            if deadline <= now:  # this tick overran one or more deadlines: skip them, stay on the grid
                missed = (now - deadline) // interval_ns + 1
                self._late_ticks += missed
                deadline += missed * interval_ns
