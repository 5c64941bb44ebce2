"""`sparkwatch runs list` / `runs show` as text: a name the API took is shown whole, but a control character
in it (a NUL, an ESC starting a terminal escape sequence, a newline that would break the table) is shown as
``\\xNN`` instead of being sent to the terminal."""

from __future__ import annotations

from sparkwatch.commands.runs import run_details, runs_table

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
    assert "bench --tag x\\x1b]0;title\\x07 (exit code 0)" in run_details(wrapped)
    assert (
        len(runs_table([RUN], [3]).splitlines()) == 3
    )  # header, rule, one row: the newline did not split it
