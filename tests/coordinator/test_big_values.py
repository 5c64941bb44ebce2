"""An export's collector pause and slice-wise release leave the process as they found it."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from sparkwatch.coordinator.big_values import SLICE_ITEMS, CollectorPause, let_go
from sparkwatch.core.columns import int_column


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_comes_back_as_it_was_when_the_last_holder_leaves(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        pause = CollectorPause()
        with pause:
            assert not gc.isenabled()
            inner_done = threading.Event()

            def other_export() -> None:
                with pause:
                    assert not gc.isenabled()
                inner_done.set()

            threading.Thread(target=other_export).start()
            assert inner_done.wait(5)
            assert not gc.isenabled()  # the first holder is still inside
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), pause:
            raise RuntimeError("export failed")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_let_go_empties_long_lists_through_dicts_and_leaves_short_ones() -> None:
    short = [1, 2]
    value = {
        "windows": [{"id": i} for i in range(3 * SLICE_ITEMS + 7)],
        "nodes": {"a": {"t": list(range(10_000))}},
    }
    value["short"] = short
    let_go(value)
    assert value["windows"] == []
    assert value["nodes"]["a"]["t"] == []
    assert value["short"] == [1, 2]


@pytest.mark.parametrize("values", [[], [0], [2**63 - 1, -(2**63), 5], list(range(100_000))])
def test_int_column_is_the_array_of_the_values(values: list[int]) -> None:
    column = int_column(iter(values))
    assert column.dtype == np.int64
    assert np.array_equal(column, np.array(values, dtype=np.int64))
    assert np.array_equal(int_column(values, len(values)), column)
