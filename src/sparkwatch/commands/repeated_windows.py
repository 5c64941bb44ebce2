"""A harness file imported beside the proxy that holds the proxy's requests again.

The proxy stores a window for each request it passes; a harness file of the same requests imported into the
same run stored each of them twice: the energy of overlapping windows is not added twice, but their tokens
are, so joules per token came out at half. A window of the file repeats one of the proxy's when both its
start and its end lie within ``TOLERANCE_NS`` of that window's (the harnesses and the proxy were seen to
agree within 10 ms; a window of a different span, such as a whole benchmark's, never pairs).
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkwatch.core.windows import Window

TOLERANCE_NS = 50_000_000


def repeated(proxy: Sequence[Window], imported: Sequence[Window], tolerance_ns: int = TOLERANCE_NS) -> int:
    """How many of ``imported`` repeat one of ``proxy``'s windows, one for one (each side in start order,
    paired greedily)."""
    ours = sorted((w.t_start_ns, w.t_end_ns) for w in proxy)
    theirs = sorted((w.t_start_ns, w.t_end_ns) for w in imported)
    used = [False] * len(ours)
    count, lo = 0, 0
    for start, end in theirs:
        while lo < len(ours) and ours[lo][0] < start - tolerance_ns:
            lo += 1
        k = lo
        while k < len(ours) and ours[k][0] <= start + tolerance_ns:
            if not used[k] and abs(ours[k][1] - end) <= tolerance_ns:
                used[k] = True
                count += 1
                break
            k += 1
    return count


def verdict(fmt: str, shown: str, count: int, total: int) -> tuple[bool, str | None]:
    """Whether to import the file, and the run note that says why (None: nothing to say). At least half its
    windows repeating the proxy's: the same requests again, not imported; fewer: imported, and said."""
    if count == 0:
        return True, None
    what = f"{count} of the {total} window(s) in {shown} ({fmt}) repeat the proxy's (start and end within"
    tolerance = f"{TOLERANCE_NS / 1e6:g} ms)"
    if 2 * count >= total:
        return False, (
            f"{what} {tolerance}: the proxy's requests again, not imported (each would be counted twice);"
            " the export keeps the proxy's windows"
        )
    return True, f"{what} {tolerance} and were imported all the same: those requests are counted twice"
