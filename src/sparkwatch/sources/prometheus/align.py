"""Series of one node put on one time axis: a TSDB holds each metric as its own series, and the core wants
one sample per time with every value known or NaN (nothing carried from another time)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sparkwatch.core.intervals import seen_interval_s
from sparkwatch.core.tracks import F64, GAP_INTERVALS, I64
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.raw import RawSeries


def union_times(times: Sequence[I64]) -> I64:
    """Every time in any of ``times`` (each sorted, unique), once, sorted: series of one scrape usually
    share their stamps exactly, and then the first is the answer."""
    first = times[0]
    if all(len(t) == len(first) and np.array_equal(t, first) for t in times[1:]):
        return first
    union: I64 = np.unique(np.concatenate(times))
    return union


def values_at(t_ns: I64, series: RawSeries | None) -> F64:
    """The series' values at exactly these times; NaN (unknown) where it has no sample then."""
    if series is not None and len(series.t_ns) == len(t_ns) and np.array_equal(series.t_ns, t_ns):
        return series.values  # scraped together: every time has its value
    out = np.full(len(t_ns), np.nan)
    if series is None or len(series.t_ns) == 0:
        return out
    i = np.clip(np.searchsorted(series.t_ns, t_ns), 0, len(series.t_ns) - 1)
    hit = series.t_ns[i] == t_ns
    out[hit] = series.values[i[hit]]
    return out


def spacing_s(t_ns: I64) -> float:
    """The series' usual spacing: the median seen (0 with fewer than two samples)."""
    return seen_interval_s(t_ns, np.zeros(len(t_ns), dtype=np.int64)) or 0.0


#: Intervals on each side of a sample's own whose median is its nominal interval.
NEIGHBOURS = 4
#: Spacing within this fraction of the read's median is that median's (a scrape's jitter, a timer's).
STEADY_RATIO = 0.25
#: A spacing this many times the agent's own interval or less is a sample at the agent's rate (its jitter).
AT_RATE = 1.5
#: Intervals whose neighbourhoods are taken at once (each a row of 2 × NEIGHBOURS + 1): bounds the copy.
CHUNK = 1 << 16


def local_interval(t_ns: I64) -> F64:
    """Every sample's nominal interval, as a track takes it (its gap limit is GAP_INTERVALS times that): the
    median spacing of the interval that ends at it and the ``NEIGHBOURS`` on either side (the first sample
    takes the next one's). One long interval among short ones stays a gap, while a read whose rate changes
    keeps each stretch's own: a 10 Hz run's samples remote-written between an idle agent's 1 Hz ones took
    one median over the whole read, 1 s for a short run (its gap limit 3 s, its windows judged against
    1 s), and flipped between the rates as the margins of the read moved. Where every interval around is
    within STEADY_RATIO of the read's median, that median is taken (the same within the jitter, and an
    8 h read at one rate costs one median, not one per sample). ``t_ns`` is sorted and unique (union_times,
    raw.py). A stretch of five or more long intervals in a row is a slower rate here, not a gap: no nominal
    interval to judge it against (where the engine holds the agent's own, nominal_interval takes that)."""
    if len(t_ns) < 2:
        return np.zeros(len(t_ns))
    spacing = np.diff(t_ns) / 1e9
    usual = float(np.median(spacing))
    odd = np.abs(spacing - usual) > STEADY_RATIO * usual
    medians = np.full(len(spacing), usual)
    if odd.any():
        width = 2 * NEIGHBOURS + 1
        reach = np.convolve(odd, np.ones(width))[NEIGHBOURS : NEIGHBOURS + len(spacing)]  # any length
        near = np.flatnonzero(reach > 0)  # an odd interval within NEIGHBOURS
        padded = np.concatenate([np.full(NEIGHBOURS, np.nan), spacing, np.full(NEIGHBOURS, np.nan)])
        for lo in range(0, len(near), CHUNK):
            rows = near[lo : lo + CHUNK]
            medians[rows] = np.nanmedian(padded[rows[:, None] + np.arange(width)], axis=1)
    return np.concatenate([medians[:1], medians])


def nominal_interval(t_ns: I64, said: RawSeries | None) -> F64:
    """Every sample's nominal interval: the agent's own where the read holds its samples at the agent's rate
    (a coordinator's remote write of ``sparkwatch_agent_interval_seconds`` beside them), as the store judges
    them, so a stalled agent's late samples are gaps here too; else (scrapes, coarser than the agent; no
    such series) the spacing around each sample (:func:`local_interval`).

    At the agent's rate is voted for each interval the agent said it sampled at: most of the spacings that
    end at a sample taken at that interval are no longer than AT_RATE times it. One vote over the whole
    read took 1 s scrapes for the agent's own samples when they matched its idle 1 s (the lead and margins
    of a short run's read are mostly idle), and then judged the run's scrapes against the 0.1 s it sampled
    at during the run: every one a gap, and the verdict flipped as the read's idle tail grew."""
    local = local_interval(t_ns)
    if said is None or len(t_ns) < 2:
        return local
    sent = values_at(t_ns, said)
    known = np.isfinite(sent) & (sent > 0)
    at_rate = known[1:] & (np.diff(t_ns) / 1e9 <= AT_RATE * np.where(known[1:], sent[1:], 0.0))
    rates, voter = np.unique(np.where(known, sent, 0.0)[1:], return_inverse=True)
    trusted = rates[2 * np.bincount(voter, weights=at_rate, minlength=len(rates)) > np.bincount(voter)]
    return np.where(known & np.isin(sent, trusted[trusted > 0]), sent, local)


def merged(parts: Sequence[RawSeries]) -> RawSeries:
    """One series from several label sets of one metric (a label whose value changed during the span): at
    each time any of them has, the first one's value that is known; the first's labels."""
    if len(parts) == 1:
        return parts[0]
    t = union_times([p.t_ns for p in parts])
    values = np.full(len(t), np.nan)
    for part in parts:
        values = np.where(np.isnan(values), values_at(t, part), values)
    return RawSeries(parts[0].labels, t, values)


#: What a node's metric held twice at once asks of the user.
PICK_ONE = (
    "the engine holds it twice (two jobs or targets scraping it, or scraped and remote-written): pick one"
    " with --series-matchers on a label that tells them apart"
)
#: The same for sparkwatch's own series, which a coordinator may have remote-written beside the scrapes.
PICK_SPARKWATCH = (
    f"""{PICK_ONE}, e.g. '{{job=""}}' for what a coordinator remote-wrote, '{{job!=""}}' for scrapes"""
)


def single(parts: Sequence[RawSeries], what: str, node_label: str, hint: str) -> RawSeries:
    """``parts`` (one metric of one GPU, channel or meter of a node) as one series: label sets that follow
    one another are merged (a label whose value changed); two with samples at once are refused in one line
    that says which labels tell them apart, and ``hint``."""
    pair = first_overlap(parts)
    if pair is not None:
        a, b = told_apart(*pair)
        name, node = pair[0].get("__name__", "a metric"), pair[0].get(node_label)
        raise SourceError(f"two series of {name} for {what} of node {node!r} at once, {a} and {b}: {hint}")
    return merged(parts)


def first_overlap(parts: Sequence[RawSeries]) -> tuple[Mapping[str, str], Mapping[str, str]] | None:
    """The labels of the first two of ``parts`` (one metric of one thing) with samples over the same time:
    two sources of it at once (scraped and remote-written, two jobs, two pods), which no merge could tell
    apart; None when they follow one another (a label whose value changed, and perhaps changed back). Each
    series is taken as its unbroken stretches (split at gaps, as a track splits them), and stretches that
    only touch (a shared stamp at a hand-over) do not overlap."""
    found = [p for p in parts if len(p.t_ns)]
    if len(found) < 2:
        return None
    stretches = sorted((lo, hi, k) for k, p in enumerate(found) for lo, hi in _stretches(p.t_ns))
    end, owner = stretches[0][1], stretches[0][2]
    for lo, hi, k in stretches[1:]:
        if lo < end and k != owner:
            return found[owner].labels, found[k].labels
        if hi > end:
            end, owner = hi, k
    return None


def _stretches(t_ns: I64) -> list[tuple[int, int]]:
    """First and last stamp of each unbroken run of samples: split where two are more than GAP_INTERVALS
    times the series' usual spacing apart."""
    gaps = np.diff(t_ns)
    spacing = spacing_s(t_ns) * 1e9
    cut = np.flatnonzero(gaps > GAP_INTERVALS * spacing) if spacing > 0 else np.empty(0, np.int64)
    firsts, lasts = np.concatenate(([0], cut + 1)), np.concatenate((cut, [len(t_ns) - 1]))
    return list(zip(t_ns[firsts].tolist(), t_ns[lasts].tolist(), strict=True))


def told_apart(a: Mapping[str, str], b: Mapping[str, str]) -> tuple[str, str]:
    """The labels two series differ in, each side as matchers (an absent label is ``""``, as PromQL reads
    it): what a user picks one of them by."""
    differ = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
    left, right = ("{" + ",".join(f'{k}="{d.get(k, "")}"' for k in differ) + "}" for d in (a, b))
    return left, right
