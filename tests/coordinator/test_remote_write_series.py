"""Remote write sends what the agent's /metrics shows: one real agent sample (the sampler on the simulated
GB10 with its spbm sensors, on a scripted discrete two-GPU NVML, and on a GPU that was lost) goes to the
agent's real collector and, as its stream frame and hello, through the coordinator's mapping; every series
the mapping makes is the collector's, with the same labels and value, and the collector's series the
mapping leaves out are exactly the agent process's own counters, which the stream does not carry."""

from __future__ import annotations

import itertools
import math
import struct
from typing import Any

import pytest

from doubles.nvml_fake import GPU_IS_LOST, FakeGpu, FakeNvml
from helpers.frames import T0, S, sample_frame
from sparkwatch.coordinator.remote_write.batch import BACKWARD_TOLERANCE_MS, Entry, Stamped, group, rising_ms
from sparkwatch.coordinator.remote_write.proto import Messages
from sparkwatch.coordinator.remote_write.series import NAME, STALE_NAN, HelloSeries, Key, frame_series
from sparkwatch.core.clock import ClockOffset
from sparkwatch.wire import SampleFrame, decode_lines
from sparkwatch_agent.hardware.host_facts import HostFacts
from sparkwatch_agent.hardware.meminfo import parse_meminfo
from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
from sparkwatch_agent.hardware.readings import HostMemory, StatusReading
from sparkwatch_agent.hardware.sim import SimGb10, SimMeminfoReader, SimNvml, SimSpbm
from sparkwatch_agent.sampling.clocks import Clocks
from sparkwatch_agent.sampling.leases import IntervalLeases
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sample import encode_sample
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.serving.hello import hello_frame
from sparkwatch_agent.serving.metrics import make_registry

#: On the agent's /metrics, not in its stream: counters of the agent process, and whether its GPU answers.
NOT_IN_THE_STREAM = {
    "sparkwatch_agent_samples_total",
    "sparkwatch_agent_read_errors_total",
    "sparkwatch_agent_dropped_samples_total",
    "sparkwatch_agent_late_ticks_total",
    "sparkwatch_agent_gpu_reinit_total",
    "sparkwatch_agent_gpu_up",
}
#: The stream carries the read duration rounded to 0.1 µs (sampling/sample.py); /metrics shows it whole.
ROUNDED = {"sparkwatch_agent_sample_duration_seconds": 1e-7}
HOST = HostFacts("host", "cpu", 4, "aarch64", "linux", "6.8")


class Clock:
    def __init__(self) -> None:
        self.mono, self.wall = 1_000_000_000, 1_800_000_000_123_456_789

    def clocks(self) -> Clocks:
        return Clocks(wall_ns=lambda: self.wall, mono_ns=lambda: self.mono)


class StaticMemory:
    def capture(self) -> bytes:
        return b"MemTotal: 125000000 kB\nMemFree: 100 kB\nMemAvailable: 100000000 kB\nCached: 5 kB\n"

    def decode(self, raw: bytes) -> HostMemory:
        return parse_meminfo(raw)

    def close(self) -> None:
        return None


class SpbmWithStatus(SimSpbm):
    """The simulated spbm, with the status values a real spbm driver gives (the sim has none)."""

    def decode_status(self, captured: Any) -> tuple[StatusReading, ...]:
        return (StatusReading("prochot", "hwmon:spbm", 0), StatusReading("pl_level", "hwmon:spbm", 2))


def make_sampler(gpu: NvmlBackend, clock: Clock | None = None) -> Sampler:
    return Sampler(
        node="spark-7",
        boot_id="b00t",
        gpu=gpu,
        memory=StaticMemory(),
        sensors=None,
        leases=IntervalLeases(0.1),
        ring=SampleRing(10, encode=encode_sample),
        clocks=(clock or Clock()).clocks(),
    )


def collector_series(snap: Snapshot) -> dict[Key, float]:
    """What the agent's /metrics shows for this snapshot, keyed as remote write keys its series (scraped as
    its sample is taken: a sample older than the health limit has its hardware series left out)."""
    out: dict[Key, float] = {}
    now_ns = snap.sample.t_mono_ns if snap.sample is not None else 0
    for family in make_registry(lambda: snap, lambda: now_ns).collect():
        for s in family.samples:
            out[((NAME, s.name), *sorted(s.labels.items()))] = s.value
    return out


def mapped_series(sampler: Sampler, coordinator_name: str = "node-a") -> tuple[dict[Key, float], int]:
    """The newest sample as the coordinator gets it (its frame, decoded by wire.py, and the stream's
    hello), through the remote-write mapping: each series' value and the sample's time in ms."""
    snap = sampler.snapshot
    hello = hello_frame(snap, HOST)
    frames, rejected = decode_lines(sampler.ring.after(snap.sample.seq - 1, 1).frames[0].decode())  # type: ignore[union-attr]
    assert rejected == [] and len(frames) == 1 and isinstance(frames[0], SampleFrame)
    grouped, unreadable = group([Entry(coordinator_name, hello, frames)])  # type: ignore[list-item]
    assert unreadable == 0
    values: dict[Key, float] = {}
    times = set()
    for key, (t_ms, v) in grouped.items():
        assert len(t_ms) == len(v) == 1, key
        values[key] = v[0]
        times.add(t_ms[0])
    (t_ms,) = times
    return values, t_ms


def assert_same(sampler: Sampler) -> dict[Key, float]:
    mine, t_ms = mapped_series(sampler)
    agents = collector_series(sampler.snapshot)
    assert t_ms == sampler.snapshot.sample.t_wall_ns // 1_000_000  # type: ignore[union-attr]
    for key, value in mine.items():
        assert key in agents, f"not on the agent's /metrics: {key}"
        assert value == pytest.approx(agents[key], abs=ROUNDED.get(key[0][1], 0.0), rel=0), key
    left_out = {k[0][1] for k in set(agents) - set(mine)}
    assert left_out <= NOT_IN_THE_STREAM, left_out
    for key in mine:  # remote write asks for labels sorted by name, __name__ first
        names = [n for n, _ in key]
        assert names[0] == NAME and names[1:] == sorted(names[1:])
    return mine


def names(series: dict[Key, float]) -> set[str]:
    return {k[0][1] for k in series}


def test_a_simulated_gb10_with_sensors_and_a_throttle() -> None:
    clock = Clock()
    sim = SimGb10("spark-7", lambda: clock.mono)
    s = Sampler(
        node="spark-7",
        boot_id="b00t",
        gpu=NvmlBackend(lib=SimNvml(sim), name="sim", simulated=True),
        memory=SimMeminfoReader(sim),
        sensors=SpbmWithStatus(sim),
        leases=IntervalLeases(0.1),
        ring=SampleRing(10, encode=encode_sample),
        clocks=clock.clocks(),
    )
    sim.set_load(util_ratio=0.6, model_bytes=10 * 2**30)
    sim.set_throttle(0x4 | 0x20, sm_clock_mhz=900)
    s.tick()
    clock.mono += 100_000_000
    clock.wall += 100_000_000
    s.tick()
    mine = assert_same(s)
    assert {
        "sparkwatch_gpu_power_watts",
        "sparkwatch_gpu_energy_joules_total",
        "sparkwatch_gpu_clock_event_active",
        "sparkwatch_memory_used_bytes",
        "sparkwatch_sensor_power_watts",
        "sparkwatch_sensor_energy_joules_total",
        "sparkwatch_sensor_status",
        "sparkwatch_gpu_info",
        "sparkwatch_field_supported",
        "sparkwatch_agent_info",
        "sparkwatch_agent_last_sample_timestamp_seconds",
    } <= names(mine)
    # unknown stays absent: GB10 has no device memory figures (never 0)
    assert "sparkwatch_gpu_memory_used_bytes" not in names(mine)
    active = {dict(k)["reason"]: v for k, v in mine.items() if k[0][1] == "sparkwatch_gpu_clock_event_active"}
    assert active["sw_power_cap"] == active["sw_thermal"] == 1.0 and active["gpu_idle"] == 0.0
    # the agent's own name labels the series, not the coordinator's entry for it
    assert {dict(k)["node"] for k in mine} == {"spark-7"}


def test_a_discrete_two_gpu_node() -> None:
    lib = FakeNvml(
        [
            FakeGpu(
                name="NVIDIA H100",
                uuid="GPU-a",
                mem_total=80 << 30,
                mem_used=3 << 30,
                limit_mw=700_000,
                mem_util=12,
                clock_events=0x1,
            ),
            FakeGpu(
                name="NVIDIA H100",
                uuid="GPU-b",
                mem_total=80 << 30,
                mem_used=5 << 30,
                limit_mw=700_000,
                power_mw=350_500,
                util=97,
                clock_events=0x4,
            ),
        ]
    )
    s = make_sampler(NvmlBackend(lib=lib))
    s.tick()
    mine = assert_same(s)
    used = {dict(k)["uuid"]: v for k, v in mine.items() if k[0][1] == "sparkwatch_gpu_memory_used_bytes"}
    assert used == {"GPU-a": float(3 << 30), "GPU-b": float(5 << 30)}
    assert "sparkwatch_sensor_power_watts" not in names(mine)  # no sensors: none sent


def test_a_lost_gpu_sends_no_gpu_series() -> None:
    lib = FakeNvml([FakeGpu()])
    s = make_sampler(NvmlBackend(lib=lib))
    s.tick()
    lib.errors["nvmlDeviceGetPowerUsage"] = GPU_IS_LOST
    lib.errors["nvmlDeviceGetHandleByIndex"] = GPU_IS_LOST
    s.tick()
    assert not s.snapshot.gpu_ok
    mine = assert_same(s)
    assert not any(n.startswith(("sparkwatch_gpu_", "sparkwatch_field_")) for n in names(mine))
    assert "sparkwatch_memory_used_bytes" in names(mine)


def test_one_series_per_label_set_across_a_batch_in_time_order() -> None:
    clock = Clock()
    s = make_sampler(NvmlBackend(lib=FakeNvml([FakeGpu()])), clock=clock)
    for _ in range(5):
        s.tick()
        clock.mono += 100_000_000
        clock.wall += 100_000_000
    hello = hello_frame(s.snapshot, HOST)
    frames, _ = decode_lines(b"\n".join(s.ring.after(0, 10).frames).decode())
    grouped, _ = group([Entry("n", hello, frames[:2]), Entry("n", hello, frames[2:])])  # type: ignore[arg-type]
    power = next(v for k, v in grouped.items() if k[0][1] == "sparkwatch_gpu_power_watts")
    assert len(power[0]) == 5 and all(a + 100 == b for a, b in itertools.pairwise(power[0]))
    assert all(len(t) == 5 for t, _ in grouped.values())  # every series once, with all five samples


def test_a_channel_from_an_agent_older_than_the_source_label_is_sent_as_the_store_records_it() -> None:
    """An older agent's channel has no ``source``: the store records it as ``hwmon``, and remote write sends
    that (never an empty label, which some receivers refuse)."""
    data = {"t_wall_ns": 1, "sensors": [{"sensor": "sys_total", "kind": "system", "power_w": 90.0}]}
    (labels,) = [dict(k) for k, _ in frame_series(data, HelloSeries.of("n1", None)) if "sensor" in dict(k)]
    assert labels == {
        NAME: "sparkwatch_sensor_power_watts",
        "kind": "system",
        "node": "n1",
        "sensor": "sys_total",
        "source": "hwmon",
    }


def _power_stamps_ms(entry: Entry) -> list[int]:
    grouped, _ = group([entry])
    return next(t for k, (t, _) in grouped.items() if k[0][1] == "sparkwatch_gpu_power_watts")


def test_samples_are_stamped_on_the_coordinators_clock_by_the_links_estimate() -> None:
    """The monotonic offset where the estimate has one (an agent whose wall clock stepped back 2 s between
    two samples still gets rising stamps, where its own would be refused as out of order), else the wall
    offset; the agent's own wall time only before any estimate."""
    frames = [sample_frame(seq, {"power_w": 50.0}) for seq in (1, 2, 3)]
    stepped = frames[2]._replace(t_wall_ns=frames[2].t_wall_ns - 2 * S)  # its wall clock stepped back
    wall = [f.t_wall_ns // 1_000_000 for f in frames]
    assert _power_stamps_ms(Entry("n1", None, frames)) == wall
    by_wall = ClockOffset(offset_ns=-4 * S, uncertainty_ns=100, probes_used=3, probes_total=4)
    assert _power_stamps_ms(Entry("n1", None, frames, by_wall)) == [t - 4000 for t in wall]
    by_mono = ClockOffset(-4 * S, 100, 3, 4, mono_offset_ns=T0 - 4 * S + 250_000_000)
    expected = [(T0 - 4 * S + 250_000_000 + f.t_mono_ns) // 1_000_000 for f in frames]
    assert _power_stamps_ms(Entry("n1", None, [*frames[:2], stepped], by_mono)) == expected
    assert expected == [t - 4000 + 250 for t in wall]  # 100 ms apart and rising, through the step


def test_a_nodes_stamps_keep_rising_across_estimates_and_batches() -> None:
    """A later estimate that puts a sample at or before the node's last stamp (by less than the tolerance)
    sends it 1 ms after that stamp, within a batch and across batches; a step back beyond the tolerance
    (the coordinator's own clock) is sent as it is, for the receiver to refuse."""
    frames = [sample_frame(seq, {"power_w": 50.0}) for seq in (1, 2, 3, 4)]
    wall_ms = [f.t_wall_ns // 1_000_000 for f in frames]  # 100 ms apart
    first = ClockOffset(offset_ns=0, uncertainty_ns=1, probes_used=3, probes_total=4)
    back = ClockOffset(offset_ns=-150_000_000, uncertainty_ns=1, probes_used=3, probes_total=4)
    last: dict[str, int] = {}
    grouped, _ = group([Entry("n1", None, frames[:2], first), Entry("n1", None, frames[2:3], back)], last)
    power = next(t for k, (t, _) in grouped.items() if k[0][1] == "sparkwatch_gpu_power_watts")
    assert power == [wall_ms[0], wall_ms[1], wall_ms[1] + 1]  # 150 ms back from 100 ms after: moved
    assert last == {"n1": wall_ms[1] + 1}
    grouped, _ = group([Entry("n1", None, frames[3:], back), Entry("n2", None, frames[:1], back)], last)
    power_series = [(k, t) for k, (t, _) in grouped.items() if k[0][1] == "sparkwatch_gpu_power_watts"]
    stamps = {dict(k[1:])["node"]: t for k, t in power_series}  # without a hello, the coordinator's name
    assert stamps == {"n1": [wall_ms[3] - 150], "n2": [wall_ms[0] - 150]}  # after n1's last; n2 has none
    assert rising_ms(1000, 1000) == 1001 and rising_ms(999, 1000) == 1001 and rising_ms(1001, 1000) == 1001
    assert rising_ms(1000 - BACKWARD_TOLERANCE_MS, 1000) == 1000 - BACKWARD_TOLERANCE_MS  # a step back: as is
    assert rising_ms(5, None) == 5


def _bits(value: float) -> int:
    return int.from_bytes(struct.pack("<d", value), "little")


def test_a_series_a_frame_no_longer_has_gets_a_staleness_marker_across_batches() -> None:
    """Instant power read in frames 1-2, unknown in 3-4 (the agent's /metrics drops the series), read again
    in 5: the written series ends with Prometheus' stale NaN at frame 3's stamp, also when frame 3 comes in
    the next batch, and goes on at frame 5; what every frame has gets no marker. The marker's bits survive
    the WriteRequest."""
    frames = [
        sample_frame(seq, {"power_w": 50.0, **({} if seq in (3, 4) else {"power_instant_w": 51.0})})
        for seq in (1, 2, 3, 4, 5)
    ]
    stamps = [f.t_wall_ns // 1_000_000 for f in frames]
    last_ms: dict[str, int] = {}
    last_series: dict[str, list[Key]] = {}
    batches = [group([Entry("n1", None, part)], last_ms, last_series)[0] for part in (frames[:2], frames[2:])]

    def sent(metric: str) -> list[tuple[int, int]]:
        return [
            (t, _bits(v))
            for b in batches
            for k, (ts, vs) in b.items()
            if k[0][1] == metric
            for t, v in zip(ts, vs, strict=True)
        ]

    assert math.isnan(STALE_NAN) and _bits(STALE_NAN) == 0x7FF0000000000002
    assert sent("sparkwatch_gpu_power_instant_watts") == [
        (stamps[0], _bits(51.0)),
        (stamps[1], _bits(51.0)),
        (stamps[2], 0x7FF0000000000002),
        (stamps[4], _bits(51.0)),
    ]
    assert [t for t, _ in sent("sparkwatch_gpu_power_watts")] == stamps  # never stale
    request = Messages().decode(Messages().encode(batches[1]))
    values = [s.value for ts in request.timeseries for s in ts.samples]
    assert [_bits(v) for v in values if math.isnan(v)] == [0x7FF0000000000002]


def test_a_stream_that_stops_marks_its_last_series_stale_and_what_resumes_comes_after() -> None:
    """The link lost its agent after frame 2: every series frame 2 had gets the stale NaN 1 ms after frame
    2's stamp (a receiver would otherwise answer frame 2's values for 5 min); a second end sends nothing
    more; the frames a resumed link then brings from the agent's buffer (3, 4) come after the marker, in
    order, and go on without one."""
    frames = [sample_frame(seq, {"power_w": 50.0 + seq}) for seq in (1, 2, 3, 4)]
    stamps = [f.t_wall_ns // 1_000_000 for f in frames]
    last_ms: dict[Stamped, int] = {}
    last_series: dict[Stamped, list[Key]] = {}
    first, _ = group([Entry("n1", None, frames[:2])], last_ms, last_series)
    ended, _ = group(
        [Entry("n1", None, (), ended="n1"), Entry("n1", None, (), ended="n1")], last_ms, last_series
    )
    resumed, _ = group([Entry("n1", None, frames[2:])], last_ms, last_series)
    assert set(ended) == set(first) and len(first) > 3  # every series the last frame had, no other
    for series, (ts, vs) in ended.items():
        assert ts == [stamps[1] + 1] and [_bits(v) for v in vs] == [0x7FF0000000000002], series
    power = next(k for k in resumed if k[0][1] == "sparkwatch_gpu_power_watts")
    assert resumed[power] == ([stamps[2], stamps[3]], [53.0, 54.0])
    assert all(not any(math.isnan(v) for v in vs) for _, vs in resumed.values())
    assert group([Entry("n9", None, (), ended="n9")], last_ms, last_series)[0] == {}  # never sent: nothing
