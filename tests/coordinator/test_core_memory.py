"""Memory across nodes: the peak of the summed series, taken a slice of time at a time, is the one pass's."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core import memory
from sparkwatch.core.memory import peak_of_sum
from sparkwatch.core.tracks import MemTrack
from sparkwatch.core.windows import Scope

S = 1_000_000_000
T0 = 1_800_000_000 * S


def one_pass(tracks: list[MemTrack], scope: Scope) -> int | None:
    """peak_of_sum over every stamp at once (what it computed before it took slices)."""
    if scope.empty:
        return None
    times = np.unique(np.concatenate([t.t_ns[scope.contains(t.t_ns)] for t in tracks]))
    if len(times) == 0:
        return None
    total, complete = np.zeros(len(times)), np.ones(len(times), dtype=bool)
    for track in tracks:
        ok = np.isfinite(track.used_bytes)
        t, used, gap = track.t_ns[ok], track.used_bytes[ok], track.max_gap_ns[ok]
        i = np.searchsorted(t, times, side="right") - 1
        idx = np.clip(i, 0, None)
        fresh = (i >= 0) & (times - t[idx] <= gap[idx]) if len(t) else np.zeros(len(times), bool)
        complete &= fresh
        total += np.where(fresh, used[idx] if len(t) else 0.0, 0.0)
    return int(np.max(total[complete])) if complete.any() else None


node = st.lists(
    st.tuples(st.integers(1, 4_000), st.one_of(st.none(), st.integers(0, 2**37))), min_size=0, max_size=40
)


@settings(max_examples=200, deadline=None)
@given(st.lists(node, min_size=1, max_size=4), st.integers(1, 9), st.integers(0, 60), st.integers(1, 60))
def test_slices_give_the_one_pass_peak(
    nodes: list[list[tuple[int, int | None]]], slice_stamps: int, a: int, n: int
) -> None:
    """Nodes sampled at uneven steps (0.1 ms to 0.4 s, a gap limit of 0.3 s), unknown values among them,
    a scope of two pieces: every slice size gives the same peak, or the same None."""
    tracks = []
    for samples in nodes:
        t = T0 + np.cumsum([step * S // 10_000 for step, _ in samples]).astype(np.int64)
        used = np.array([np.nan if v is None else float(v) for _, v in samples])
        tracks.append(MemTrack.from_arrays(t, np.zeros(len(t), np.int64), np.full(len(t), 0.1), used))
    start = T0 + a * S // 10
    scope = Scope(
        np.array([start, start + (n + 5) * S // 10], np.int64),
        np.array([start + n * S // 10, start + (2 * n + 5) * S // 10], np.int64),
    )
    with patch.object(memory, "SLICE_STAMPS", slice_stamps):
        assert peak_of_sum(tracks, scope) == one_pass(tracks, scope)
