"""Series of one node put on one time axis: a TSDB holds each metric as its own series, and the core wants
one sample per time with every value known or NaN (nothing carried from another time)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sparkwatch.core.tracks import F64, I64
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
    "the engine holds it twice (scraped and remote-written, or scraped by two jobs): pick one with"
    """ --series-matchers, e.g. '{job=""}' for what a coordinator remote-wrote, '{job!=""}' for scrapes"""
)


def single(parts: Sequence[RawSeries], what: str, node_label: str) -> RawSeries:
    """``parts`` (one metric of one GPU, channel or meter of a node) as one series: label sets that follow
    one another are merged (a label whose value changed); two with samples at once are refused in one line
    that says which labels tell them apart."""
    pair = first_overlap(parts)
    if pair is not None:
        a, b = told_apart(*pair)
        name, node = pair[0].get("__name__", "a metric"), pair[0].get(node_label)
        raise SourceError(
            f"two series of {name} for {what} of node {node!r} at once, {a} and {b}: {PICK_ONE}"
        )
    return merged(parts)


def first_overlap(parts: Sequence[RawSeries]) -> tuple[Mapping[str, str], Mapping[str, str]] | None:
    """The labels of the first two of ``parts`` (one metric of one thing) whose samples span the same time:
    two sources of it at once (scraped and remote-written, two jobs, two pods), which no merge could tell
    apart; None when they follow one another (a label whose value changed)."""
    spans = sorted(((int(p.t_ns[0]), int(p.t_ns[-1]), p.labels) for p in parts if len(p.t_ns)), key=_span)
    if not spans:
        return None
    end, last = spans[0][1], spans[0][2]
    for lo, hi, labels in spans[1:]:
        if lo <= end:
            return last, labels
        if hi > end:
            end, last = hi, labels
    return None


def told_apart(a: Mapping[str, str], b: Mapping[str, str]) -> tuple[str, str]:
    """The labels two series differ in, each side as matchers (an absent label is ``""``, as PromQL reads
    it): what a user picks one of them by."""
    differ = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
    left, right = ("{" + ",".join(f'{k}="{d.get(k, "")}"' for k in differ) + "}" for d in (a, b))
    return left, right


def _span(span: tuple[int, int, Mapping[str, str]]) -> tuple[int, int]:
    return span[0], span[1]
