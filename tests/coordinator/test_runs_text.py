"""`sparkwatch runs list` / `runs show` as text: a name the API took is shown whole, but a control character
in it (a NUL, an ESC starting a terminal escape sequence, a newline that would break the table) is shown as
``\\xNN`` instead of being sent to the terminal."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest

from sparkwatch.commands.runs import run_details, runs_table
from sparkwatch.outputs import size_text

RUN = {
    "id": "run-20261205-010203-abcdef",
    "name": "a\x00b \x1b[31mred\x1b[0m\x9b2J\nsecond line ü",
    "open": False,
    "t_start_ns": 1_796_436_500 * 10**9,
    "t_end_ns": 1_796_436_560 * 10**9,
    "interval_s": 0.1,
    "gate_threshold": 0.5,
    "scope": "request",
    "windows": 3,
}


def test_control_characters_in_a_name_are_shown_escaped_and_nothing_else_is() -> None:
    for text in (runs_table([RUN], [3]), run_details(RUN)):
        assert not any((ord(c) < 0x20 and c != "\n") or ord(c) == 0x7F for c in text), repr(text)
        assert "a\\x00b \\x1b[31mred" in text
    assert "\\x9b2J\\x0asecond line ü" in run_details(RUN)  # the table cuts the name at 40 characters
    wrapped = {**RUN, "command": {"argv": ["bench", "--tag", "x\x1b]0;title\x07"], "exit_code": 0}}
    assert "bench --tag 'x\\x1b]0;title\\x07' (exit code 0)" in run_details(wrapped)
    # the command as a shell takes it back, not its words run together
    looped = {**RUN, "command": {"argv": ["sh", "-c", "for i in 1 2; do curl {proxy}; done"], "exit_code": 0}}
    assert "sh -c 'for i in 1 2; do curl {proxy}; done' (exit code 0)" in run_details(looped)
    assert "nvml.utilization.gpu >= 0.5" in run_details(RUN)  # the gate as the export and report name it
    assert (
        len(runs_table([RUN], [3]).splitlines()) == 3
    )  # header, rule, one row: the newline did not split it


@pytest.mark.parametrize(
    ("size_bytes", "text"),
    [(0, "0 B"), (999, "999 B"), (34_599, "34.6 kB"), (1_250_000, "1.2 MB"), (3_400_000_000, "3.4 GB")],
)
def test_a_runs_size_is_shown_in_the_unit_that_says_it(size_bytes: int, text: str) -> None:
    """A short run's samples are a few kB: "0.0 MB" would say it has none."""
    assert size_text(size_bytes) == text
    row = runs_table([{**RUN, "size_bytes": size_bytes}], [3]).splitlines()[2]
    assert row.endswith(" " + text)


def test_runs_show_gives_the_span_as_export_prometheus_takes_it() -> None:
    """To the millisecond in RFC 3339, so `--start`/`--end` can be pasted from it."""
    details = run_details({**RUN, "t_start_ns": RUN["t_start_ns"] + 123_456_789})
    assert "start     2026-12-05T02:08:20.123Z\n" in details
    assert "end       2026-12-05T02:09:20.000Z (59.9 s)\n" in details


def test_runs_list_gives_times_as_export_prometheus_takes_them() -> None:
    from sparkwatch.cli_types import epoch_ns

    row = runs_table([{**RUN, "t_start_ns": RUN["t_start_ns"] + 400_000_000}], [3]).splitlines()[2]
    start, end = (cell for cell in row.split() if cell.endswith("Z"))
    assert (epoch_ns(start), epoch_ns(end)) == (RUN["t_start_ns"], RUN["t_end_ns"])  # to the second


@pytest.mark.parametrize(("windows", "said"), [(1, "1 window"), (0, "0 windows"), (3, "3 windows")])
def test_a_deleted_runs_windows_are_counted_in_words(
    windows: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deleted run r1 (1 windows)` was printed for one window."""
    from sparkwatch.commands.runs import _delete

    class Client:
        async def delete_run(self, run_id: str) -> dict[str, Any]:
            return {"deleted": run_id, "windows": windows}

    assert asyncio.run(_delete(Client(), argparse.Namespace(run_id="r1"))) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out == f"deleted run r1 ({said})\n"


def test_runs_show_says_which_nodes_the_run_measures() -> None:
    """What a restart with another nodes file warns of (an open run keeps the nodes it was opened with) is
    what `runs show` shows; a run stored before they were kept measures the coordinator's."""
    assert "nodes     spark-1, spark-2\n" in run_details({**RUN, "nodes": ["spark-1", "spark-2"]})
    older = "nodes     - (the coordinator's at its export: a run stored before its nodes were kept)\n"
    assert older in run_details({**RUN, "nodes": None}) and older in run_details(RUN)
    assert "nodes     spark\\x1b[2J\n" in run_details({**RUN, "nodes": ["spark\x1b[2J"]})
