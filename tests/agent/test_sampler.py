"""The sampler: sample shape, GPU loss and recovery with backoff, read errors, the loop's deadlines."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from typing import Protocol

import pytest

from doubles.nvml_fake import GPU_IS_LOST, UNKNOWN, gb10_fake
from sparkwatch_agent.hardware.meminfo import parse_meminfo
from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
from sparkwatch_agent.hardware.readings import HostMemory
from sparkwatch_agent.hardware.sim import SimGb10, SimMeminfoReader, SimNvml, SimSpbm
from sparkwatch_agent.sampling.clocks import Clocks
from sparkwatch_agent.sampling.leases import IntervalLeases
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sample import Sample
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.shared.backoff import ExponentialBackoff


class FakeClock:
    def __init__(self) -> None:
        self.mono = 1_000_000_000
        self.wall = 1_800_000_000_000_000_000

    def advance(self, seconds: float) -> None:
        self.mono += int(seconds * 1e9)
        self.wall += int(seconds * 1e9)

    def clocks(self) -> Clocks:
        return Clocks(wall_ns=lambda: self.wall, mono_ns=lambda: self.mono)


class StaticMemory:
    def capture(self) -> bytes:
        return b"MemTotal: 125000000 kB\nMemFree: 100 kB\nMemAvailable: 100000000 kB\n"

    def decode(self, raw: bytes) -> HostMemory:
        return parse_meminfo(raw)

    def close(self) -> None:
        return None


class ClockSource(Protocol):
    def clocks(self) -> Clocks: ...


def make_sampler(
    lib: object, clock: ClockSource, ring: int = 100, memory: StaticMemory | None = None
) -> Sampler:
    return Sampler(
        node="n1",
        boot_id="b00t",
        gpu=NvmlBackend(lib=lib),
        memory=memory or StaticMemory(),
        sensors=None,
        leases=IntervalLeases(1.0),
        ring=SampleRing(ring),
        clocks=clock.clocks(),
        backoff=ExponentialBackoff(initial_s=2.0, factor=2.0, maximum_s=8.0),
    )


def bare_sampler(interval_s: float, **kwargs: object) -> Sampler:
    """A sampler with no GPU backend on the real clock (for loop timing tests)."""
    return Sampler(
        node="n",
        boot_id="b",
        gpu=None,
        memory=StaticMemory(),
        sensors=None,
        leases=IntervalLeases(interval_s),
        ring=SampleRing(1000),
        **kwargs,  # type: ignore[arg-type]
    )


def test_sample_carries_identity_times_and_values() -> None:
    clock = FakeClock()
    sampler = make_sampler(gb10_fake(), clock)
    s1 = sampler.tick()
    clock.advance(1)
    s2 = sampler.tick()
    assert (s1.seq, s2.seq) == (1, 2)
    assert s2.t_mono_ns - s1.t_mono_ns == 10**9 and s2.t_wall_ns == clock.wall
    assert s1.boot_id == "b00t" and s1.node == "n1"
    assert s1.gpus[0].power_w == 7.0 and s1.memory is not None
    assert s1.memory.used_bytes == 25_000_000 * 1024
    frame = json.loads(sampler.ring.after(0, 10).frames[0])
    assert frame["type"] == "sample" and frame["gpus"][0]["mem_used_bytes"] is None  # null, not 0
    assert sampler.snapshot.memory_model == "unified"


def test_gpu_lost_keeps_host_sampling_and_recovers_with_backoff() -> None:
    clock = FakeClock()
    lib = gb10_fake()
    sampler = make_sampler(lib, clock)
    sampler.tick()
    lib.errors["nvmlDeviceGetPowerUsage"] = GPU_IS_LOST
    lib.errors["nvmlDeviceGetHandleByIndex"] = GPU_IS_LOST
    lost = sampler.tick()
    assert lost.gpus == () and lost.gpu_error is not None and "GPU_IS_LOST" in lost.gpu_error
    assert lost.memory is not None  # host sampling continues
    snap = sampler.snapshot
    assert not snap.gpu_ok and snap.inventory is None  # GPU series vanish, nothing stale
    opens = lib.calls.count("nvmlInit")
    clock.advance(1)
    sampler.tick()  # inside the 2 s backoff: no re-init attempt
    assert lib.calls.count("nvmlInit") == opens
    clock.advance(1.5)
    sampler.tick()  # attempt 1 fails (handle still lost), next wait 4 s
    assert lib.calls.count("nvmlInit") == opens + 1
    del lib.errors["nvmlDeviceGetPowerUsage"], lib.errors["nvmlDeviceGetHandleByIndex"]
    clock.advance(2)
    assert sampler.tick().gpus == ()  # still backing off
    clock.advance(2.5)
    back = sampler.tick()
    assert back.gpus and back.gpus[0].power_w == 7.0 and back.gpu_error is None
    assert sampler.snapshot.gpu_ok and sampler.snapshot.inventory_rev == 2
    assert sampler.snapshot.counters.gpu_reinit_total == 2


def test_field_failures_are_counted_by_field_and_reason() -> None:
    clock = FakeClock()
    lib = gb10_fake()
    sampler = make_sampler(lib, clock)
    sampler.tick()
    lib.errors["nvmlDeviceGetTemperature"] = UNKNOWN
    sampler.tick()
    sampler.tick()
    assert sampler.snapshot.counters.read_errors == {("temperature", "UNKNOWN"): 2}
    assert sampler.snapshot.sample is not None and sampler.snapshot.sample.gpus[0].temperature_c is None


def test_ring_overflow_is_counted_in_snapshot() -> None:
    clock = FakeClock()
    sampler = make_sampler(gb10_fake(), clock, ring=10)
    for _ in range(25):
        sampler.tick()
    assert sampler.snapshot.dropped_total == 10  # one whole block of 10; 15 newest remain


def test_sim_energy_is_the_exact_integral_of_power() -> None:
    clock = FakeClock()
    sim = SimGb10("spark-1", lambda: clock.mono)
    e0 = sim.state()["energy_j"]
    clock.advance(10)
    sim.set_load(util_ratio=1.0, model_bytes=100 * 2**30)
    clock.advance(4)
    state = sim.state()
    assert state["power_w"] == 61.0  # resident idle 11 W + 50 W at full utilisation
    assert abs(state["energy_j"] - (e0 + 10 * 5.0 + 4 * 61.0)) < 1e-9
    mem = SimMeminfoReader(sim).read()
    assert mem.used_bytes == 6 * 2**30 + 100 * 2**30


def test_sim_spbm_reads_like_spbm_and_its_gpu_accumulator_wraps_at_32_bit_mj() -> None:
    clock = FakeClock()
    sim = SimGb10("spark-1", lambda: clock.mono)
    spbm = SimSpbm(sim)
    assert spbm.names == ("sys_total", "dc_input", "gpu")
    first = {r.sensor: r for r in spbm.decode(spbm.capture())}
    assert first["sys_total"].power_w == 25.0 and first["sys_total"].energy_j is None  # power-only, as spbm
    assert first["dc_input"].power_w == 26.0 and first["dc_input"].kind == "system"
    assert first["gpu"].kind == "gpu" and first["gpu"].source == "sim:spbm"
    sim.set_load(util_ratio=1.0, model_bytes=2**30)
    clock.advance(20)  # 61 W for 20 s: 1220 J, past the 500 J left before the wrap
    raw_energy = spbm.capture().channels[2][1]
    assert raw_energy is not None and int(raw_energy) < 1_000_000_000  # the raw count wrapped
    later = {r.sensor: r for r in spbm.decode(spbm.capture())}
    assert later["gpu"].energy_j == pytest.approx(1220.0, abs=0.002)  # decoded across the wrap
    state = sim.state()
    assert state["sys_power_w"] == 20.0 + 61.0 + 8.0
    assert state["sys_energy_j"] == pytest.approx(20 * 89.0)
    assert later["sys_total"].power_w == pytest.approx(89.0)


def test_sim_runs_through_the_nvml_backend_like_a_gb10() -> None:
    clock = FakeClock()
    sim = SimGb10("spark-1", lambda: clock.mono)
    sampler = Sampler(
        node="spark-1",
        boot_id="b",
        gpu=NvmlBackend(lib=SimNvml(sim), name="sim", simulated=True),
        memory=SimMeminfoReader(sim),
        sensors=None,
        leases=IntervalLeases(1.0),
        ring=SampleRing(10),
        clocks=clock.clocks(),
    )
    sim.set_load(util_ratio=0.5)
    sample = sampler.tick()
    caps = sampler.snapshot.inventory.gpus[0].capabilities  # type: ignore[union-attr]
    assert {f for f, c in caps.items() if not c.polled} == {
        "memory_info",
        "power_limit",
        "memory_utilization",
    }
    assert sample.gpus[0].util_ratio == 0.5 and sample.gpus[0].power_w == 30.0
    assert sampler.snapshot.memory_model == "unified"


class HeldUpMemory(SimMeminfoReader):
    """The sim's meminfo, whose reads may be held up (the thread preempted, or another thread holding the
    GIL that every file read hands over): each capture moves the clock on by the next of ``holdups_s``."""

    def __init__(self, sim: SimGb10, clock: FakeClock, holdups_s: list[float]) -> None:
        super().__init__(sim)
        self.clock, self.holdups_s = clock, holdups_s

    def capture(self) -> bytes:
        self.clock.advance(self.holdups_s.pop(0) if self.holdups_s else 0.0)
        return super().capture()


class HeldUpSimNvml(SimNvml):
    """The sim's NVML, whose power calls may be held up as ``HeldUpMemory``'s reads are."""

    def __init__(self, sim: SimGb10, clock: FakeClock, holdups_s: list[float]) -> None:
        super().__init__(sim)
        self.clock, self.holdups_s = clock, holdups_s

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        self.clock.advance(self.holdups_s.pop(0) if self.holdups_s else 0.0)
        return super().nvmlDeviceGetPowerUsage(handle)


def sim_sampler(clock: FakeClock, holdups_s: dict[str, list[float]]) -> Sampler:
    """A sim GB10 at 45 W on ``clock``, its meminfo reads, power calls and wall-clock reads held up as
    listed (``holdups_s["memory" | "power" | "wall"]``), read by read."""
    sim = SimGb10("n1", lambda: clock.mono)
    sim.set_load(util_ratio=0.8)

    def wall_ns() -> int:
        clock.advance(holdups_s["wall"].pop(0) if holdups_s["wall"] else 0.0)
        return clock.wall

    return Sampler(
        node="n1",
        boot_id="b",
        gpu=NvmlBackend(lib=HeldUpSimNvml(sim, clock, holdups_s["power"]), name="sim", simulated=True),
        memory=HeldUpMemory(sim, clock, holdups_s["memory"]),
        sensors=None,
        leases=IntervalLeases(1.0),
        ring=SampleRing(10),
        clocks=Clocks(wall_ns=wall_ns, mono_ns=lambda: clock.mono),
    )


def power_between(a: Sample, b: Sample) -> float:
    """What the coordinator takes as the interval's power: ΔE/Δt over the samples' stamps."""
    energy_a, energy_b = a.gpus[0].energy_j, b.gpus[0].energy_j
    assert energy_a is not None and energy_b is not None
    return (energy_b - energy_a) / ((b.t_mono_ns - a.t_mono_ns) / 1e9)


@pytest.mark.parametrize("held_up", ["memory", "wall", "power"])
def test_nothing_held_up_in_a_capture_comes_between_its_stamp_and_its_energy_read(held_up: str) -> None:
    """One read held up 20 ms on the third tick, none on the others (the thread preempted, or the GIL kept
    by another thread): between the stamp and the energy counter, as /proc/meminfo, the wall clock and the
    power call were, it made the 1 s interval before it read 45.9 W for 45 W and the one after 44.1 W
    (at 20 Hz: 1.4x and 0.6x). Now every interval's power is the sim's, to the counter's mJ."""
    clock = FakeClock()
    holdups: dict[str, list[float]] = {"memory": [], "wall": [], "power": []}
    sampler = sim_sampler(clock, holdups)
    samples = [sampler.tick()]  # the first opens the GPU (its probe calls power, too)
    for held in (False, True, False):
        clock.advance(1)
        holdups[held_up][:] = [0.020 if held else 0.0] * 2
        samples.append(sampler.tick())
    for a, b in itertools.pairwise(samples):
        assert power_between(a, b) == pytest.approx(45.0, abs=2e-3)


def test_loop_keeps_absolute_deadlines_and_follows_interval_changes() -> None:
    ticks: list[int] = []
    done = threading.Event()

    def on_sample(sample: Sample) -> None:
        ticks.append(sample.t_mono_ns)  # when it was captured (settling comes later, in batches)
        if len(ticks) == 30:
            done.set()

    sampler = bare_sampler(0.02, on_sample=on_sample)
    sampler.start()
    try:
        assert done.wait(5)
        sampler.leases.grant("t", 0.01, 60, time.monotonic_ns())
        sampler.wake()
        n = len(ticks)
        deadline = time.monotonic() + 5
        while len(ticks) < n + 30 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        sampler.stop()
    slow = ticks[1:30]
    span = (slow[-1] - slow[0]) / 1e9
    assert abs(span - 0.02 * (len(slow) - 1)) < 0.02  # no cumulative drift over the run
    fast = ticks[n + 5 : n + 30]
    assert abs((fast[-1] - fast[0]) / 1e9 - 0.01 * (len(fast) - 1)) < 0.02
    assert sampler.snapshot.memory_model == "none"


def test_speeding_up_counts_no_fake_late_ticks() -> None:
    sampler = bare_sampler(2.0)
    sampler.start()
    try:
        time.sleep(0.3)
        sampler.leases.grant("c", 0.05, 60, time.monotonic_ns())
        sampler.wake()
        time.sleep(0.5)
    finally:
        sampler.stop()
    assert sampler.snapshot.counters.late_ticks_total == 0
    assert 8 <= sampler.snapshot.counters.samples_total <= 14


def test_watchdog_hears_from_the_loop_at_long_intervals() -> None:
    beats: list[float] = []
    sampler = bare_sampler(60.0, on_tick=lambda: beats.append(time.monotonic()))
    sampler.start()
    try:
        time.sleep(2.5)
    finally:
        sampler.stop()
    assert len(beats) >= 2 and sampler.snapshot.counters.samples_total == 1


# ---- capture on the deadline, settle in batches ----------------------------------------------------
def test_reading_the_snapshot_settles_every_capture_so_far() -> None:
    sampler = Sampler(
        node="n",
        boot_id="b",
        gpu=NvmlBackend(lib=gb10_fake()),
        memory=StaticMemory(),
        sensors=None,
        leases=IntervalLeases(0.01),
        ring=SampleRing(1000),
    )
    sampler.start()
    try:
        time.sleep(0.4)  # the loop settles its first capture at once, the next ones after a second
        snap = sampler.snapshot
    finally:
        sampler.stop()
    assert snap.sample is not None and snap.counters.samples_total >= 20
    assert snap.sample.seq == snap.counters.samples_total == sampler.ring.last_seq
    seqs = [json.loads(f)["seq"] for f in sampler.ring.after(0, 1000).frames]
    assert seqs == list(range(1, len(seqs) + 1)) and snap.sample.gpus[0].power_w == 7.0


def test_the_loop_settles_on_its_own_in_batches_at_least_once_a_second() -> None:
    settled: list[tuple[int, int]] = []  # (sample's capture time, when on_sample saw it)
    sampler = bare_sampler(0.01, on_sample=lambda s: settled.append((s.t_mono_ns, time.monotonic_ns())))
    sampler.start()
    try:
        time.sleep(2.6)  # nobody reads the snapshot meanwhile
    finally:
        sampler.stop()
    assert len(settled) >= 150
    staleness_s = max(seen - taken for taken, seen in settled) / 1e9
    assert staleness_s < 1.5
    batches = 1 + sum(1 for a, b in itertools.pairwise(settled) if b[1] - a[1] > 5_000_000)
    assert batches <= 5  # not one wake-up of the decoding code per tick


class DecodeFailsForOneCapture(StaticMemory):
    """Each capture's bytes carry its number; decoding the third capture's bytes (the second tick's: the
    first tick also reads once to open the GPU) raises."""

    def __init__(self) -> None:
        self.captures = 0

    def capture(self) -> bytes:
        self.captures += 1
        return super().capture() + b"Capture: %d\n" % self.captures

    def decode(self, raw: bytes) -> HostMemory:
        if raw.endswith(b"Capture: 3\n"):
            raise ValueError("bad bytes")
        return super().decode(raw)


def test_a_capture_that_cannot_be_decoded_keeps_its_seq_and_says_why() -> None:
    sampler = make_sampler(gb10_fake(), FakeClock(), memory=DecodeFailsForOneCapture())
    assert sampler.tick().memory is not None
    bad = sampler.tick()
    assert bad.seq == 2 and bad.memory is None and bad.gpus == ()
    assert bad.memory_error == bad.gpu_error == "decode failed: ValueError: bad bytes"
    later = sampler.tick()
    assert later.seq == 3 and later.memory is not None and later.gpus[0].power_w == 7.0
    assert sampler.snapshot.counters.read_errors == {("decode", "ValueError"): 1}
    assert [json.loads(f)["seq"] for f in sampler.ring.after(0, 10).frames] == [1, 2, 3]


def capture(sampler: Sampler) -> None:
    """What the loop does on a deadline: capture only, settle later."""
    with sampler._lock:
        sampler._capture()


def snapshot_from_another_thread(sampler: Sampler) -> Snapshot:
    got: list[Snapshot] = []
    reader = threading.Thread(target=lambda: got.append(sampler.snapshot))
    reader.start()
    reader.join(5)
    return got[0]


def test_a_snapshot_read_mid_capture_agrees_with_its_sample() -> None:
    """A reader on another thread settles while the loop is inside a capture that re-opens or loses the
    GPU: the snapshot it gets describes the GPU as it was for the newest settled sample."""
    clock = FakeClock()
    lib = gb10_fake()
    sampler = make_sampler(lib, clock)
    sampler.tick()
    lib.errors["nvmlDeviceGetPowerUsage"] = GPU_IS_LOST
    capture(sampler)  # seq 2: lost, not settled yet
    del lib.errors["nvmlDeviceGetPowerUsage"]
    clock.advance(3)
    backend = sampler._gpus._gpu
    assert isinstance(backend, NvmlBackend)
    seen: list[Snapshot] = []
    real_capture, real_close = backend.capture, backend.close

    def capture_after_reopen() -> object:
        seen.append(snapshot_from_another_thread(sampler))
        return real_capture()

    backend.capture = capture_after_reopen  # type: ignore[method-assign]
    capture(sampler)  # seq 3: re-opens the GPU, then reads it
    backend.capture = real_capture  # type: ignore[method-assign]
    mid_reopen = seen.pop()
    assert mid_reopen.sample is not None and mid_reopen.sample.seq == 2
    assert mid_reopen.sample.gpu_error is not None and not mid_reopen.gpu_ok
    assert mid_reopen.gpu_reason == mid_reopen.sample.gpu_error and mid_reopen.inventory_rev == 1

    def close_after_loss() -> None:
        seen.append(snapshot_from_another_thread(sampler))
        real_close()

    backend.close = close_after_loss  # type: ignore[method-assign]
    capture(sampler)  # seq 4: fine
    lib.errors["nvmlDeviceGetPowerUsage"] = GPU_IS_LOST
    capture(sampler)  # seq 5: lost; the reader comes in while the backend closes
    mid_loss = seen.pop()
    assert mid_loss.sample is not None and mid_loss.sample.seq == 4
    assert mid_loss.sample.gpus[0].power_w == 7.0
    assert mid_loss.gpu_ok and mid_loss.gpu_reason is None and mid_loss.inventory_rev == 2
    final = sampler.snapshot
    assert final.sample is not None and final.sample.seq == 5
    assert not final.gpu_ok and final.gpu_reason is not None and "GPU_IS_LOST" in final.gpu_reason


@pytest.mark.parametrize("batched", [False, True], ids=["settled-per-tick", "settled-at-once"])
def test_stream_cursor_puts_hello_where_the_inventory_changed(batched: bool) -> None:
    from sparkwatch_agent.serving.stream_cursor import StreamCursor

    clock = FakeClock()
    lib = gb10_fake()
    sampler = make_sampler(lib, clock)
    step = capture if batched else Sampler.tick
    step(sampler)
    step(sampler)
    lib.errors["nvmlDeviceGetPowerUsage"] = GPU_IS_LOST
    step(sampler)  # seq 3: lost
    del lib.errors["nvmlDeviceGetPowerUsage"]
    clock.advance(3)
    step(sampler)  # seq 4: re-opened, new inventory
    step(sampler)  # seq 5
    cursor = StreamCursor(0, 1)  # a reader that got the first inventory's hello
    lines = []
    while more := cursor.next_lines(
        sampler, 500, lambda snap: b'{"type":"hello","rev":%d}' % snap.inventory_rev
    ):
        lines.extend(json.loads(x) for x in more)
    kinds = [(f["type"], f.get("seq", f.get("rev"))) for f in lines]
    assert kinds == [("sample", 1), ("sample", 2), ("sample", 3), ("hello", 2), ("sample", 4), ("sample", 5)]


def test_on_sample_may_read_the_snapshot_without_deadlock() -> None:
    seen: list[int] = []
    holder: list[Sampler] = []

    def on_sample(sample: Sample) -> None:
        seen.append(holder[0].snapshot.counters.samples_total)  # settled so far, not a re-entry

    sampler = bare_sampler(0.01, on_sample=on_sample)
    holder.append(sampler)
    sampler.start()
    try:
        time.sleep(0.3)
        snap = snapshot_from_another_thread(sampler)
    finally:
        sampler.stop()
    assert snap.counters.samples_total >= 20 and len(seen) == snap.counters.samples_total


def test_watchdog_hook_beats_while_wake_ups_keep_the_loop_from_ticking() -> None:
    beats: list[float] = []
    sampler = bare_sampler(60.0, on_tick=lambda: beats.append(time.monotonic()))
    sampler.start()
    try:
        time.sleep(0.1)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.5:  # a client renewing its lease (same interval) every 0.3 s
            sampler.leases.grant("c", 60.0, 30, time.monotonic_ns())
            sampler.wake()
            time.sleep(0.3)
        t1 = time.monotonic()
    finally:
        sampler.stop()
    during = [t0, *(b for b in beats if t0 < b <= t1), t1]
    assert max(b - a for a, b in itertools.pairwise(during)) < 1.5
    assert sampler.snapshot.counters.samples_total == 1


class UnparsableMemory(StaticMemory):
    def capture(self) -> bytes:
        return b"MemTotal: abc kB\nMemFree: 100 kB\nMemAvailable: 100000000 kB\n"


def test_meminfo_without_numbers_says_why_counts_it_and_is_not_healthy() -> None:
    sampler = make_sampler(gb10_fake(), FakeClock(), memory=UnparsableMemory())
    sample = sampler.tick()
    assert sample.memory is not None and sample.memory.used_bytes is sample.memory.total_bytes is None
    assert sample.memory_error == "meminfo has no MemTotal number to take used memory from"
    assert sampler.snapshot.counters.read_errors == {("host_memory", "unparsable"): 1}
    assert not sampler.snapshot.host_memory_ok  # /healthz: 503 "host memory unreadable"


class DecodeAlwaysFails(StaticMemory):
    def decode(self, raw: bytes) -> HostMemory:
        raise ValueError("bad bytes")


def test_a_bug_at_every_tick_logs_its_traceback_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    """A reader's bug raised at each tick logged a traceback each time (ten a second at 10 Hz): the journal
    filled, and so did an SSH exec session's stderr. Once a minute, with the count held back."""
    clock = FakeClock()
    sampler = make_sampler(gb10_fake(), clock, memory=DecodeAlwaysFails())
    caplog.set_level(logging.ERROR, logger="sparkwatch_agent.sampling.sampler")
    for _ in range(50):  # 5 s at 10 Hz
        sampler.tick()
        clock.advance(0.1)
    clock.advance(60)
    sampler.tick()
    said = [r for r in caplog.records if r.getMessage().startswith("decoding a sample failed")]
    assert [r.getMessage() for r in said] == [
        "decoding a sample failed (seq 1)",
        "decoding a sample failed (seq 51) (49 more since the last such line)",
    ]
    assert all(r.exc_info is not None for r in said)  # each with its traceback
    assert sampler.snapshot.counters.read_errors[("decode", "ValueError")] == 51  # every one counted
