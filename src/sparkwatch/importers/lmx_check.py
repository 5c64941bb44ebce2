"""lmx's status lines as a check on the proxy's windows, when ``sparkwatch run`` has both.

The proxy stamps each request where it passes (on the coordinator's clock); lmx's status lines are
stamped on the same clock (the proxy's) when they reach ``sparkwatch run``, after lmx read the chunk from
the proxy and printed the line. Both see the same requests, so the timed counts must be equal and each first
token must agree within the pipe latency (``TOLERANCE_NS``) plus the proxy's clock uncertainty (the fit may
move between the two stamps). The export
keeps the proxy's windows, which are stamped more directly; the status windows are not imported.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sparkwatch.core.windows import Window

#: How far lmx's first-token line may arrive from the proxy's first-token stamp: the chunk's way from the
#: proxy to lmx, lmx's print, the pipe and sparkwatch's read (a few ms measured on a loaded 2-core host).
TOLERANCE_NS = 50_000_000
KEPT = "the export keeps the proxy's windows; lmx's status lines were read only to check them (not imported)"


@dataclass(frozen=True, slots=True)
class CrossCheck:
    ok: bool
    notes: list[str]


def cross_check(
    proxy: Sequence[Window], status: Sequence[Window], tolerance_ns: int = TOLERANCE_NS
) -> CrossCheck:
    """Equal counts of timed windows, and first tokens paired in order agreeing within the tolerance."""
    proxied = sorted((w for w in proxy if w.phase == "timed" and not w.failed), key=_first_or_start)
    lmx = sorted((w for w in status if w.phase == "timed"), key=_first_or_start)
    slack_ns = tolerance_ns + max((_clock_uncertainty_ns(w) for w in proxy), default=0)
    problems: list[str] = []
    if len(proxied) != len(lmx):
        problems.append(f"the proxy has {len(proxied)} timed window(s), lmx's status lines {len(lmx)}")
        warm_proxy = sum(w.phase == "warmup" for w in proxy)
        warm_lmx = sum(w.phase == "warmup" for w in status)
        if warm_proxy != warm_lmx:
            problems.append(
                f"the proxy counted {warm_proxy} warm-up request(s), lmx {warm_lmx}:"
                f" give sparkwatch run --warmup {warm_lmx}"
            )
        return CrossCheck(False, [f"lmx-status cross-check FAILED: {'; '.join(problems)}", KEPT])
    gaps_ns: list[int] = []
    for p, s in zip(proxied, lmx, strict=True):
        if p.t_first_token_ns is None or s.t_first_token_ns is None:
            problems.append(f"{p.id} and {s.id}: no first token to compare")
        else:
            gaps_ns.append(s.t_first_token_ns - p.t_first_token_ns)
    worst_ns = max((abs(g) for g in gaps_ns), default=0)
    if worst_ns > slack_ns:
        problems.append(
            f"first tokens differ by up to {worst_ns / 1e6:.1f} ms (tolerance {slack_ns / 1e6:.1f} ms)"
        )
    if problems:
        return CrossCheck(False, [f"lmx-status cross-check FAILED: {'; '.join(problems)}", KEPT])
    median_ms = statistics.median(gaps_ns) / 1e6 if gaps_ns else 0.0
    passed = (
        f"lmx-status cross-check passed: {len(lmx)} timed window(s) from the proxy and from lmx's status"
        f" lines; first tokens agree within {worst_ns / 1e6:.1f} ms (lmx's line later by a median"
        f" {median_ms:.1f} ms; tolerance {slack_ns / 1e6:.1f} ms)"
    )
    return CrossCheck(True, [passed, KEPT])


def _first_or_start(w: Window) -> int:
    return w.t_first_token_ns if w.t_first_token_ns is not None else w.t_start_ns


def _clock_uncertainty_ns(w: Window) -> int:
    value = w.source.get("clock_uncertainty_ns")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
