"""Series of one node put on one time axis: a TSDB holds each metric as its own series, and the core wants
one sample per time with every value known or NaN (nothing carried from another time)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sparkwatch.core.tracks import F64, I64
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
