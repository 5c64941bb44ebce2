"""A harness file imported beside the proxy that holds the proxy's requests again.

The proxy stores a window for each request it passes; a harness file of the same requests imported into the
same run stored each of them twice: the energy of overlapping windows is not added twice, but their tokens
are, so joules per token came out at half. A window of the file repeats one of the proxy's when both its
start and its end lie within ``TOLERANCE_NS`` of that window's (the harnesses and the proxy were seen to
agree within 10 ms; a window of a different span, such as a whole benchmark's, never pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sparkwatch.core.windows import Window

TOLERANCE_NS = 50_000_000


def repeated(
    proxy: Sequence[Window], imported: Sequence[Window], tolerance_ns: int = TOLERANCE_NS
) -> list[tuple[Window, Window]]:
    """The (proxy window, imported window) pairs that are one request, one for one (each side in start
    order, paired greedily)."""
    ours = sorted(proxy, key=lambda w: (w.t_start_ns, w.t_end_ns))
    theirs = sorted(imported, key=lambda w: (w.t_start_ns, w.t_end_ns))
    used = [False] * len(ours)
    pairs, lo = [], 0
    for w in theirs:
        while lo < len(ours) and ours[lo].t_start_ns < w.t_start_ns - tolerance_ns:
            lo += 1
        k = lo
        while k < len(ours) and ours[k].t_start_ns <= w.t_start_ns + tolerance_ns:
            if not used[k] and abs(ours[k].t_end_ns - w.t_end_ns) <= tolerance_ns:
                used[k] = True
                pairs.append((ours[k], w))
                break
            k += 1
    return pairs


class Wording(NamedTuple):
    """What the windows an import repeats are called in its note."""

    repeated: str  # "… repeat {repeated}"
    again: str  # "{again} again, not imported"
    kept: str  # "the export keeps {kept}"


#: A harness file of the proxy's requests.
PROXY = Wording("the proxy's", "the proxy's requests", "the proxy's windows")
#: An export's proxy windows (or an export's mix) of requests the run already holds.
IN_RUN = Wording("windows already in the run", "the same requests", "the windows already in the run")


def verdict(
    fmt: str, shown: str, pairs: Sequence[tuple[Window, Window]], total: int, said: Wording = PROXY
) -> tuple[bool, str | None]:
    """Whether to import the file, and the run note that says why (None: nothing to say). At least half its
    windows repeating the proxy's: the same requests again, not imported; fewer: the file has requests of
    its own, imported without the windows that repeat the proxy's (the coordinator leaves them out at the
    import's commit). The note also says how many of the pairs the file gives another phase (a harness's
    warm-up that the proxy, without a matching --warmup, took for timed)."""
    if not pairs:
        return True, None
    what = f"{len(pairs)} of the {total} window(s) in {shown} ({fmt}) repeat {said.repeated}"
    tolerance = f"(start and end within {TOLERANCE_NS / 1e6:g} ms)"
    differ = sum(ours.phase != theirs.phase for ours, theirs in pairs)
    phases = (
        f"; {differ} of them have another phase in the file than the proxy gave them (give the proxy a"
        " --warmup that matches the harness's)"
        if differ
        else ""
    )
    if 2 * len(pairs) >= total:
        return False, (
            f"{what} {tolerance}: {said.again} again, not imported (each would be counted twice);"
            f" the export keeps {said.kept}{phases}"
        )
    return True, f"{what} {tolerance} and were left out: {said.kept} stand for those requests{phases}"
