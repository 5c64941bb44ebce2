"""The sampling loop: absolute deadlines on the monotonic clock, run in its own thread.

A tick is split in two. ``capture`` runs on the deadline and only reads: two clocks, the GPUs' raw NVML
results (the energy counter first), the sensors' raw attributes and /proc/meminfo's bytes. ``settle``
decodes what was captured, in order and in batches: it parses, builds the ``Sample``, counts read errors,
appends to the ring and publishes an immutable snapshot. Reading the snapshot settles first, so HTTP
handlers, the stream and the systemd hook always see every sample taken; the loop settles on its own at
least once a second.

Why: after each sleep the CPU's caches are cold, and a tick costs what the distinct code it runs costs
cold, ~10x its warm cost on the VMs measured. Decoding a batch runs that code once, warm.

HTTP handlers only ever read the snapshot and the ring, so a scrape never touches hardware and a slow NVML
call never blocks the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sparkwatch_agent.hardware.gpu_backend import GpuBackend
from sparkwatch_agent.hardware.hwmon import SensorCapture, read_names
from sparkwatch_agent.hardware.meminfo import memory_of
from sparkwatch_agent.hardware.readings import GpuReading, HostMemory, SensorReading, StatusReading
from sparkwatch_agent.sampling.clocks import Clocks
from sparkwatch_agent.sampling.gpu_session import GpuKeeper, GpuSession
from sparkwatch_agent.sampling.leases import IntervalLeases
from sparkwatch_agent.sampling.readers import MemoryReader, SensorReader
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sample import Sample, encode_sample
from sparkwatch_agent.sampling.snapshot import Counters, Snapshot
from sparkwatch_agent.shared.backoff import ExponentialBackoff
from sparkwatch_agent.shared.log_limit import RateLimitedExceptions

log = logging.getLogger(__name__)

MAX_WAIT_S = 1.0
MAX_WAIT_NS = 1_000_000_000
#: The loop settles (decodes) its captures at least this often when nobody reads the snapshot.
SETTLE_EVERY_NS = 1_000_000_000


#: One tick as captured: (seq, t_wall_ns, t_mono_ns, read_duration_s, interval_s, meminfo bytes or the
#: OSError that stopped them, GPU capture or None, the GpuSession it ran under, sensor capture or None).
#: A plain tuple: the cheapest thing to build on the deadline.
Captured = tuple[int, int, int, float, float, "bytes | OSError", Any, GpuSession, "SensorCapture | None"]


class Sampler:
    """Owns the hardware readers and, through a :class:`GpuKeeper`, the GPU session.

    ``on_tick`` runs on the sampler thread after every capture and at least once a second (the systemd
    watchdog, the stdio writer's wake-up); it may also be set with :meth:`set_tick_hook` before
    :meth:`start`. ``on_sample`` gets each sample as it settles, in seq order, on whichever thread settles;
    reading the snapshot from it returns what is settled so far.
    """

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
        self._gpus = GpuKeeper(gpu, backoff or ExponentialBackoff())
        self._memory = memory
        self._sensors = sensors
        self._clocks = clocks or Clocks()
        self._bugs = RateLimitedExceptions(log, mono_s=lambda: self._clocks.mono_ns() / 1e9)
        self._on_sample = on_sample
        self._on_tick = on_tick
        self._seq = 0
        self._samples_total = 0
        self._read_errors: dict[tuple[str, str], int] = {}
        self._errors_copy: dict[tuple[str, str], int] | None = None
        self._late_ticks = 0
        self._host_memory_ok = True
        # the hwmon names the last capture was read with, and the changes of them: a hello says each
        self._sensor_names: tuple[str, ...] | None = None
        self._sensors_rev, self._sensors_seq = 0, 1
        self._last_host_total: int | None = None
        self._lock = threading.Lock()  # serialises captures (loop thread vs. a direct tick() call)
        self._pending: deque[Captured] = deque()  # captured, not yet settled; appended by captures only
        # one settler at a time, so samples settle in seq order; re-entered (from on_sample), it returns
        self._settle_lock = threading.RLock()
        self._settling = False
        self._settled_ns = 0
        self._stop = threading.Event()
        # a binary semaphore the loop waits on (held while nobody woke it); cheaper than an Event
        self._wake = threading.Lock()
        self._wake.acquire()
        self._woken = False
        self._thread: threading.Thread | None = None
        self.lateness_ns: list[int] = []  # filled only when record_lateness is on (benchmarks)
        self.record_lateness = False
        self._snapshot = self._make_snapshot(None, self._gpus.session)

    # ---- state -------------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot:
        """The latest state, with every capture taken so far settled (also when another thread is in
        the middle of settling them: this waits for it)."""
        self.settle()
        return self._snapshot

    @property
    def last_seq(self) -> int:
        """Seq of the newest sample in the ring, every capture so far settled (0 before the first)."""
        self.settle()
        return self.ring.last_seq

    def _make_snapshot(self, sample: Sample | None, session: GpuSession) -> Snapshot:
        interval_s = (
            sample.interval_s if sample is not None else self.leases.current_s(self._clocks.mono_ns())
        )
        return Snapshot(
            node=self.node,
            boot_id=self.boot_id,
            backend=self._gpus.backend_name,
            sample=sample,
            inventory=session.inventory if session.ok else None,
            memory_model=session.memory_model,
            gpu_ok=session.ok,
            gpu_reason=None if session.ok else session.reason,
            inventory_rev=session.inventory_rev + self._sensors_rev,  # GPUs or hwmon chips changed
            inventory_seq=max(session.inventory_seq, self._sensors_seq),
            counters=Counters(
                samples_total=self._samples_total,
                read_errors=self._read_errors_view(),
                late_ticks_total=self._late_ticks,
                gpu_reinit_total=self._gpus.reinit_total,
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

    def _host_total(self, memory: bytes | OSError) -> int | None:
        """MemTotal of a meminfo capture, which decides the GPU's memory model when it opens."""
        if isinstance(memory, bytes):
            try:
                self._last_host_total = self._memory.decode(memory).total_bytes
            except Exception:  # a decoder bug: keep the last total; settle reports the bug per sample
                self._bugs.exception("decoding host memory for the GPU's memory model failed")
        return self._last_host_total

    def _memory_capture(self) -> bytes | OSError:
        try:
            return self._memory.capture()
        except OSError as exc:
            return exc

    # ---- one tick ----------------------------------------------------------------------------------
    def tick(self) -> Sample:
        """Take one sample now and settle it (the loop captures on its deadlines and settles in batches;
        the probe and tests call this while the loop is not running, so a GPU failure promises no retry)."""
        with self._lock:
            self._capture(retries=False)
        self.settle()
        sample = self._snapshot.sample
        assert sample is not None
        return sample

    def _capture(self, retries: bool = True) -> float:
        """Read everything, decode nothing; queue it for ``settle``. Returns the interval in effect.

        Power is ΔE/Δt over the samples' stamps, so the stamp is taken just before the GPU reads, which
        begin with the energy counter (``READ_ORDER``), and nothing between the two releases the GIL or
        makes a system call: a GPU (re)open and the wall clock come before the stamp; the hwmon files
        (energy counters too) after the GPU, then /proc/meminfo (a level, not a counter). Every file read
        and NVML call lets the agent's other threads keep the GIL for up to 5 ms: a counter read 5 ms late
        is 10 % of a 20 Hz interval's power."""
        clocks = self._clocks
        t0 = time.perf_counter()  # the read's duration includes an open, as it always has
        if self._gpus.due(now_ns := clocks.mono_ns()):  # opening: MemTotal now decides the memory model
            opening = self._memory_capture()
            self._gpus.open_if_due(now_ns, self._seq + 1, lambda: self._host_total(opening), retries)
        if self._sensors is not None:  # a hwmon driver loaded since: its labels are read before the stamp
            self._sensors.refresh()
        t_wall, t_mono = clocks.pair()
        gpus = self._gpus.capture(t_mono, retries)
        sensors = self._sensors.capture() if self._sensors is not None else None
        memory = self._memory_capture()
        duration = time.perf_counter() - t0
        interval_s = self.leases.current_s(t_mono)
        self._seq += 1
        self._pending.append(
            (self._seq, t_wall, t_mono, duration, interval_s, memory, gpus, self._gpus.session, sensors)
        )
        return interval_s

    def settle(self) -> None:
        """Decode every pending capture, oldest first: count its read errors, append it to the ring,
        hand it to ``on_sample``; then publish one snapshot. Safe from any thread."""
        with self._settle_lock:
            if self._settling:  # on_sample read the snapshot: what is settled so far is the answer
                return
            self._settling = True
            try:
                self._settle_locked()
            finally:
                self._settling = False

    def _settle_locked(self) -> None:
        self._settled_ns = self._clocks.mono_ns()
        pending = self._pending
        sample, session = None, self._gpus.session
        while pending:
            captured = pending.popleft()
            session = captured[7]
            self._note_sensors(captured)
            try:
                sample = self._decode(captured)
            except Exception as exc:  # a decoder bug must not break the ring's seq chain
                self._bugs.exception("decoding a sample failed", f" (seq {captured[0]})")
                sample = self._undecodable(captured, exc)
            # with an encoder the ring encodes later, in batches (see SampleRing); else it is done now
            self.ring.append(sample.seq, sample if self.ring.encodes_later else encode_sample(sample))
            self._samples_total += 1
            if self._on_sample is not None:
                self._on_sample(sample)
        if sample is not None:
            self._snapshot = self._make_snapshot(sample, session)

    def _note_sensors(self, captured: Captured) -> None:
        """A capture read with other hwmon names than the one before (a chip came or went): the stream's
        next hello, before this sample, lists them (serving/stream_cursor.py)."""
        names = read_names(captured[8])
        if names is not None and names != self._sensor_names:
            if self._sensor_names is not None:
                self._sensors_rev, self._sensors_seq = self._sensors_rev + 1, captured[0]
            self._sensor_names = names

    def _decode(self, captured: Captured) -> Sample:
        memory_raw, gpus_raw, session, sensors_raw = captured[5:]
        errors: list[tuple[str, str]] = []  # (field, reason) of every value this sample could not have
        memory, memory_error = memory_of(self._memory.decode, memory_raw, errors)
        self._host_memory_ok = memory_error is None
        gpus = self._gpus.decode(gpus_raw)
        errors += [error for reading in gpus for error in reading.read_errors]
        sensors: tuple[SensorReading, ...] = ()
        status: tuple[StatusReading, ...] = ()
        if sensors_raw is not None and self._sensors is not None:
            sensors = self._sensors.decode(sensors_raw, errors)
            status = self._sensors.decode_status(sensors_raw)
        for field_name, reason in errors:
            self._count_error(field_name, reason)
        return self._sample(
            captured,
            gpus=gpus,
            gpu_error=None if session.ok or not self._gpus.present else session.reason,
            memory=memory,
            memory_error=memory_error,
            sensors=sensors,
            status=status,
        )

    def _undecodable(self, captured: Captured, exc: Exception) -> Sample:
        """The sample of a capture that could not be decoded: its identity and times, no values."""
        reason = f"decode failed: {type(exc).__name__}: {exc}"
        self._count_error("decode", type(exc).__name__)
        return self._sample(captured, gpus=(), gpu_error=reason, memory=None, memory_error=reason, sensors=())

    def _sample(
        self,
        captured: Captured,
        *,
        gpus: tuple[GpuReading, ...],
        gpu_error: str | None,
        memory: HostMemory | None,
        memory_error: str | None,
        sensors: tuple[SensorReading, ...],
        status: tuple[StatusReading, ...] = (),
    ) -> Sample:
        seq, t_wall, t_mono, duration, interval_s = captured[:5]
        return Sample(
            seq=seq,
            boot_id=self.boot_id,
            node=self.node,
            t_wall_ns=t_wall,
            t_mono_ns=t_mono,
            read_duration_s=duration,
            interval_s=interval_s,
            gpus=gpus,
            gpu_error=gpu_error,
            memory=memory,
            memory_error=memory_error,
            sensors=sensors,
            status=status,
        )

    # ---- the loop ----------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._thread = threading.Thread(target=self._run, name="sparkwatch-sampler", daemon=True)
        self._thread.start()

    def set_tick_hook(self, on_tick: Callable[[], None] | None) -> None:
        """Set ``on_tick`` (see the class); only before :meth:`start`, whose thread reads it."""
        if self._thread is not None:
            raise RuntimeError("the tick hook is set before the sampler starts")
        self._on_tick = on_tick

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
            self._gpus.close()
            self._memory.close()
            if self._sensors is not None:
                self._sensors.close()

    def _run(self) -> None:
        mono = self._clocks.mono_ns
        deadline = mono()
        interval_ns = int(self.leases.current_s(deadline) * 1e9)
        hook_ns = deadline  # when on_tick last ran
        while not self._stop.is_set():
            now = mono()
            if now < deadline:
                # A lock with a timeout: a wake-up cost ~110 µs of CPU here against ~150 µs for Event.wait
                # (whose Condition allocates a lock per wait). time.sleep (~90 µs) was tried and dropped:
                # under libfaketime (the clock-skew test) it hangs, then fails with EINVAL.
                # At most a second at a time, so the watchdog hears from us even at long intervals.
                wait_s = (deadline - now) / 1e9
                self._wake.acquire(True, min(wait_s, MAX_WAIT_S))
                if self._woken:
                    self._woken = False
                    new_ns = int(self.leases.current_s(mono()) * 1e9)
                    if new_ns != interval_ns:
                        # rebase on the last tick's deadline; if that moment has passed, sample now
                        deadline = max(deadline - interval_ns + new_ns, mono())
                        interval_ns = new_ns
                if self._on_tick is not None and (now := mono()) - hook_ns >= MAX_WAIT_NS:
                    hook_ns = now  # no tick for a second (a long interval, or wake-ups): still beat
                    self._on_tick()
                continue
            if self.record_lateness:
                self.lateness_ns.append(now - deadline)
            try:
                with self._lock:
                    interval_ns = int(self._capture() * 1e9)  # what this tick found the leases to say
                if now - self._settled_ns >= SETTLE_EVERY_NS:
                    self.settle()
            except Exception:  # a bug in a reader must not end sampling; it is logged loudly instead
                self._bugs.exception("sample failed")
            if self._on_tick is not None:
                hook_ns = now
                self._on_tick()
            deadline += interval_ns
            now = mono()
            if deadline <= now:  # this tick overran one or more deadlines: skip them, stay on the grid
                missed = (now - deadline) // interval_ns + 1
                self._late_ticks += missed
                deadline += missed * interval_ns
