"""Split a windows body into its top-level members without one long parse.

Parsing a 30 MB body in one call (pydantic's or the standard library's) holds the GIL for most of a
second, and so stalls the event loop even from a worker thread. Here the object is walked member by member
with the standard decoder's ``raw_decode``, and the ``windows`` array element by element: each call parses
one small value, so the interpreter can switch threads between calls. The array's elements are returned as
spans of the text, to be validated a slice at a time by the caller. A key given twice in one object is
refused here (a validator would keep the last, and the client meant one of them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sparkwatch_agent.shared.strict_text import whole_number

#: The member whose elements are returned as spans rather than values.
SPANNED = "windows"
_SPACE = re.compile(r"[ \t\n\r]*")


class ScanError(ValueError):
    """The body is not one JSON object, or its array is too long; ``loc`` names the member at fault."""

    def __init__(self, message: str, loc: str = "") -> None:
        super().__init__(message)
        self.loc = loc


class _TooMany(ValueError):
    pass


class _Repeated(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Repeated()
    return out


#: An integer of more digits than a double holds is said as that (``int()`` of one past 4300 digits told the
#: client to call ``sys.set_int_max_str_digits()``).
_DECODER = json.JSONDecoder(
    parse_constant=_refuse_constant, object_pairs_hook=_unique, parse_int=whole_number
)


@dataclass(frozen=True, slots=True)
class Scanned:
    """The body's members; ``spans`` holds (start, end) of each ``windows`` element when it is an array."""

    text: str
    members: dict[str, Any]
    spans: list[tuple[int, int]] | None


def scan(raw: bytes, max_elements: int) -> Scanned:
    """The members of the JSON object in ``raw``; stops counting the array past ``max_elements`` + 1."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScanError(f"body is not UTF-8 (byte {exc.start})") from None
    try:
        return _object(text, max_elements)
    except ScanError:
        raise
    except _TooMany as exc:
        raise ScanError(str(exc), SPANNED) from None
    except (ValueError, RecursionError) as exc:
        raise ScanError(f"invalid JSON: {str(exc)[:200]}") from None


def _object(text: str, max_elements: int) -> Scanned:
    members: dict[str, Any] = {}
    spans: list[tuple[int, int]] | None = None
    at = _expect(text, _skip(text, 0), "{")
    at = _skip(text, at)
    if text.startswith("}", at):
        return Scanned(text, members, None)
    while True:
        key, at = _DECODER.raw_decode(text, _skip(text, at))
        if not isinstance(key, str):
            raise ValueError(f"object key expected at char {at}")
        if key in members:
            raise ScanError("given more than once in one object", key)
        at = _skip(text, _expect(text, _skip(text, at), ":"))
        if key == SPANNED and text.startswith("[", at):
            spans, at = _elements(text, at + 1, max_elements)
            members[key] = spans
        else:
            members[key], at = _value(text, at, key)
            if key == SPANNED:
                spans = None
        at = _skip(text, at)
        if text.startswith("}", at):
            break
        at = _expect(text, at, ",")
    if _skip(text, at + 1) != len(text):
        raise ValueError(f"extra data at char {_skip(text, at + 1)}")
    return Scanned(text, members, spans)


def _elements(text: str, at: int, max_elements: int) -> tuple[list[tuple[int, int]], int]:
    """Spans of an array's elements, from just after its ``[`` to just after its ``]``."""
    spans: list[tuple[int, int]] = []
    at = _skip(text, at)
    if text.startswith("]", at):
        return spans, at + 1
    while True:
        _, end = _value(text, at, f"{SPANNED}.{len(spans)}")
        spans.append((at, end))
        if len(spans) > max_elements:
            raise _TooMany(f"more than {max_elements} items")
        at = _skip(text, end)
        if text.startswith("]", at):
            return spans, at + 1
        at = _skip(text, _expect(text, at, ","))


def _value(text: str, at: int, loc: str) -> tuple[Any, int]:
    """The value at ``at`` and the index after it; a repeated key is a ScanError at its path under
    ``loc``."""
    try:
        return _DECODER.raw_decode(text, at)
    except _Repeated:
        path = _first_repeat(_PAIRS.raw_decode(text, at)[0])
        raise ScanError("given more than once in one object", ".".join([loc, *path])) from None


class _Pairs(list[tuple[str, Any]]):
    """An object's members in the body's order, repeats kept (only to say where a refused repeat is)."""


_PAIRS = json.JSONDecoder(object_pairs_hook=_Pairs, parse_int=whole_number)


def _first_repeat(value: Any) -> list[str]:
    """The path to the first key repeated in ``value`` (an object's own keys before those of its members,
    members and elements in order); [] when none is."""
    if isinstance(value, _Pairs):
        seen: set[str] = set()
        for key, _ in value:
            if key in seen:
                return [key]
            seen.add(key)
        members = [(key, member) for key, member in value]
    elif isinstance(value, list):
        members = [(str(n), element) for n, element in enumerate(value)]
    else:
        return []
    for key, member in members:
        path = _first_repeat(member)
        if path:
            return [key, *path]
    return []


def _skip(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _expect(text: str, at: int, char: str) -> int:
    if not text.startswith(char, at):
        raise ValueError(f"{char!r} expected at char {at}")
    return at + 1
