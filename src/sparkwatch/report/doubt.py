"""Whether a run's power and energy figures rest mostly on windows that are not ``ok``: one rule, read from
the export alone, for every place that shows those figures (the printed table, the HTML report, the
``--json`` outcome), so none of them quotes as measured what another marks as doubtful."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

#: The figures are marked when windows not ``ok`` hold more than this share of the measured time: they are
#: then mostly theirs (a run of 4-token requests shorter than two samples read 26 W against 56 W of truth,
#: and the table said nothing). Not in the ``run`` scope, whose figures are the whole run's, not the windows'.
DOUBTFUL_SHARE_RATIO = 0.5
DOUBT_MARK = "*"


def measured_windows(export: dict[str, Any]) -> list[dict[str, Any]]:
    """The windows the figures are made of: those in the scope."""
    return [w for w in export["windows"] if w["in_scope"]]


def doubtful_share(measured: Sequence[dict[str, Any]], scope: str = "request") -> float:
    """The share of the measured windows' time (in the ``decode`` scope, first to last token: what is
    measured of each) in windows whose verdict is not ``ok`` (0 without any)."""
    lengths = [(_measured_ns(w, scope), w["verdict"] != "ok") for w in measured]
    whole = sum(length for length, _ in lengths)
    if whole <= 0:
        return 1.0 if any(doubt for _, doubt in lengths) else 0.0
    return sum(length for length, doubt in lengths if doubt) / whole


def _measured_ns(window: dict[str, Any], scope: str) -> int:
    start, end = ("t_first_token_ns", "t_last_token_ns") if scope == "decode" else ("t_start_ns", "t_end_ns")
    if window.get(start) is None or window.get(end) is None:
        return 0  # no decode stamps: nothing of it measured in that scope
    return int(window[end]) - int(window[start])


def export_doubtful_share(export: dict[str, Any]) -> float | None:
    """:func:`doubtful_share` of the export's measured windows in its scope; ``None`` in the ``run`` scope,
    where the figures do not rest on the windows at all, and where no window was measured (no share of
    nothing: not 0 %)."""
    scope, measured = export["method"]["scope"], measured_windows(export)
    return None if scope == "run" or not measured else doubtful_share(measured, scope)


def figures_doubtful(export: dict[str, Any]) -> bool:
    """Whether the export's power and energy figures (and J/token) are to carry :data:`DOUBT_MARK`."""
    return share_doubtful(export_doubtful_share(export))


def share_doubtful(share: float | None) -> bool:
    """Whether :func:`export_doubtful_share`'s ``share`` makes the figures doubtful (for a caller that
    reports the share too: the windows read once)."""
    return share is not None and share > DOUBTFUL_SHARE_RATIO


def doubt_mark(export: dict[str, Any]) -> str:
    """:data:`DOUBT_MARK` where :func:`figures_doubtful`, else nothing."""
    return DOUBT_MARK if figures_doubtful(export) else ""


def doubt_note(export: dict[str, Any]) -> str:
    """The line that explains the mark: how many measured windows are not ok and what share of their time."""
    measured = measured_windows(export)
    doubtful = [w for w in measured if w["verdict"] != "ok"]
    return (
        f"{DOUBT_MARK} low confidence: {len(doubtful)} of {len(measured)} measured window(s),"
        f" {_over_half(doubtful_share(measured, export['method']['scope']))} of their time, are not ok"
        " (below), and"
        " these figures are mostly theirs: do not quote them as measured"
    )


def _over_half(share: float) -> str:
    """The share as a percentage to one decimal, rounded up: a share just over the threshold (0.504) read
    "50%" beside "mostly theirs" (rounded first to 1e-6 of a permille: 0.29 * 1000 is 290.00000000000006)."""
    return f"{math.ceil(round(share * 1000, 6)) / 10:g}%"
