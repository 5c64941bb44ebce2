"""A flag no parser takes, refused in one line with the usage it belongs to.

argparse's top-level parser reports an unknown flag with the whole program's usage, wherever it was typed;
each subcommand parser here carries itself as the ``subparser`` default, so the refusal can name the
subcommand a flag was typed after — and the program, for one typed before the subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn


def refuse_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str], unknown: Sequence[str]
) -> NoReturn:
    """Exit 2 with ``unknown`` named, under the usage of the parser the flags were typed for."""
    owner: argparse.ArgumentParser = getattr(args, "subparser", parser)
    command = getattr(args, "command", None)
    typed = list(argv)
    if command in typed and any(typed.index(u) < typed.index(command) for u in unknown if u in typed):
        owner = parser
    owner.error(f"unrecognized arguments: {' '.join(unknown)}")
