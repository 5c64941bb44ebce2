"""What waits to be sent and how a batch of it becomes series: queue entries hold the stored frames as the
link handed them over (nothing is parsed on the ingest path); a batch parses each frame's JSON line once,
maps it to the agent's series and groups the samples per series in time order.

Samples are stamped on the coordinator's clock (the link's clock estimate for the boot, as the SQLite
export corrects them), not the agent's: windows are posted on the coordinator's clock, and an agent's wall
clock may be seconds off, or step back (which a receiver would refuse as out of order)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from sparkwatch.coordinator.remote_write.series import HelloSeries, Key, frame_series
from sparkwatch.core.clock import ClockOffset
from sparkwatch.wire import SampleFrame

#: Per series: timestamps (ms, ascending) and values, ready for the WriteRequest.
Grouped = dict[Key, tuple[list[int], list[float]]]


class Entry(NamedTuple):
    """One flush of one node's link: the frames the store took, with the hello of their stream."""

    node: str  # the coordinator's name for the node (the agent's own name labels the series)
    hello: Mapping[str, Any] | None
    frames: Sequence[SampleFrame]
    offset: ClockOffset | None = None  # the link's latest estimate for their boot; None: none taken yet


def group(entries: Iterable[Entry]) -> tuple[Grouped, int]:
    """The batch's series and how many frames could not be read back (a JSON line that the store's decoder
    took but orjson refuses, say a number no double holds): those are left out and counted."""
    grouped: Grouped = {}
    unreadable = 0
    for entry in entries:
        hello = HelloSeries.of(entry.node, entry.hello)
        for frame in entry.frames:
            try:
                data = orjson.loads(frame.raw)
            except orjson.JSONDecodeError:
                unreadable += 1
                continue
            t_ms = coordinator_ns(frame, entry.offset) // 1_000_000
            for series, value in frame_series(data, hello):
                pair = grouped.get(series)
                if pair is None:
                    pair = grouped[series] = ([], [])
                pair[0].append(t_ms)
                pair[1].append(value)
    return grouped, unreadable


def coordinator_ns(frame: SampleFrame, offset: ClockOffset | None) -> int:
    """The frame's time on the coordinator's clock; before the link's first clock probe (a link always
    probes before it streams), the agent's own wall time."""
    return frame.t_wall_ns if offset is None else offset.to_coordinator_ns(frame.t_wall_ns, frame.t_mono_ns)
