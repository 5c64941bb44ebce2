"""Memory in use per node (host MemTotal − MemAvailable, which on unified memory includes the GPU's) and
across nodes: baseline before the run, peak and mean within the scope, the sum of peaks and the peak of
the summed series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sparkwatch.core.baseline import baseline_mask
from sparkwatch.core.tracks import MemTrack
from sparkwatch.core.windows import Scope


@dataclass(frozen=True, slots=True)
class MemoryStats:
    baseline_bytes: int | None
    peak_bytes: int | None
    mean_bytes: int | None


def node_memory(track: MemTrack, scope: Scope, baseline_before_ns: int | None) -> MemoryStats:
    """Baseline = median of the samples in the baseline period (core.baseline) before
    ``baseline_before_ns``; peak/mean within the scope."""
    used = track.used_bytes
    ok = np.isfinite(used)
    pre = ok & baseline_mask(track.t_ns, baseline_before_ns)
    baseline = int(np.median(used[pre])) if pre.any() else None
    inside = ok & scope.contains(track.t_ns) if not scope.empty else np.zeros(len(used), bool)
    if not inside.any():
        return MemoryStats(baseline, None, None)
    return MemoryStats(baseline, int(np.max(used[inside])), int(np.mean(used[inside])))


def peak_of_sum(tracks: Sequence[MemTrack], scope: Scope) -> int | None:
    """Peak over time of Σ nodes' used memory, at every sample time inside the scope where every node has a
    reading no older than its gap limit (values are held, never interpolated, and never across a gap)."""
    if not tracks or scope.empty:
        return None
    # each node's stamps are sorted: the stable sort (timsort) merges those runs, 14x the default's speed
    times = np.sort(np.concatenate([t.t_ns[scope.contains(t.t_ns)] for t in tracks]), kind="stable")
    times = times[np.concatenate(([True], times[1:] != times[:-1]))] if len(times) else times  # np.unique,
    # without its hash table: 10x faster on the million sorted-per-node stamps of an 8 h run
    if len(times) == 0:
        return None
    total = np.zeros(len(times))
    complete = np.ones(len(times), dtype=bool)
    for track in tracks:
        ok = np.isfinite(track.used_bytes)
        t, used, gap = track.t_ns[ok], track.used_bytes[ok], track.max_gap_ns[ok]
        i = np.searchsorted(t, times, side="right") - 1
        has = i >= 0
        idx = np.clip(i, 0, None)
        fresh = has & (times - t[idx] <= gap[idx]) if len(t) else np.zeros(len(times), bool)
        complete &= fresh
        total += np.where(fresh, used[idx] if len(t) else 0.0, 0.0)
    if not complete.any():
        return None
    return int(np.max(total[complete]))
