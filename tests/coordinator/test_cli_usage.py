"""The command line's own refusals: an unknown flag is one line under the name of the subcommand it was
given to, with where its --help is, as docs/cli.md says (argparse's top-level parser named the whole
program instead, and every refusal came after up to a dozen lines of usage)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from sparkwatch.cli import main
from sparkwatch.cli_parser import make_parser
from sparkwatch.cli_types import interval_s
from sparkwatch_agent.cli import main as agent_main


@pytest.mark.parametrize(
    ("argv", "prog"),
    [
        (["run", "--bogus", "--", "true"], "sparkwatch run"),
        (["runs", "list", "--bogus"], "sparkwatch runs list"),
        (["export", "--db", "x.db", "--bogus"], "sparkwatch export"),
        (["--bogus"], "sparkwatch"),
        (["--bogus", "runs", "list"], "sparkwatch"),  # typed before the subcommand: the program's
    ],
)
def test_an_unknown_flag_is_one_line_under_its_subcommand(
    argv: list[str], prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err == f"{prog}: error: unrecognized arguments: --bogus (see `{prog} --help`)\n"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["runs", "show"], "sparkwatch runs show: error: the following arguments are required: ID"),
        (["runs"], "sparkwatch runs: error: the following arguments are required: ACTION"),
        ([], "sparkwatch: error: the following arguments are required: COMMAND"),  # was the help, exit 0
        (["--log-level", "debug"], "sparkwatch: error: the following arguments are required: COMMAND"),
        (["runs", "bogus"], "sparkwatch runs: error: argument ACTION: invalid choice: 'bogus'"),
        (["demo", "--nodes", "x"], "sparkwatch demo: error: argument --nodes: "),
        # the plot data computed, then written nowhere: --table prints no JSON
        (
            ["runs", "export", "X", "--table", "--series-buckets", "100"],
            "sparkwatch runs export: error: --series adds plot data to the export JSON, which --table does"
            " not print: add -o FILE",
        ),
        (
            ["export", "--db", "x.db", "--table", "--series"],
            "sparkwatch export: error: --series adds plot data to the export JSON, which --table does not"
            " print: add -o FILE",
        ),
        # the simulated model's bound, before the cluster starts (its 400 came after, naming no flag)
        (["demo", "--max-tokens", "100001"], "sparkwatch demo: error: argument --max-tokens: at most 100000"),
        # a rate at which the demo never finished (1e-9 token/s)
        (
            ["demo", "--tokens-per-s", "1e-9"],
            "sparkwatch demo: error: argument --tokens-per-s: must be 1..100000 tokens a second, got 1e-09",
        ),
        # a number is quoted short; seconds past decimal's range are a time refused, not a decimal.Overflow
        (
            ["demo", "--max-tokens", "1" + "0" * 400],
            "sparkwatch demo: error: argument --max-tokens: an integer of 401 digits, a number too large",
        ),
        (
            ["export", "--prometheus", "http://127.0.0.1:9", "--windows", "w.json", "--start", "1e999999999"],
            "sparkwatch export: error: argument --start: '1e999999999' is not a time between 2000 and 2100",
        ),
        (
            ["export", "--prometheus", "http://127.0.0.1:9", "--windows", "w.json", "--end", "1" * 400],
            "sparkwatch export: error: argument --end: '11111111111111111111111…' is not a time between",
        ),
    ],
)
def test_every_parsing_refusal_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse's own refusals (a missing argument, a wrong choice, a bad value) too: no usage before."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith(line) and err.count("\n") == 1, err
    assert err.endswith(f" (see `{line.partition(': error:')[0]} --help`)\n"), err


def test_the_agents_unknown_flag_is_one_line_under_its_subcommand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        agent_main(["serve", "--bogus"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    prog = "sparkwatch-agent serve"
    assert err == f"{prog}: error: unrecognized arguments: --bogus (see `{prog} --help`)\n"


@pytest.mark.parametrize(
    ("main_of", "argv", "line"),
    [
        (  # argparse took `sim` for the command: "invalid choice: 'sim'"
            agent_main,
            ["--backend", "sim"],
            "sparkwatch-agent: error: --backend goes after the command: `sparkwatch-agent serve --backend …`"
            " (a flag of serve, stream and probe)",
        ),
        (
            agent_main,
            ["--interval=1", "serve"],
            "sparkwatch-agent: error: --interval goes after the command:"
            " `sparkwatch-agent serve … --interval …`",
        ),
        (  # the example is the command typed, where it takes the flag
            main,
            ["--db", "x.db", "export"],
            "sparkwatch: error: --db goes after the command: `sparkwatch export --db …`"
            " (a flag of coordinator, run and export)",
        ),
        (main, ["--nodes", "n.toml", "--log-level", "info", "demo"], "`sparkwatch demo --nodes …`"),
        (main, ["--log-level", "debug", "--db", "x.db", "export"], "--db goes after the command:"),
        (main, ["--db", "x.db", "nodes"], "`sparkwatch coordinator --db …`"),  # nodes takes no --db
        (  # a flag of nested commands; more than four are counted
            main,
            ["--token-file", "t", "runs", "list"],
            "sparkwatch: error: --token-file goes after the command: `sparkwatch runs list --token-file …`"
            " (a flag of coordinator, proxy, run and 11 more)",
        ),
        (main, ["--token-file=t", "runs", "list"], "sparkwatch: error: --token-file goes after the command:"),
        (  # typed after the first word of a nested command, before its last: said under the first
            main,
            ["runs", "--token-file=t", "list"],
            "sparkwatch runs: error: --token-file goes after the command:"
            " `sparkwatch runs list … --token-file …`",
        ),
        (main, ["runs", "--db=x.db", "list"], "sparkwatch runs: error: unrecognized arguments: --db=x.db"),
        (  # a flag the command requires, typed before it: argparse said it was missing
            agent_main,
            ["--stdio", "stream"],
            "sparkwatch-agent stream: error: --stdio goes after the command:"
            " `sparkwatch-agent stream --stdio` (see",
        ),
        (agent_main, ["stream"], "stream: error: the following arguments are required: --stdio (see"),
        (  # one of a required group, typed before the command
            main,
            ["--db=x.db", "export", "r1"],
            "sparkwatch export: error: --db goes after the command: `sparkwatch export --db …`",
        ),
        (
            main,
            ["export", "r1"],
            "sparkwatch export: error: one of the arguments --db --prometheus is required",
        ),
        # typed before the command's last word and after it: given twice, not misplaced
        (
            main,
            ["runs", "--token-file=t", "list", "--token-file=t"],
            "sparkwatch runs list: error: argument --token-file: may be given only once (here before",
        ),
        (
            agent_main,
            ["--stdio", "stream", "--stdio"],
            "argument --stdio: may be given only once (here before",
        ),
        # a flag typed after the command is refused under it, whatever came before
        (main, ["runs", "--token-file=t", "list", "--bogus"], "sparkwatch runs list: error: unrecognized"),
        # a flag no command takes, and one the typed command does not take: refused as unknown
        (main, ["--nope", "x.db"], "sparkwatch: error: unrecognized arguments: --nope"),
        (main, ["--db=x.db", "runs", "list"], "sparkwatch: error: unrecognized arguments: --db=x.db"),
        # a typo in the command itself: a known flag's value (a prefix of one too), a flag that takes no
        # value, a value given with = took nothing from it
        (main, ["--log-level", "debug", "nope"], "sparkwatch: error: argument COMMAND: invalid choice: 'no"),
        (main, ["--log", "debug", "nope"], "sparkwatch: error: argument COMMAND: invalid choice: 'nope'"),
        (main, ["--strict", "nope"], "sparkwatch: error: argument COMMAND: invalid choice: 'nope'"),
        (main, ["--interval=1", "srve"], "sparkwatch: error: argument COMMAND: invalid choice: 'srve'"),
    ],
)
def test_a_commands_flag_typed_before_the_command_is_said_so(
    main_of: Any, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(main_of, argv, capsys)
    assert line in err, err


def _refused(main_of: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``main_of(argv)`` said on stderr: one line, exit 2."""
    with pytest.raises(SystemExit) as exited:
        main_of(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("main_of", "argv", "line"),
    [
        (  # argparse kept the last: a day of idle samples where the first said a month
            main,
            ["coordinator", "--nodes", "n.toml", "--retain-idle", "30d", "--retain-idle", "1d"],
            "sparkwatch coordinator: error: argument --retain-idle: may be given only once",
        ),
        (
            main,
            ["export", "--db", "a.db", "--db=b.db"],
            "sparkwatch export: error: argument --db: may be given",
        ),
        (
            main,
            ["export", "--db", "a.db", "--d", "b.db"],
            "sparkwatch export: error: argument --db: may be given",
        ),
        (
            main,
            ["runs", "list", "--coordinator", "http://a:1", "--coordinator", "http://b:1"],
            "argument --coord",
        ),
        (  # typed before the subcommand and after it: two namespaces, the second had replaced the first
            main,
            ["--log-level", "debug", "coordinator", "--nodes", "n.toml", "--log-level", "info"],
            "sparkwatch: error: argument --log-level: may be given only once (here before the command",
        ),
        (
            agent_main,
            ["serve", "--listen", "127.0.0.1:1", "--listen", "127.0.0.1:2"],
            "sparkwatch-agent serve: ",
        ),
        (  # a switch and its negation: the last was kept
            agent_main,
            ["probe", "--backend", "sim", "--sim-sensors", "--no-sim-sensors"],
            "sparkwatch-agent probe: error: argument --sim-sensors/--no-sim-sensors: may be given only once",
        ),
    ],
)
def test_a_flag_that_takes_one_value_refuses_a_second(
    main_of: Any, argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _refused(main_of, argv, capsys)
    assert line in err and "may be given only once" in err, err


def test_a_flag_that_repeats_on_purpose_still_does() -> None:
    args = make_parser().parse_args(
        ["run", "--import", "plain:a.json", "--import", "aiperf:b.json", "--", "true"]
    )
    assert args.imports == ["plain:a.json", "aiperf:b.json"]
    args = make_parser().parse_args(["--log-level", "debug", "coordinator", "--nodes", "n.toml"])
    assert args.log_level == "debug" and args.nodes == Path("n.toml")  # one place or the other: taken
    assert make_parser().parse_args(["--log-level", "debug", "schema"]).log_level == "debug"  # no flag after


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


@pytest.mark.parametrize("text", ["0", "-1"])
def test_a_count_that_must_be_positive_says_so_for_zero_and_negatives_alike(text: str) -> None:
    """`demo --max-tokens -1` said "must not be negative" where 0 said "must be at least 1"."""
    from sparkwatch.cli_types import positive_int

    with pytest.raises(argparse.ArgumentTypeError) as refused:
        positive_int(text)
    assert str(refused.value) == f"must be at least 1, got {text}"
    assert positive_int("1") == 1


def test_a_ratio_of_minus_zero_is_zero() -> None:
    """`--gate-threshold -0` was taken as -0.0, and said so: "recomputed with gate -0"."""
    from sparkwatch.cli_types import ratio

    assert str(ratio("-0")) == "0.0" and ratio("0.5") == 0.5


def test_an_empty_windows_format_is_refused_not_read_as_plain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--windows-format ''`` was taken as the default (plain); every other empty value is refused."""
    windows = tmp_path / "w.json"
    windows.write_text('{"windows": []}')
    span = ["--start", "1796583903", "--end", "1796583911"]
    code = main(
        [
            "export",
            "--prometheus",
            "http://127.0.0.1:9",
            "--windows",
            str(windows),
            "--windows-format",
            "",
            *span,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "w.json: unknown format ''; known: " in err, err
