"""`sparkwatch` command line. The coordinator, run, import, attach and demo commands arrive with their issues;
until then this names the agent, whose commands already work."""

from __future__ import annotations

import argparse
import sys

from sparkwatch import __version__


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkwatch",
        description=(
            "Measured GPU power and unified memory for LLM benchmark runs. "
            "The per-node agent is `sparkwatch-agent` (serve | stream --stdio | probe)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"sparkwatch {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    make_parser().parse_args(argv)
    make_parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
