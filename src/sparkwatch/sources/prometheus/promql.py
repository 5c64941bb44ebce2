"""PromQL text made from values: a string literal, and a regular expression that matches a text alone (a
node's name in a selector is the user's, and may hold any character)."""

from __future__ import annotations

import json

#: What Go's regexp.QuoteMeta escapes (Python's re.escape also escapes a space, which RE2 refuses).
_REGEX_META = frozenset("\\.+*?()|[]{}^$")


def literal(text: str) -> str:
    """``text`` as a PromQL (RE2) regular expression that matches it alone."""
    return "".join(f"\\{c}" if c in _REGEX_META else c for c in text)


def quoted(text: str) -> str:
    """A PromQL string literal (Go's escapes, which JSON's are; non-ASCII as it is)."""
    return json.dumps(text, ensure_ascii=False)
