"""What ``--series`` and ``--series-buckets`` ask for, for `export` and `runs export` alike (apart from
export_cmd.py, whose engine reads `runs list` and its kin need not import)."""

from __future__ import annotations

import argparse

from sparkwatch.defaults import SERIES_BUCKETS


def wanted_series(args: argparse.Namespace) -> int | None:
    """The series block's buckets ``--series`` or ``--series-buckets`` ask for (the latter wins); None
    when neither does."""
    if args.series_buckets is not None:
        return int(args.series_buckets)
    return SERIES_BUCKETS if args.series else None
