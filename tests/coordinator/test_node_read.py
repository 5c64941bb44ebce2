"""A node's reads as the export takes them: boots joined into one set of columns, channel rows back to their
samples, and a domain sampled with the node's one GPU sharing that GPU's columns."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.frames import T0, S, frame_of
from sparkwatch.coordinator.boot_reads import BootRead
from sparkwatch.core.domains import gate_util, gated_track
from sparkwatch.core.tracks import GpuTrack
from sparkwatch.sources.node_read import join_reads
from sparkwatch.store.rows import samples_of_rows
from sparkwatch.store.sample_block import from_frames
from sparkwatch.wire import SampleFrame


def frame(seq: int, boot: str, gpus: list[str], channels: list[str]) -> SampleFrame:
    values = [
        {"index": k, "uuid": uuid, "power_w": 10.0 * k + seq, "energy_j": float(seq), "util_ratio": 0.5}
        for k, uuid in enumerate(gpus)
    ]
    sensors = [
        {"sensor": name, "kind": "system", "source": f"hwmon:{boot}", "power_w": 50.0 + seq}
        for name in channels
    ]
    return frame_of(
        seq, values, used_bytes=1000 + seq, page_cache_bytes=500 + seq, boot=boot, sensors=sensors
    )


def boot_read(frames: list[SampleFrame], shift_ns: int) -> BootRead:
    """A boot's read as read_boot makes it, placed by a plain shift (a one-GPU boot's GPU rows and samples
    share their times, as read_boot has them)."""
    block = from_frames(frames)
    gpu, memory = block.gpu_rows(), block.mem_rows()
    memory_t = memory.t_mono_ns + shift_ns
    gpu_t = memory_t if gpu.t_mono_ns is memory.t_mono_ns else gpu.t_mono_ns + shift_ns
    return BootRead(
        gpu=gpu,
        gpu_t_ns=gpu_t,
        memory=memory,
        memory_t_ns=memory_t,
        sensors=block.sensor_rows(),
        signals=block.signal_rows(gpu),
        signal_t_ns=gpu_t,
        fit=None,
        steps=[],
    )


def test_boots_join_into_one_read_with_channels_numbered_as_first_streamed() -> None:
    """Three boots: one GPU with two channels, two GPUs with other channels (one sample with none), one GPU
    with a channel seen before. Columns are the boots' one after another, channels numbered in the order the
    node first streamed them, and each row still names its own channel and sample."""
    boots = [
        [frame(s, "a", ["GPU-x"], ["sys_total", "cpu"]) for s in range(1, 6)],
        [frame(s, "b", ["GPU-x", "GPU-y"], [] if s == 2 else ["dc", "sys_total"]) for s in range(1, 5)],
        [frame(s, "c", ["GPU-x"], ["cpu"]) for s in range(1, 4)],
    ]
    reads = [boot_read(frames, k * 100 * S) for k, frames in enumerate(boots)]
    expected_gpu_t = np.concatenate([r.gpu_t_ns for r in reads])
    expected_memory_t = np.concatenate([r.memory_t_ns for r in reads])
    rows = [(r.sensors.text(0).tolist(), r.sensors.text(2).tolist()) for r in reads]
    row_samples = np.concatenate(
        [
            np.repeat(np.arange(len(r.memory_t_ns)), r.sensors.counts)
            + sum(len(x.memory_t_ns) for x in reads[:k])
            for k, r in enumerate(reads)
        ]
    )
    read = join_reads(reads)
    assert reads == []  # handed over, each boot's columns let go as they were joined
    assert read.samples == (5, 4, 3) and read.gpu_rows == (5, 8, 3)
    assert read.gpu_t_ns.tolist() == expected_gpu_t.tolist()
    assert read.memory_t_ns.tolist() == expected_memory_t.tolist()
    assert read.gpu_uuid.tolist() == ["GPU-x"] * 5 + ["GPU-x", "GPU-y"] * 4 + ["GPU-x"] * 3
    assert [c[0] for c in read.channels] == ["sys_total", "cpu", "dc", "sys_total", "cpu"]
    assert [c[2] for c in read.channels] == ["hwmon:a", "hwmon:a", "hwmon:b", "hwmon:b", "hwmon:c"]
    named = [(read.channels[c][0], read.channels[c][2]) for c in read.sensor_channel.tolist()]
    assert named == [pair for names, sources in rows for pair in zip(names, sources, strict=True)]
    every = np.arange(len(read.sensor_channel))
    assert read.sensor_samples(every).tolist() == row_samples.tolist()
    assert read.used_bytes.tolist() == [1000.0 + s for frames in boots for s in range(1, len(frames) + 1)]
    assert read.page_cache_bytes.tolist() == [
        500.0 + s for frames in boots for s in range(1, len(frames) + 1)
    ]


def test_one_boot_is_read_as_it_is() -> None:
    reads = [boot_read([frame(s, "a", ["GPU-x"], ["sys_total"]) for s in range(1, 4)], 0)]
    gpu_t, power = reads[0].gpu_t_ns, reads[0].gpu.power_w
    read = join_reads(reads)
    assert read.gpu_t_ns is gpu_t and read.memory_t_ns is gpu_t and read.power_w is power


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=30), st.data())
def test_rows_find_their_samples_with_empty_samples_among_them(
    counts: list[int], data: st.DataObject
) -> None:
    every = np.repeat(np.arange(len(counts)), counts)
    rows = np.array(
        data.draw(st.lists(st.integers(0, max(len(every) - 1, 0)), max_size=20 if len(every) else 0)),
        dtype=np.int64,
    )
    assert samples_of_rows(np.array(counts, dtype=np.int32), rows).tolist() == every[rows].tolist()


def gpu_track(t_ns: list[int], util: list[float], interval_s: float = 0.1) -> GpuTrack:
    n = len(t_ns)
    return GpuTrack.from_arrays(
        np.array(t_ns, np.int64),
        np.zeros(n, np.int64),
        np.full(n, interval_s),
        power_w=np.full(n, 30.0),
        energy_j=np.arange(n, dtype=np.float64),
        util_ratio=np.array(util),
    )


def test_a_domain_at_the_gpus_own_samples_shares_its_columns_and_gates_alike() -> None:
    """Sampled at the GPU's own times, a domain takes the GPU's columns (its gate there is the GPU's own
    utilisation, unknown ones included); with a time repeated or another interval it gets its own, and
    either way the gate is what gate_util gives."""
    util = [0.0, 0.9, float("nan"), 0.6, 0.2]
    t = [T0 + k * S // 10 for k in range(5)]
    power, energy = np.full(5, 80.0), np.full(5, np.nan)
    cases = [
        ([gpu_track(t, util)], t, 0.1, True),
        ([gpu_track(t, util)], t, 0.2, False),  # another gap limit
        ([gpu_track([*t[:2], t[1], *t[3:]], util)], [*t[:2], t[1], *t[3:]], 0.1, False),  # a time twice
        ([gpu_track(t, util), gpu_track(t, util[::-1])], t, 0.1, False),  # two GPUs: the busier gates
    ]
    for gpus, times, interval_s, shared in cases:
        t_ns = np.array(times, np.int64)
        track = gated_track(t_ns, np.zeros(5, np.int64), np.full(5, interval_s), power, energy, gpus=gpus)
        np.testing.assert_array_equal(track.util_ratio, gate_util(gpus, t_ns))
        assert (track.util_ratio is gpus[0].util_ratio) is shared
        assert track.power_w.tolist() == power.tolist()
