"""Times as people read them and the CLI's time flags take them back (no numpy: `runs show` prints them)."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_stamp(t_ns: int, timespec: str = "milliseconds") -> str:
    """An epoch ns stamp as RFC 3339 in UTC to the millisecond (or ``timespec``: "seconds"), truncated,
    e.g. 2026-12-05T04:12:43.123Z: what `--start`/`--end` take."""
    stamp = datetime.fromtimestamp(t_ns // 1_000_000 / 1e3, tz=UTC).isoformat(timespec=timespec)
    return stamp.replace("+00:00", "Z")
