"""A node's GPUs out of a TSDB: each GPU's power, energy and utilisation series joined on the scrape times
they share into the core's :class:`GpuTrack` (a value missing at a time is unknown there, never held), in
the GPUs' index order."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from sparkwatch.core.tracks import GpuTrack
from sparkwatch.sources.prometheus.align import nominal_interval, union_times, values_at
from sparkwatch.sources.prometheus.raw import RawSeries, refuse_outside

#: A metric's one series per GPU, by the GPU's key (its UUID label).
ByGpu = Mapping[str, RawSeries]


def gpu_tracks(
    power: ByGpu, energy: ByGpu, util: ByGpu, said: RawSeries | None = None
) -> list[tuple[str, GpuTrack]]:
    """Each GPU that has power or energy series, with its track on the union of their scrape times; ``said``:
    the node's sampling interval as the agent gave it (align.nominal_interval), where the engine has it."""
    # 1 % above 1 is slack for an exporter's rounding (not seen, not ruled out); a percentage is far above
    refuse_outside(util.values(), 0.0, 1.01, "the gate reads a ratio (a percentage? check --metrics)")
    out = []
    for key in sorted({*power, *energy}, key=_gpu_order(power)):
        parts = [x for x in (power.get(key), energy.get(key)) if x is not None]
        t = union_times([p.t_ns for p in parts])
        track = GpuTrack.from_arrays(
            t,
            np.zeros(len(t), dtype=np.int64),
            nominal_interval(t, said),
            power_w=values_at(t, power.get(key)),
            energy_j=values_at(t, energy.get(key)),
            util_ratio=values_at(t, util.get(key)),
        )
        out.append((key, track))
    return out


def _gpu_order(power: ByGpu) -> Callable[[str], tuple[int, str]]:
    """GPUs in index order where the series carry a ``gpu`` index, else by key."""

    def order(key: str) -> tuple[int, str]:
        index = power[key].labels.get("gpu", "") if key in power else ""
        return (int(index), key) if index.isdigit() else (1 << 30, key)

    return order
