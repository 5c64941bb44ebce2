"""How often a track was sampled, and how often its energy counter moved: what its figures resolve.

A TSDB's scrapes set the first; an exporter that serves one collection to several scrapes (dcgm-exporter
collects every 30 s by default) sets the second, and a window shorter than two of those has at most one
collection's figures in it, whatever the scrape interval."""

from __future__ import annotations

import numpy as np

from sparkwatch.core.tracks import F64, I64

#: A counter whose moves are spaced this many times its samples' (median to median) or more is coarse (a
#: counter a tick late now and then is not).
COARSE_RATIO = 1.5
#: Power readings (no counter beside them) stand for collections only where their moves come at a beat:
#: at least ``RHYTHM_SPACINGS`` spacings, ``RHYTHM_SHARE`` of them within ``RHYTHM_SLACK`` of a whole
#: number of beats (a collection that read what the one before did moves nothing: two beats), and moves at
#: ``RHYTHM_MOVED`` of the beats at least. The beat is the median of the shortest spacings (those within
#: ``RHYTHM_CLUSTER`` times the shortest: a scrape's jitter either way).
RHYTHM_SPACINGS = 3
RHYTHM_SHARE = 0.75
RHYTHM_SLACK = 0.2
RHYTHM_MOVED = 0.5
RHYTHM_CLUSTER = 1.5


def median_of(values: I64) -> float:
    """``np.median``, without its selection where one value is most of them (scrape stamps in whole ms:
    numpy's introselect takes 10× longer on such runs of equal values): a value that more than half hold
    covers the middle of the sorted values, so it is the median."""
    middle = values[len(values) // 2]
    if 2 * int(np.count_nonzero(values == middle)) > len(values):
        return float(middle)
    return float(np.median(values))


def seen_interval_s(t_ns: I64, segment: I64) -> float | None:
    """The sample interval a track actually has: the median spacing of consecutive samples of one boot
    (a scrape interval, for a TSDB source), or ``None`` with fewer than two."""
    same = (segment[1:] == segment[:-1]) & (np.diff(t_ns) > 0)
    spacing = np.diff(t_ns)[same]
    return median_of(spacing) / 1e9 if len(spacing) else None


def counter_moves(energy_j: F64, segment: I64) -> I64:
    """The samples at which a new counter value is first seen (missing values skipped), each after an
    earlier value of the same segment."""
    known = np.flatnonzero(np.isfinite(energy_j))
    values, run = energy_j[known], segment[known]
    new = np.zeros(len(known), dtype=bool)
    new[1:] = (values[1:] != values[:-1]) & (run[1:] == run[:-1])
    return known[new]


def counter_interval_s(t_ns: I64, segment: I64, energy_j: F64, seen_s: float | None) -> float | None:
    """How often the counter moved — the median spacing of its moves inside one segment — where that is
    ``COARSE_RATIO`` times the samples' spacing ``seen_s`` or more; else ``None``."""
    spacing = _move_spacing_ns(t_ns, segment, energy_j)
    if seen_s is None or not len(spacing):
        return None
    every_s = median_of(spacing) / 1e9
    return every_s if every_s >= COARSE_RATIO * seen_s else None


def collection_interval_s(t_ns: I64, segment: I64, power_w: F64, seen_s: float | None) -> float | None:
    """How often power readings with no counter beside them were collected: the beat their moves keep (an
    exporter serving each collection to several scrapes moves them once a collection), where that is
    ``COARSE_RATIO`` times ``seen_s`` or more; else ``None``. A GPU whose power holds still for seconds moves
    its readings now and then, off any beat, and that is no coarse collection: a steady series scraped every
    1 s, with four load steps, read 15 s intervals, and every window was too short for them."""
    spacing = _move_spacing_ns(t_ns, segment, power_w)
    spacing = spacing[spacing > 0]  # two moves at one stamp say nothing of a beat
    if seen_s is None or len(spacing) < RHYTHM_SPACINGS:
        return None
    beat = float(np.median(spacing[spacing <= RHYTHM_CLUSTER * spacing.min()]))
    beats = spacing / beat
    whole = np.maximum(np.round(beats), 1.0)
    on_beat = np.count_nonzero(np.abs(beats / whole - 1.0) <= RHYTHM_SLACK)
    if on_beat < RHYTHM_SHARE * len(spacing) or len(spacing) < RHYTHM_MOVED * float(beats.sum()):
        return None  # off the beat, or moving at few of its beats: a steady GPU's load steps
    every_s = beat / 1e9
    return every_s if every_s >= COARSE_RATIO * seen_s else None


def _move_spacing_ns(t_ns: I64, segment: I64, values: F64) -> I64:
    """The time between consecutive moves of ``values`` inside one segment."""
    moved = counter_moves(values, segment)
    spacing: I64 = np.diff(t_ns[moved])[segment[moved[1:]] == segment[moved[:-1]]]
    return spacing
