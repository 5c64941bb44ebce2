"""A long series cut down to what a plot can show, without losing its peaks or inventing a line across a gap.

The samples are split into *runs*: maximal stretches of known values that may be joined (same agent boot, no
step longer than the gap limit, no unknown value between). Inside each run, per time bucket, the minimum and
the maximum sample are kept at their own times, and so are the run's first and last samples (as M4 does, so
the edges are exact). Between runs the output holds a break (``None``): a plot draws nothing across it.
Everything is vectorised: an 8 h run at 10 Hz is 288 k samples per series, and a 4-node run has ~24 series.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sparkwatch.core.tracks import F64, I64

Mask = npt.NDArray[np.bool_]


def decimate(
    t_ns: I64,
    v: F64,
    breaks_before: Mask,
    t0_ns: int,
    bucket_ns: int,
    *,
    keep_all_up_to: int = 0,
    digits: int = 3,
) -> tuple[list[float], list[float | None]]:
    """``(t_s, v)``: times in s since ``t0_ns`` rounded to the ms, values rounded to ``digits`` (whole
    numbers when ``digits <= 0``) with ``None`` at each break. ``t_ns`` is sorted; ``v`` is NaN where
    unknown; ``breaks_before[i]`` says sample i must not be joined to sample i − 1. A series of at most
    ``keep_all_up_to`` samples keeps every known sample."""
    if bucket_ns <= 0:
        raise ValueError(f"bucket_ns must be positive, got {bucket_ns}")
    known = np.flatnonzero(np.isfinite(v))
    if len(known) == 0:
        return [], []
    t, values = t_ns[known], v[known]
    run_start = np.ones(len(known), dtype=bool)  # the first sample of each run of joinable known samples
    run_start[1:] = (np.diff(known) > 1) | breaks_before[known[1:]]
    keep = (
        np.ones(len(known), dtype=bool)
        if len(t_ns) <= keep_all_up_to
        else _kept(t, values, run_start, t0_ns, bucket_ns)
    )
    return _with_breaks(t[keep], values[keep], run_start[keep], t0_ns, digits)


def _kept(t: I64, values: F64, run_start: Mask, t0_ns: int, bucket_ns: int) -> Mask:
    """Which samples survive: each (run, bucket) group's first minimum and first maximum, and every run's
    first and last sample. Groups are contiguous because the samples are in time order."""
    bucket = np.floor_divide(t - t0_ns, bucket_ns)
    group_start = run_start.copy()
    group_start[1:] |= bucket[1:] != bucket[:-1]
    starts = np.flatnonzero(group_start)
    group = np.cumsum(group_start) - 1
    keep = run_start.copy()
    keep[np.append(np.flatnonzero(run_start)[1:] - 1, len(t) - 1)] = True  # each run's last sample
    for extreme in (np.minimum, np.maximum):
        hits = np.flatnonzero(values == extreme.reduceat(values, starts)[group])
        first = np.ones(len(hits), dtype=bool)
        first[1:] = group[hits[1:]] != group[hits[:-1]]  # one sample per group: the earliest
        keep[hits[first]] = True
    return keep


def _with_breaks(
    t: I64, values: F64, run_start: Mask, t0_ns: int, digits: int
) -> tuple[list[float], list[float | None]]:
    """The kept samples in time order, a ``None`` (at the middle of the gap) before each run but the first."""
    breaks = np.flatnonzero(run_start[1:]) + 1
    gap_t = (t[breaks - 1] + t[breaks]) // 2
    out_t = np.insert(t, breaks, gap_t)
    out_v = np.insert(values, breaks, np.nan)
    t_s = np.round((out_t - t0_ns) / 1e9, 3).tolist()
    known = np.isfinite(out_v).tolist()
    rounded = np.round(out_v, digits).tolist()
    if digits <= 0:
        return t_s, [int(x) if k else None for x, k in zip(rounded, known, strict=True)]
    return t_s, [x if k else None for x, k in zip(rounded, known, strict=True)]
