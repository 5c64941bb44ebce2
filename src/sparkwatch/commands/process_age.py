"""How long ago this process started, from the kernel's own record: what `runs mark … end` dates its
window's end back by, so the Python start-up and imports (0.45–0.6 s on a small machine) between a
script's `./bench.sh` ending and the mark reaching the coordinator are not counted as the request's."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

#: /proc/PID/stat's starttime (clock ticks after boot) is its 22nd field; the ones after the command
#: name (which may hold spaces and parentheses) start at the 3rd.
_STARTTIME_AFTER_NAME = 22 - 3


def process_age_ns(
    stat: Path = Path("/proc/self/stat"),
    boot_ns: Callable[[], int] = lambda: time.clock_gettime_ns(time.CLOCK_BOOTTIME),
    ticks_per_s: int | None = None,
) -> int | None:
    """Nanoseconds since the process started, never more (its start is read in whole clock ticks, 10 ms,
    and taken at the end of its tick: a mark ended this long ago cannot precede the step its script ran
    before starting it), or ``None`` where the kernel does not say (not Linux, an unreadable or unexpected
    /proc): the mark is then stamped on arrival."""
    try:
        fields = stat.read_text().rpartition(")")[2].split()
        started_ticks = int(fields[_STARTTIME_AFTER_NAME])
        per_s = ticks_per_s or os.sysconf("SC_CLK_TCK")
        age_ns = boot_ns() - (started_ticks + 1) * 1_000_000_000 // per_s
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return age_ns if age_ns >= 0 else None
