"""`sparkwatch` command line. Errors a user can cause end in one line and exit code 2."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from sparkwatch import __version__
from sparkwatch.coordinator_serve import CoordinatorStartError, serve
from sparkwatch.export_schema import run_schema
from sparkwatch.links.ws_link import LinkError
from sparkwatch.nodes_file import NodesFileError
from sparkwatch.store import StoreError
from sparkwatch_agent.auth import TokenFileError
from sparkwatch_agent.config import ConfigError

PROG = "sparkwatch"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Measured GPU power and unified memory for LLM benchmark runs. "
            "The per-node agent is `sparkwatch-agent` (serve | stream --stdio | probe)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    coord = sub.add_parser("coordinator", help="collect samples from every node; serve the run API")
    coord.add_argument("--nodes", type=Path, required=True, metavar="FILE", help="nodes.toml")
    coord.add_argument("--db", type=Path, default=Path("sparkwatch.db"), metavar="PATH", help="SQLite file")
    coord.add_argument("--listen", default="127.0.0.1:8750", metavar="HOST:PORT")
    coord.add_argument("--token-file", type=Path, metavar="FILE", help="bearer token for the API (mode 0600)")
    coord.add_argument(
        "--insecure-no-auth", action="store_true", help="allow an off-loopback bind without token"
    )
    sub.add_parser("schema", help="print the JSON Schema of the sparkwatch.run/1 export")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "coordinator":
            return asyncio.run(
                serve(args.nodes, args.db, args.listen, args.token_file, args.insecure_no_auth)
            )
        if args.command == "schema":
            print(json.dumps(run_schema(), indent=2))
            return 0
        parser.print_help()
        return 0
    except (NodesFileError, StoreError, TokenFileError, ConfigError, CoordinatorStartError, LinkError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
