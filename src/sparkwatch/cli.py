"""`sparkwatch` command line. Errors a user can cause end in one line and exit code 2.

Parsing imports nothing heavy; a subcommand's handler module (cli_commands.py says which) is imported once
that command is given, so `--help` and `--version` answer at about the interpreter's own start-up time
(benchmarks/cli_startup.py) and `runs`, `export` or `report` never load the coordinator's stack."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys

from sparkwatch.cli_commands import COMMANDS, damage_said, handler, is_user_error
from sparkwatch.cli_parser import PROG, make_parser
from sparkwatch_agent.shared.cli_flags import refuse_unknown
from sparkwatch_agent.shared.journal_log import configure_logging
from sparkwatch_agent.shared.std_streams import drop_output, reopen_closed
from sparkwatch_agent.shared.strict_text import one_line

#: Libraries that log every connection at INFO (asyncssh: ~17 lines per SSH dial, ~2 000 an hour for one
#: node that is down): WARNING and above only, unless --log-level debug asks for everything.
CHATTY_LOGGERS = ("asyncssh",)


def main(argv: list[str] | None = None) -> int:
    reopen_closed()  # `2>&-`: before any file is opened (it would take fd 2)
    parser = make_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        refuse_unknown(parser, args, sys.argv[1:] if argv is None else argv, unknown)
    configure_logging(args.log_level)
    if args.log_level.lower() != "debug":
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    if args.command is None:  # as `sparkwatch-agent` and `sparkwatch runs` say (`sparkwatch $EMPTY` exited 0)
        parser.error("the following arguments are required: COMMAND")
    if args.command not in COMMANDS:
        parser.print_help()
        return 0
    try:
        return handler(args.command)(args, getattr(args, "subparser", parser))
    except KeyboardInterrupt:  # a Ctrl-C no command part handled (one a run handles says what it kept)
        with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP) takes no more writes
            print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout's reader left (`| head`): stop quietly, as a shell's tools do
        drop_output(sys.stdout.fileno())  # no second error at exit's flush
        return 128 + signal.SIGPIPE
    except Exception as exc:
        said = damage_said(exc, getattr(args, "db", None))
        if said is not None or is_user_error(exc):
            print(f"{PROG}: error: {one_line(said or str(exc))}", file=sys.stderr)
            return int(getattr(exc, "exit_code", 2))  # a port held for now: 75 (shared/http.py)
        if isinstance(exc, OSError):  # an output file or folder the user named cannot be written
            where = f"{exc.filename}: " if exc.filename else ""
            print(f"{PROG}: error: {one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
