"""A node's power channels beside its GPUs, from a TSDB: the agent's hwmon channels and the wall meters the
coordinator polled and remote-wrote, as the core's system domains, built as the store's are."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sparkwatch.core.domains import DomainInput, gated_track
from sparkwatch.core.tracks import GpuTrack
from sparkwatch.sources.prometheus.align import (
    PICK_SPARKWATCH,
    local_interval,
    nominal_interval,
    single,
    union_times,
    values_at,
)
from sparkwatch.sources.prometheus.raw import RawSeries
from sparkwatch.wire import LEGACY_SENSOR_SOURCE

#: Series by the channel (or meter domain) they belong to.
ByChannel = Mapping[str, Sequence[RawSeries]]


def sensor_domains(
    power: ByChannel,
    energy: ByChannel,
    labels: Sequence[str],
    gpus: Sequence[GpuTrack],
    said: RawSeries | None = None,
) -> list[DomainInput]:
    """One domain per channel name in the order they were first scraped, its kind and source from its
    latest series' ``labels`` (the nodes label, kind, source); ΔE/Δt where it has a counter, else the
    trapezoid, gated by the node's GPU utilisation at each scrape, as the store's are. A channel's metric in
    two series at once is refused (align.single)."""
    node_label, kind_label, source_label = labels
    names = set(power) | set(energy)
    found = {name: [*power.get(name, ()), *energy.get(name, ())] for name in names}
    first_scraped = {name: min(int(r.t_ns[0]) for r in rs) for name, rs in found.items()}
    domains = []
    for name in sorted(names, key=lambda n: (first_scraped[n], n)):
        t = union_times([r.t_ns for r in found[name]])
        # a channel whose kind or source changed has several series: one track
        watts, joules = (
            values_at(
                t,
                single(part[name], f"channel {name!r}", node_label, PICK_SPARKWATCH)
                if name in part
                else None,
            )
            for part in (power, energy)
        )
        latest = max(found[name], key=lambda r: int(r.t_ns[-1])).labels
        zeros = np.zeros(len(t), dtype=np.int64)
        # judged against the agent's own interval where the engine holds it, as its GPU tracks are: the
        # spacing around each sample took a restarted agent's first idle second among 0.1 s ones for a gap
        track = gated_track(t, zeros, nominal_interval(t, said), watts, joules, gpus=gpus)
        # series written before the source label (older agents and coordinators): as the store has them
        kind, source = latest.get(kind_label, ""), latest.get(source_label) or LEGACY_SENSOR_SOURCE
        domains.append(DomainInput(name, kind, source, track))
    return domains


def meter_domains(
    power: ByChannel,
    intervals: ByChannel,
    labels: Sequence[str],
    gpus: Sequence[GpuTrack],
    failed: ByChannel | None = None,
) -> list[DomainInput]:
    """One domain per meter domain, by name (as the store lists them): power by the trapezoid (a meter's
    own counter is not integrated, as from the store), gated by the node's GPU utilisation at each
    reading. A gap is read against the poll interval sent with each remote-written reading, else against
    the readings' median spacing (a scraped coordinator's, a scrape apart; or an older coordinator's).
    The readings break where the meter's failed-poll count (``failed``) changed between them, as SQLite's
    break at each failed poll (a count unknown at a reading breaks there too; none at all: no break).
    ``labels``: the nodes label and the source label. A meter's metric in two series at once (its readings
    remote-written and scraped) is refused (align.single)."""
    node_label, source_label = labels
    domains = []
    for name, rs in sorted(power.items()):
        what = f"meter domain {name!r}"
        watts = single(rs, what, node_label, PICK_SPARKWATCH)
        t = watts.t_ns
        source = max(rs, key=lambda r: int(r.t_ns[-1])).labels.get(source_label) or "meter"
        sent = values_at(
            t, single(intervals[name], what, node_label, PICK_SPARKWATCH) if name in intervals else None
        )
        interval = np.where(np.isfinite(sent) & (sent > 0), sent, local_interval(t))
        unused = np.full(len(t), np.nan)
        apart = np.zeros(len(t), dtype=np.int64)
        if failed and name in failed:
            count = values_at(t, single(failed[name], what, node_label, PICK_SPARKWATCH))
            with np.errstate(invalid="ignore"):
                moved = ~(count[1:] == count[:-1])  # a change, or NaN: no interval across it
            apart[1:] = np.cumsum(moved)
        track = gated_track(t, apart, interval, watts.values, unused, gpus=gpus)
        reading_s = float(np.median(interval)) if len(interval) else None  # no refresh period in a TSDB
        domains.append(DomainInput(name, "system", source, track, reading_s=reading_s))
    return domains
