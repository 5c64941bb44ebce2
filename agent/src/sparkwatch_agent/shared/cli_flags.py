"""Flag errors in one line: a parser class whose refusals are one line naming where ``--help`` is, and a
flag no parser takes refused under the command it was typed for.

argparse prints the parser's whole usage (up to a dozen lines for `sparkwatch run`) before its error; a
user who typed one wrong flag needs the error, and the place to read the rest. argparse's top-level parser
also reports an unknown flag under the program's name wherever it was typed; each subcommand parser here
carries itself as the ``subparser`` default, so the refusal can name the subcommand a flag was typed after
— and the program, for one typed before the subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, exit 2: ``PROG CMD: error: WHAT (see `PROG CMD
    --help`)``. Its subcommand parsers are of this class too (``add_subparsers`` makes its own type)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def refuse_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str], unknown: Sequence[str]
) -> NoReturn:
    """Exit 2 with ``unknown`` named in one line, under the name of the parser the flags were typed for."""
    owner: argparse.ArgumentParser = getattr(args, "subparser", parser)
    command = getattr(args, "command", None)
    typed = list(argv)
    if command in typed and any(typed.index(u) < typed.index(command) for u in unknown if u in typed):
        owner = parser
    owner.error(f"unrecognized arguments: {' '.join(unknown)}")
