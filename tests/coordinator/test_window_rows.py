"""The export's windows kept as columns (core.window_rows): read like the list they stand for, encoded and
digested byte for byte as that list, and never edited in place."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_core_export import RUN, T0, S, node

from sparkwatch.coordinator.big_values import SLICE_ITEMS, let_go
from sparkwatch.core.export import build_export, digest
from sparkwatch.core.json_pieces import canonical, json_pieces
from sparkwatch.core.window_rows import CHUNK, FirstPass, WindowRows, plain
from sparkwatch.core.windows import Window
from sparkwatch.outputs import write_export_to


def squares(n: int) -> tuple[WindowRows[dict[str, int]], list[tuple[int, int]]]:
    """Rows of {"k", "square"} and a log of the slices made."""
    made: list[tuple[int, int]] = []

    def make(lo: int, hi: int) -> list[dict[str, int]]:
        made.append((lo, hi))
        return [{"k": k, "square": k * k} for k in range(lo, hi)]

    return WindowRows(n, make), made


@given(st.integers(0, 3 * CHUNK + 7), st.integers(-400, 400), st.integers(-400, 400))
def test_rows_read_as_the_list_they_stand_for(n: int, a: int, b: int) -> None:
    rows, _ = squares(n)
    whole = [{"k": k, "square": k * k} for k in range(n)]
    assert len(rows) == n and list(rows) == whole and rows == whole and whole == rows
    assert rows[a:b] == whole[a:b] and rows[a:b:2] == whole[a:b:2] and rows[::-1] == whole[::-1]
    assert list(reversed(rows)) == whole[::-1]
    if -n <= a < n:
        assert rows[a] == whole[a]
    else:
        with pytest.raises(IndexError):
            rows[a]
    assert rows != [*whole, {"k": -1}]
    if n:
        assert rows != whole[:-1] and rows != [*whole[:-1], {"k": -1, "square": 1}]


def test_iteration_makes_a_chunk_at_a_time_and_copies_are_plain_lists() -> None:
    rows, made = squares(2 * CHUNK + 1)
    assert sum(1 for _ in rows) == 2 * CHUNK + 1
    assert made == [(0, CHUNK), (CHUNK, 2 * CHUNK), (2 * CHUNK, 2 * CHUNK + 1)]
    made.clear()
    assert sum(1 for _ in reversed(rows)) == 2 * CHUNK + 1
    assert made == [(CHUNK + 1, 2 * CHUNK + 1), (1, CHUNK + 1), (0, 1)]
    rows[5]["square"] = -1  # a made value is fresh: the rows are unchanged
    assert rows[5]["square"] == 25
    edited = copy.deepcopy({"windows": rows})
    assert type(edited["windows"]) is list
    edited["windows"][5]["square"] = -1
    assert edited["windows"][5]["square"] == -1 and rows[5]["square"] == 25
    assert type(copy.copy(rows)) is list and plain({"w": [rows]}) == {"w": [list(rows)]}
    with pytest.raises(TypeError):
        hash(rows)


def many_windows(count: int) -> list[Window]:
    """Back-to-back 50 ms requests from the nodes' busy span on (past their samples' end too)."""
    return [
        Window(
            f"r{k}",
            "timed",
            T0 + 20 * S + k * S // 20,
            T0 + 20 * S + (k + 1) * S // 20,
            t_first_token_ns=T0 + 20 * S + k * S // 20 + S // 100,
            t_last_token_ns=T0 + 20 * S + (k + 1) * S // 20,
            completion_tokens=7,
        )
        for k in range(count)
    ]


def test_an_export_encodes_and_digests_its_windows_as_the_list_they_stand_for() -> None:
    """More windows than one piece of the encoders (500) and than one item-at-a-time list (100)."""
    nodes = [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0), node("spark-2", 11.0, 55.0, [(20, 30)], 9.0)]
    export = build_export(RUN, nodes, many_windows(630), "0.1.0")
    assert isinstance(export["windows"], WindowRows) and len(export["windows"]) == 630
    listed = plain(export)
    assert type(listed["windows"]) is list and listed["windows"] == export["windows"]
    assert listed["windows"][3]["nodes"][1]["power_w_gated_mean"] == pytest.approx(55.0)
    assert digest(listed) == digest(export)
    assert b"".join(json_pieces(export, canonical)) == canonical(listed)
    assert b"".join(json_pieces(export)) == orjson.dumps(listed)
    written = io.BytesIO()
    write_export_to(written, export)
    assert written.getvalue() == orjson.dumps(listed, option=orjson.OPT_INDENT_2) + b"\n"
    assert json.loads(written.getvalue()) == listed


def test_letting_go_of_an_export_empties_the_windows_its_rows_are_made_from() -> None:
    """The coordinator frees a long export in slices (big_values.let_go): the run's windows, which the rows
    hold, go too — their own list, not the caller's."""
    windows = many_windows(3 * SLICE_ITEMS + 1)
    export = build_export(RUN, [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0)], windows, "0.1.0")
    (held,) = export["windows"].held
    assert held == windows and held is not windows
    let_go(export)
    assert held == [] and len(windows) == 3 * SLICE_ITEMS + 1


def test_the_first_pass_is_kept_whole_or_not_at_all() -> None:
    """The first pass over the rows, kept as it was made; a later pass adds nothing; a first pass that
    began past the start (a read of windows 500 on) gives nothing rather than a list with a hole."""
    rows = WindowRows(1200, lambda lo, hi: [{"k": k} for k in range(lo, hi)])
    made: list[tuple[int, list[Any]]] = []
    first = FirstPass()
    for lo in range(0, 1200, 500):
        window = rows.between(lo, min(lo + 500, 1200))
        made.append((lo, window))
        first(lo, window)
    first(0, rows.between(0, 500))  # a second pass
    kept = first.all(1200)
    assert kept == [{"k": k} for k in range(1200)] and kept[0] is made[0][1][0]
    assert first.all(1201) is None
    late = FirstPass()
    late(500, rows.between(500, 1000))
    late(0, rows.between(0, 500))
    assert late.all(1200) is None and late.all(500) is None
