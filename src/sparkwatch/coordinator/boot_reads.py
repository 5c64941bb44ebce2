"""One agent boot's samples of a run, on the coordinator's clock: placed by the boot's monotonic clock and
the line fitted to its probe rounds, or — for a boot stored before monotonic offsets were kept — by its
wall clock and the interpolated wall offsets; with the wall-clock steps seen on the way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sparkwatch.core.clock import (
    ClockStep,
    MonoFit,
    OffsetRound,
    fit_monotonic,
    to_coordinator_ns,
    wall_steps,
)
from sparkwatch.core.tracks import I64
from sparkwatch.store.rows import GpuRows, MemRows, SensorRows, SignalRows
from sparkwatch.store.sample_reads import BootSamples


@dataclass(frozen=True, slots=True)
class BootRead:
    gpu: GpuRows
    gpu_t_ns: I64  # coordinator time of each GPU row
    memory: MemRows
    memory_t_ns: I64  # coordinator time of each sample
    sensors: SensorRows  # a row's time is its sample's
    signals: SignalRows
    signal_t_ns: I64  # coordinator time of each signal row
    fit: MonoFit | None  # None: placed by the wall offsets
    steps: list[ClockStep]


def read_boot(
    samples: BootSamples, rounds: Sequence[OffsetRound], t_from_ns: int, t_to_ns: int, next_within_ns: int = 0
) -> BootRead:
    """The boot's samples taken between coordinator times ``t_from_ns`` and ``t_to_ns``, and with
    ``next_within_ns`` the first one after, at most that much later (placed by the monotonic clock)."""
    fit = fit_monotonic(rounds)
    if fit is not None:
        block = samples.read("t_mono_ns", fit.to_mono(t_from_ns), fit.to_mono(t_to_ns), next_within_ns)
    else:
        shift = int(np.median([r.offset_ns for r in rounds]))
        block = samples.read("t_wall_ns", t_from_ns - shift, t_to_ns - shift)
    gpu = block.gpu_rows()
    memory = block.mem_rows()
    sensors = block.sensor_rows()
    signals = block.signal_rows(gpu)

    def place(rows: GpuRows | MemRows) -> I64:
        if len(rows.t_mono_ns) == 0:
            return rows.t_mono_ns
        if fit is not None:
            return fit.to_coordinator(rows.t_mono_ns)
        return to_coordinator_ns(rows.t_wall_ns, rounds)

    memory_t = place(memory)
    gpu_t = memory_t if gpu.t_mono_ns is memory.t_mono_ns else place(gpu)  # one GPU: the sample times
    return BootRead(
        gpu=gpu,
        gpu_t_ns=gpu_t,
        memory=memory,
        memory_t_ns=memory_t,
        sensors=sensors,
        signals=signals,
        signal_t_ns=gpu_t,  # a GPU's clock signals are columns of its GPU rows: the same times
        fit=fit,
        steps=wall_steps(memory.t_wall_ns, memory.t_mono_ns, memory_t),
    )
