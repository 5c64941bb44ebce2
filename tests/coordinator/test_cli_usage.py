"""The command line's own refusals: an unknown flag is said with the usage of the subcommand it was given
to, as docs/cli.md says (argparse's top-level parser printed the whole program's usage instead)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sparkwatch.cli import main
from sparkwatch.cli_parser import make_parser
from sparkwatch.cli_types import interval_s
from sparkwatch_agent.cli import main as agent_main


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["run", "--bogus", "--", "true"], "usage: sparkwatch run "),
        (["runs", "list", "--bogus"], "usage: sparkwatch runs list "),
        (["export", "--db", "x.db", "--bogus"], "usage: sparkwatch export "),
        (["--bogus"], "usage: sparkwatch "),
        (["--bogus", "runs", "list"], "usage: sparkwatch "),  # typed before the subcommand: the program's
    ],
)
def test_an_unknown_flag_is_said_with_its_subcommands_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(usage), err
    prog = usage.removeprefix("usage: ").rstrip()
    assert err.rstrip().splitlines()[-1] == f"{prog}: error: unrecognized arguments: --bogus"
    if argv[0] == "--bogus":
        assert "COMMAND" in err.splitlines()[1] or "COMMAND" in err.splitlines()[0]


def test_the_agents_unknown_flag_is_said_with_its_subcommands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        agent_main(["serve", "--bogus"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("usage: sparkwatch-agent serve "), err


def test_a_command_after_the_double_dash_keeps_its_own_flags() -> None:
    """parse_known_args must not take a wrapped command's flags for sparkwatch's."""
    from sparkwatch.cli_parser import make_parser

    args, unknown = make_parser().parse_known_args(["run", "--", "python", "-c", "1", "--weird"])
    assert unknown == [] and args.cmd == ["--", "python", "-c", "1", "--weird"]


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "0.001", "5000"])
def test_an_interval_out_of_range_is_said_as_the_range(text: str) -> None:
    """`--interval 0` said "must be a positive number" where 0.001 said the range: both say the range."""
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        interval_s(text)
    assert str(refused.value) == f"must be between 0.01 and 60 seconds, got {text}"
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        interval_s("fast")
    assert str(refused.value) == "not a number: 'fast'"
    assert interval_s("0.1") == 0.1


def test_the_demo_does_not_write_over_a_real_runs_export_by_default() -> None:
    """The README's real benchmark writes run.json; the demo's default once was the same file."""
    assert make_parser().parse_args(["demo"]).output == Path("demo.json")
    assert make_parser().parse_args(["run", "--", "true"]).output is None  # run: sparkwatch-RUN.json
