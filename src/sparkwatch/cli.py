"""`sparkwatch` command line. Errors a user can cause end in one line and exit code 2.

Parsing imports nothing heavy; the subcommands' code (cli_commands.py) is imported once one is given, so
`--help` and `--version` answer at about the interpreter's own start-up time (benchmarks/cli_startup.py)."""

from __future__ import annotations

import sys

from sparkwatch.cli_parser import PROG, make_parser
from sparkwatch_agent.shared.journal_log import configure_logging


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    if args.command is None:
        parser.print_help()
        return 0
    from sparkwatch.cli_commands import COMMANDS, USER_ERRORS  # noqa: PLC0415 (the heavy part, on demand)

    try:
        if args.command in COMMANDS:
            return COMMANDS[args.command](args, getattr(args, "subparser", parser))
        parser.print_help()
        return 0
    except USER_ERRORS as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output file or folder the user named cannot be written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{PROG}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
