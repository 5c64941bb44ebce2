"""What ``--series`` and ``--series-buckets`` ask for, for `export` and `runs export` alike (apart from
export_cmd.py, whose engine reads `runs list` and its kin need not import)."""

from __future__ import annotations

import argparse

from sparkwatch.defaults import SERIES_BUCKETS


def check_series_shown(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """argparse's one-line refusal of a series block made and shown nowhere: ``--table`` prints no JSON."""
    if args.table and args.output is None and wanted_series(args) is not None:
        parser.error("--series adds plot data to the export JSON, which --table does not print: add -o FILE")


def wanted_series(args: argparse.Namespace) -> int | None:
    """The series block's buckets ``--series`` or ``--series-buckets`` ask for (the latter wins); None
    when neither does."""
    if args.series_buckets is not None:
        return int(args.series_buckets)
    return SERIES_BUCKETS if args.series else None
