"""How a message names many windows (or runs, marks, series): the first few, then how many more. Text only,
so the light commands (`runs end`) and the store's refusals say it without the core's arrays."""

from __future__ import annotations

from collections.abc import Sequence

#: How many window ids a reason names before it says how many more there are.
IDS_NAMED = 5


def name_ids(ids: Sequence[str], total: int | None = None, quoted: bool = False) -> str:
    """``a, b, c`` — at most ``IDS_NAMED`` of them, then how many more of ``total`` (default: all of
    ``ids``, which may be only the first few). The one way every message names many windows."""
    total = len(ids) if total is None else total
    shown = ", ".join(repr(i) if quoted else i for i in ids[:IDS_NAMED])
    return shown if total <= IDS_NAMED else f"{shown} and {total - IDS_NAMED} more"
