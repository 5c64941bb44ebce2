"""The SQLite source's column helpers (sources/store.py): a picked column is a view only where that equals the
copy, and tracks over the same samples share one segment column."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.sources.store import _pick, _Segments


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 40),
    start=st.integers(0, 5),
    step=st.integers(1, 4),
    extra=st.lists(st.integers(0, 39), max_size=4),
)
def test_a_picked_column_equals_indexing(n: int, start: int, step: int, extra: list[int]) -> None:
    column = np.arange(100, 140, dtype=np.float64)
    even = np.arange(start, min(start + step * n, 40), step, dtype=np.int64)
    uneven = np.unique(np.concatenate([even, np.array(extra, dtype=np.int64)]))
    for index in (even, uneven, np.empty(0, np.int64)):
        got = _pick(column, index)
        assert got.tolist() == column[index].tolist()
        strided = len(index) > 1 and bool(np.all(np.diff(index) == index[1] - index[0]))
        assert np.shares_memory(got, column) == strided  # a view exactly where the index steps evenly


def test_tracks_over_the_same_samples_share_one_segment_column() -> None:
    segments = _Segments()
    first = segments.of([3, 2])
    assert first.tolist() == [0, 0, 0, 1, 1]
    assert segments.of([3, 2]) is first and segments.of([2, 3]) is not first
    assert segments.of([]).tolist() == []
