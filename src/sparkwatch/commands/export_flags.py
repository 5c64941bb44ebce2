"""`sparkwatch export`'s flags for each kind of export (`--db` or `--prometheus`), checked before anything
is read: apart from the TSDB export itself, so that `export --db` loads neither the engine's client nor
aiohttp."""

from __future__ import annotations

import argparse

from sparkwatch.commands.anchor_flag import anchor_of
from sparkwatch.importers import run_export

#: The flags an export from a TSDB needs, and one it may take (neither goes with a database's run).
TSDB_ONLY = ("windows", "start", "end")
TSDB_OPTIONAL = (
    "windows_format",
    "clock_anchor",
    "nodes_label",
    "nodes",
    "metrics",
    "engine",
    "engine_metrics",
    "series_matchers",
    "coordinator",
    "token_file",
    "bearer_token_file",
    "basic_auth_user",
    "basic_auth_password_file",
)
#: The defaults of those that have one (None in the parser: a flag given with --db is found, and refused).
TSDB_DEFAULTS = {"nodes_label": "node", "metrics": "sparkwatch", "engine": "auto"}
#: The longest --start to --end taken: every sample in it is read (an engine at 1 Hz holds 86 400 a day per
#: series), and `--start 1e9 --end 2e9` ran for hours with nothing said.
MAX_SPAN_NS = 31 * 86_400 * 10**9


def check_tsdb_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The flags of each kind of export: argparse's one-line error for a wrong mix."""
    if args.prometheus is None:
        given = [
            f"--{name.replace('_', '-')}"
            for name in (*TSDB_ONLY, *TSDB_OPTIONAL)
            if getattr(args, name) is not None
        ]
        if given:
            verb = "goes" if len(given) == 1 else "go"
            parser.error(f"{', '.join(given)} {verb} with --prometheus, not --db")
        return
    for name, default in TSDB_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.run is not None and (args.windows is not None or args.windows_format is not None):
        parser.error("RUN (a coordinator's run) or --windows FILE: the windows come from one of them")
    if args.run is not None and args.clock_anchor is not None:
        parser.error("--clock-anchor goes with --windows FILE of vllm, not a coordinator's RUN")
    args.clock_anchor = anchor_of(args, parser, [args.windows_format or "plain"])  # as `import` takes it
    spanned = args.run is not None or args.windows_format == run_export.FORMAT  # a run gives its span
    needed = () if args.run is not None else ("windows",) if spanned else TSDB_ONLY
    missing = [f"--{name}" for name in needed if getattr(args, name) is None]
    if missing:
        others = (
            "a coordinator's RUN" if spanned else "a coordinator's RUN, or a run's export file as --windows"
        )
        also = "" if spanned else " with --windows-format export, whose run gives the span"
        parser.error(f"--prometheus needs {', '.join(missing)} (or {others}{also})")
    if args.run is None and (args.coordinator is not None or args.token_file is not None):
        parser.error("--coordinator and --token-file go with a coordinator's RUN")
    if args.start is not None and args.end is not None and args.end <= args.start:
        parser.error("--end must be after --start")
    if args.start is not None and args.end is not None and (why := too_long(args.start, args.end)):
        parser.error(why)
    if args.bearer_token_file is not None and args.basic_auth_user is not None:
        parser.error("--bearer-token-file or --basic-auth-user, not both")
    if args.basic_auth_password_file is not None and args.basic_auth_user is None:
        parser.error("--basic-auth-password-file needs --basic-auth-user")


def too_long(start_ns: int, end_ns: int) -> str | None:
    """Why a span is too long to read, if it is: given by the flags, or by one flag and a run's end."""
    if end_ns - start_ns <= MAX_SPAN_NS:
        return None
    days = (end_ns - start_ns) / 86_400e9
    return (
        f"--start to --end spans more than {MAX_SPAN_NS // 86_400_000_000_000} days ({days:,.1f} days): the"
        " engine is read over all of it (about a second per day), where a benchmark's span is hours;"
        " give the run's own start and end"
    )
