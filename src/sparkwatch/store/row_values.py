"""A stored column's value judged and said: what the store's reads check a row edited or damaged outside
sparkwatch with, and how its one-line refusal shows the value (``Damaged``, store/tx.py)."""

from __future__ import annotations

from typing import Any

from sparkwatch_agent.shared.strict_text import cut_short

#: How much of a damaged column's value a refusal quotes.
SHOWN_VALUE_CHARS = 40


def is_integer(value: Any) -> bool:
    """An integer as the store writes one (SQLite hands back text, a REAL or a blob for a damaged column)."""
    return isinstance(value, int) and not isinstance(value, bool)


def shown_value(value: Any) -> str:
    """A column's value for a one-line message: repr, cut at 40 characters."""
    return cut_short(repr(value), SHOWN_VALUE_CHARS)
