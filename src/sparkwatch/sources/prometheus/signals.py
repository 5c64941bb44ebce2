"""A GPU's clock signals (core.throttle's SignalTrack) from a TSDB's series: the SM clock, the temperature
and the clock event reasons at every time any of them was scraped, unknown (NaN, -1) where one has no
sample then; the reasons from a bitmask series, or rebuilt from one 0/1 series per reason."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import F64, I64
from sparkwatch.sources.prometheus.align import union_times, values_at
from sparkwatch.sources.prometheus.raw import RawSeries
from sparkwatch.store.sample_block import INT63_MASK  # the reason bits kept, as the store keeps them


def signal_track(
    key: str,
    values: Mapping[str, RawSeries | None],
    flags: Mapping[int, RawSeries],
    top_hz: float | None,
) -> SignalTrack | None:
    """GPU ``key``'s track from its ``sm_clock``, ``temperature`` and ``reasons`` (bitmask) series and its
    per-reason ``flags`` (bit → 0/1 series); None without any of them."""
    found = [s for s in values.values() if s is not None and len(s.t_ns)]
    found += [s for s in flags.values() if len(s.t_ns)]
    if not found:
        return None
    t = union_times([s.t_ns for s in found])
    reasons = (
        _from_flags(t, flags)
        if values.get("reasons") is None
        else _from_mask(values_at(t, values["reasons"]))
    )
    return SignalTrack(
        t,
        values_at(t, values.get("sm_clock")),
        values_at(t, values.get("temperature")),
        reasons,
        top_hz,
        uuid=key,
    )


def top_hz(series: RawSeries | None) -> float | None:
    """The largest maximum SM clock the GPU reported in the span (positive), else None: no clock ratio."""
    if series is None:
        return None
    known = series.values[np.isfinite(series.values) & (series.values > 0)]
    return float(known.max()) if len(known) else None


def _from_mask(values: F64) -> I64:
    """A bitmask series' values as reason masks: -1 where unknown (no sample, NaN, negative, or 2**63 and
    more: a double that large has lost its low bits, where the reasons are)."""
    known = np.isfinite(values) & (values >= 0) & (values < 2.0**63)
    masks = np.full(len(values), -1, dtype=np.int64)
    masks[known] = values[known].astype(np.int64) & INT63_MASK
    return masks


def _from_flags(t: I64, flags: Mapping[int, RawSeries]) -> I64:
    """Per time, the bits of the reasons whose series read 1 then; -1 where no reason series has a sample."""
    masks = np.zeros(len(t), dtype=np.int64)
    known = np.zeros(len(t), dtype=bool)
    for bit, series in flags.items():
        v = values_at(t, series)
        seen = np.isfinite(v)
        known |= seen
        masks |= np.where(seen & (v >= 0.5), bit, 0)
    return np.where(known, masks, -1)
