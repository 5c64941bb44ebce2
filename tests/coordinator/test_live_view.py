"""What `sparkwatch run` draws while the benchmark runs, and the tables' columns for long node names."""

from __future__ import annotations

import io
import os

from sparkwatch.commands.live_view import LiveView
from sparkwatch.commands.nodes_check import NodeCheck, render

PARTS = [
    "spark-1: 55.8 W 90% 34.0 GiB 120 samples, lag 0.1 s",
    "spark-2: 53.8 W 86% 34.0 GiB 120 samples, lag 0.2 s",
]


def _view(columns: int, rows: int) -> tuple[LiveView, io.StringIO]:
    out = io.StringIO()
    return LiveView(out, tty=True, size=lambda: os.terminal_size((columns, rows))), out


def test_a_tall_terminal_gets_one_line_per_node_redrawn_in_place() -> None:
    view, out = _view(120, 24)
    view.show(PARTS)
    assert out.getvalue() == "\n".join(PARTS)
    view.show(PARTS)
    assert out.getvalue().endswith("\x1b[1F\x1b[J" + "\n".join(PARTS))  # back up one line, clear, redraw
    view.clear()
    assert out.getvalue().endswith("\x1b[1F\x1b[J")


def test_a_short_terminal_gets_one_line_and_a_narrow_one_cut_lines() -> None:
    view, out = _view(40, 4)
    view.show(PARTS)
    line = out.getvalue()
    assert "\n" not in line and len(line) == 39 and line.endswith("…")
    view.show(PARTS)
    assert out.getvalue()[len(line) :].startswith("\r\x1b[J")


def test_a_terminal_that_says_no_size_is_taken_as_80_by_24() -> None:
    """`script` and some CI terminals report 0 columns: every line was cut to one character and "…"."""
    view, out = _view(0, 0)
    view.show(PARTS)
    assert out.getvalue() == "\n".join(PARTS)


def test_no_terminal_gets_plain_lines_never_redrawn() -> None:
    out = io.StringIO()
    view = LiveView(out, tty=False)
    view.show(PARTS)
    view.show(PARTS)
    view.clear()
    assert out.getvalue() == (" | ".join(PARTS) + "\n") * 2
    assert "\x1b" not in out.getvalue()


def test_the_nodes_check_table_stays_aligned_for_long_node_names() -> None:
    checks = [
        NodeCheck(node="a-very-long-node-name-in-rack-7", reachable=True),
        NodeCheck(node="n1", reachable=True),
    ]
    rows = render(checks).splitlines()
    assert rows[2].index(" yes") == rows[3].index(" yes") == rows[0].index(" reach")
