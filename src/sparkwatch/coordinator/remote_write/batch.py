"""What waits to be sent and how a batch of it becomes series: queue entries hold the stored frames as the
link handed them over (nothing is parsed on the ingest path); a batch parses each frame's JSON line once,
maps it to the agent's series and groups the samples per series in time order.

Samples are stamped on the coordinator's clock (the link's clock estimate for the boot, as the SQLite
export corrects them), not the agent's: windows are posted on the coordinator's clock, and an agent's wall
clock may be seconds off, or step back (which a receiver would refuse as out of order). Two estimates of
one node differ by their round trips, so a node's stamps are kept rising (:func:`rising_ms`). A wall meter's
readings (meters.py) are on the coordinator's clock already: each meter's stamps are kept rising the same
way."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import orjson

from sparkwatch.coordinator.remote_write.meters import meter_series
from sparkwatch.coordinator.remote_write.series import STALE_NAN, HelloSeries, Key, frame_series
from sparkwatch.core.clock import ClockOffset
from sparkwatch.store.meters import MeterReading
from sparkwatch.wire import SampleFrame

#: Per series: timestamps (ms, ascending) and values, ready for the WriteRequest.
Grouped = dict[Key, tuple[list[int], list[float]]]
#: Whose stamps are kept rising: a node's samples (its name), or one of its meters (node, domain).
Stamped = str | tuple[str, str]


class HeldFrame(Protocol):
    """What a batch reads of a stored sample: its JSON line and its two stamps."""

    @property
    def raw(self) -> str: ...

    @property
    def t_wall_ns(self) -> int: ...

    @property
    def t_mono_ns(self) -> int: ...


class Held(NamedTuple):
    """A stored sample as the queue keeps it: a :class:`SampleFrame`'s decoded values (its GPUs and sensors
    as tuples of numbers) took more room than its line, and a full queue 118 MiB for 50 000 samples,
    2.3x their lines alone (benchmarks/remote_write_queue.py)."""

    raw: str
    t_wall_ns: int
    t_mono_ns: int

    @classmethod
    def of(cls, frames: Iterable[SampleFrame]) -> list[Held]:
        return [cls(f.raw, f.t_wall_ns, f.t_mono_ns) for f in frames]


class Entry(NamedTuple):
    """One flush of one node's link: the frames the store took, with the hello of their stream; or one
    reading of the node's wall meter (``frames`` empty)."""

    #: with frames, the coordinator's name for the node (their hello names the series); with a meter's
    #: reading, the name its series carry
    node: str
    hello: Mapping[str, Any] | None
    frames: Sequence[HeldFrame]
    offset: ClockOffset | None = None  # the link's latest estimate for their boot; None: none for it
    meter: MeterReading | None = None
    meter_failed_polls: int = 0  # the meter's failed polls before ``meter`` (since the start)
    #: no samples: the node's stream (its name) or one of its meters ((name, domain)) stopped, and the series
    #: it sent last are marked stale just after their last stamp
    ended: Stamped | None = None

    @property
    def samples(self) -> int:
        """What the entry counts for in the queue: a frame or a reading is one stored sample."""
        return len(self.frames) + (self.meter is not None)


#: A stamp at most this far behind its node's last one sent is moved to just after it: two clock estimates
#: of the node that differ (each is off by up to half its probes' round trip). Further behind, the
#: coordinator's own clock stepped back: the stamp is sent as it is, and a receiver refuses it as out of
#: order (counted as rejected); squeezing every sample until the clock caught up into the milliseconds
#: after the last would misplace them all.
BACKWARD_TOLERANCE_MS = 1000


def group(
    entries: Iterable[Entry],
    last_ms: dict[Stamped, int] | None = None,
    last_series: dict[Stamped, list[Key]] | None = None,
) -> tuple[Grouped, int]:
    """The batch's series and how many frames could not be read back (a JSON line that the store's decoder
    took but orjson refuses, say a number no double holds): those are left out and counted. ``last_ms``:
    each node's (and meter's) last stamp sent; ``last_series``: the series of each node's (meter's) last
    frame (reading); both kept by the writer from batch to batch (updated here).

    A series a node's previous frame had and this one has not (a value become unknown, a sensor gone, a
    new boot's ``agent_info``) gets a staleness marker at this frame's stamp, as Prometheus writes one
    for a series a scrape no longer shows: without it a receiver keeps answering the last value for its
    lookback (5 min), where the agent's own /metrics has none. A stream that stopped (an ``ended`` entry:
    the link lost its agent, the meter stopped answering) gets one on each of its last series, 1 ms after
    its last stamp: what a resumed link sends from the agent's buffer comes after it, in order."""
    grouped: Grouped = {}
    unreadable = 0
    last_ms = {} if last_ms is None else last_ms
    last_series = {} if last_series is None else last_series
    for entry in entries:
        if entry.ended is not None:
            _add_stale(grouped, entry.ended, last_ms, last_series)
            continue
        if entry.meter is not None:
            meter = (entry.node, entry.meter.domain)
            t_ms = last_ms[meter] = rising_ms(entry.meter.t_ns // 1_000_000, last_ms.get(meter))
            series = meter_series(entry.node, entry.meter, entry.meter_failed_polls)
            _add(grouped, meter, t_ms, series, last_series)
            continue
        hello = HelloSeries.of(entry.node, entry.hello)
        for frame in entry.frames:
            try:
                data = orjson.loads(frame.raw)
            except orjson.JSONDecodeError:
                unreadable += 1
                continue
            t_ms = rising_ms(coordinator_ns(frame, entry.offset) // 1_000_000, last_ms.get(entry.node))
            last_ms[entry.node] = t_ms
            _add(grouped, entry.node, t_ms, frame_series(data, hello), last_series)
    return grouped, unreadable


class Part(NamedTuple):
    """One node's share of a batch: its series, and the stored samples they carry."""

    node: str
    series: Grouped
    samples: int


def node_parts(
    entries: Iterable[Entry], last_ms: dict[Stamped, int], last_series: dict[Stamped, list[Key]]
) -> tuple[list[Part], Grouped, int]:
    """:func:`group` node by node (each keeps its own stamps and series, so the result is the same): each
    node's part, the series of them all, and how many frames could not be read back. A part is its node's
    alone when a batch must go again node by node (sender.py)."""
    by_node: dict[str, list[Entry]] = {}
    for entry in entries:
        by_node.setdefault(entry.node, []).append(entry)
    parts: list[Part] = []
    merged: Grouped = {}
    unreadable = 0
    for node, mine in by_node.items():
        grouped, bad = group(mine, last_ms, last_series)
        unreadable += bad
        parts.append(Part(node, grouped, sum(entry.samples for entry in mine) - bad))
        for key, (stamps, values) in grouped.items():
            before = merged.get(key)  # two nodes' series of one name (misconfigured): the receiver judges
            merged[key] = (stamps, values) if before is None else (before[0] + stamps, before[1] + values)
    return parts, merged, unreadable


def _add(
    grouped: Grouped,
    who: Stamped,
    t_ms: int,
    values: list[tuple[Key, float]],
    last_series: dict[Stamped, list[Key]],
) -> None:
    """One frame's (reading's) values at ``t_ms``, and a staleness marker on each series the last one of
    ``who`` had and this one has not."""
    now = [series for series, _ in values]
    before = last_series.get(who, now)
    gone = () if before == now else _gone(before, now)  # the same series, mostly
    last_series[who] = now
    for series, value in itertools.chain(values, ((series, STALE_NAN) for series in gone)):
        pair = grouped.get(series)
        if pair is None:
            pair = grouped[series] = ([], [])
        pair[0].append(t_ms)
        pair[1].append(value)


def _add_stale(
    grouped: Grouped, who: Stamped, last_ms: dict[Stamped, int], last_series: dict[Stamped, list[Key]]
) -> None:
    """Staleness markers on the series ``who`` sent last, 1 ms after its last stamp; nothing when it sent
    none since it last stopped."""
    series = last_series.pop(who, None)
    if not series or who not in last_ms:
        return
    t_ms = last_ms[who] = last_ms[who] + 1
    _add(grouped, who, t_ms, [(s, STALE_NAN) for s in series], {})


def _gone(before: list[Key], now: list[Key]) -> list[Key]:
    """The series of ``before`` that ``now`` has not, in ``before``'s order (a request's bytes do not
    depend on hashing)."""
    present = set(now)
    return [series for series in before if series not in present]


def rising_ms(t_ms: int, last_ms: int | None) -> int:
    """``t_ms``, or 1 ms after its node's last stamp when it is not after it by less than
    :data:`BACKWARD_TOLERANCE_MS`."""
    if last_ms is not None and last_ms - BACKWARD_TOLERANCE_MS < t_ms <= last_ms:
        return last_ms + 1
    return t_ms


def coordinator_ns(frame: HeldFrame, offset: ClockOffset | None) -> int:
    """The frame's time on the coordinator's clock; without an estimate for its boot (links probe before
    they store, so only a boot the link has not probed), the agent's own wall time."""
    return frame.t_wall_ns if offset is None else offset.to_coordinator_ns(frame.t_wall_ns, frame.t_mono_ns)
