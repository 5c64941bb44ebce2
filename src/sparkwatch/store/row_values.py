"""A stored column's value judged and said: what the store's reads check a row edited or damaged outside
sparkwatch with, and how its one-line refusal shows the value (``Damaged``, store/tx.py)."""

from __future__ import annotations

from typing import Any


def is_integer(value: Any) -> bool:
    """An integer as the store writes one (SQLite hands back text, a REAL or a blob for a damaged column)."""
    return isinstance(value, int) and not isinstance(value, bool)


def shown_value(value: Any) -> str:
    """A column's value for a one-line message: repr, cut at 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
