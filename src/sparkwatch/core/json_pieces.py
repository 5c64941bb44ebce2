"""JSON for very large values (a 500 000-window export is ~400 MB), made in pieces.

One ``json.dumps`` or ``orjson.dumps`` call over a whole export holds the GIL for seconds, so even from a
worker thread it stalls the coordinator's event loop for as long. Here every long list is encoded ``ITEMS``
items per call, and other threads get their turns in between. The pieces joined are one JSON document,
byte for byte what the encoder makes of the whole value at once (so a digest over them is unchanged).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import orjson

from sparkwatch.core.window_rows import is_rows

ITEMS = 500
Encoder = Callable[[Any], bytes]


def wire(value: Any) -> bytes:
    """Compact JSON for answers: numpy scalars as numbers, non-string keys as strings."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def canonical(value: Any) -> bytes:
    """The export digest's form: sorted keys, no spaces, ASCII: ``json.dumps(value, sort_keys=True,
    separators=(",", ":"))``, byte for byte for any value without NaN or infinity (which the export never
    holds; orjson writes them ``null``, as the export's own file has them). orjson makes it, 8x faster;
    the numbers it writes otherwise, below 1e-4 (``1e-9``, ``0.00001``: json writes ``1e-09``, ``1e-05``),
    are rewritten as json writes them, and anything else json would write differently goes to json."""
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a non-string key, an integer beyond 64 bits, a type orjson does not take
        return _by_json(value)
    if not out.isascii() or b"\x7f" in out or _unsigned_exponent(out):
        return _by_json(value)  # json escapes DEL and non-ASCII, and signs every exponent
    if b"e-" in out or b"0.0000" in out:
        return _small_floats_as_json_writes(out)
    return out


def _by_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _unsigned_exponent(out: bytes) -> bool:
    """A digit, ``e``, a digit: an exponent without its sign, which json never writes (``1e+16``)."""
    if b"e" not in out:
        return False
    chars = np.frombuffer(out, dtype=np.uint8)
    e = np.flatnonzero(chars[1:-1] == ord("e")) + 1
    before, after = chars[e - 1], chars[e + 1]
    digits = (before >= ord("0")) & (before <= ord("9")) & (after >= ord("0")) & (after <= ord("9"))
    return bool(digits.any())


_NUMBER_CHARS = frozenset(b"0123456789.-+e")


def _small_floats_as_json_writes(out: bytes) -> bytes:
    """orjson's bytes with each number below 1e-4 outside a string written as ``float.__repr__`` writes it
    (what json writes: orjson's shortest digits read back as the same double). Found from their rare
    parts (``e-``, ``0.0000``) and widened to the whole token, which stands after ``[``, ``:`` or ``,``
    (or is the whole) and before ``,``, ``]`` or ``}`` (or the end)."""
    found = {_token(out, at) for pattern in (b"e-", b"0.0000") for at in _finds(out, pattern)}
    spans = sorted(span for span in found if span is not None)
    inside = _inside_strings(out, [start for start, _ in spans]) if spans else []
    parts, at = [], 0
    for (start, end), quoted in zip(spans, inside, strict=True):
        if not quoted:
            parts += [out[at:start], repr(float(out[start:end])).encode()]
            at = end
    return b"".join([*parts, out[at:]]) if parts else out


def _finds(out: bytes, pattern: bytes) -> list[int]:
    found, at = [], out.find(pattern)
    while at >= 0:
        found.append(at)
        at = out.find(pattern, at + 1)
    return found


def _token(out: bytes, at: int) -> tuple[int, int] | None:
    """The number token around ``at`` as (start, end), or None where ``at`` is in no number token."""
    start, end = at, at
    while start > 0 and out[start - 1] in _NUMBER_CHARS:
        start -= 1
    while end < len(out) and out[end] in _NUMBER_CHARS:
        end += 1
    if (start > 0 and out[start - 1] not in b"[:,") or (end < len(out) and out[end] not in b",]}"):
        return None
    token = out[start:end]
    try:
        float(token)
    except ValueError:
        return None
    return (start, end) if token[:1] in b"-0123456789" else None


def _inside_strings(out: bytes, positions: list[int]) -> list[bool]:
    """Whether each position lies inside a JSON string: after an odd number of the quotes that delimit
    strings (a quote after an odd run of backslashes is escaped, part of its string)."""
    chars = np.frombuffer(out, dtype=np.uint8)
    quotes = np.flatnonzero(chars == ord('"'))
    if b"\\" in out:
        backslash = chars == ord("\\")
        last_other = np.maximum.accumulate(np.where(backslash, -1, np.arange(len(chars))))
        before = quotes - 1
        run = np.where(before >= 0, before - last_other[np.maximum(before, 0)], 0)
        quotes = quotes[run % 2 == 0]
    return [bool(n % 2) for n in np.searchsorted(quotes, positions).tolist()]


def json_pieces(value: Any, encode: Encoder = wire, items: int = ITEMS) -> Iterator[bytes]:
    """``encode(value)`` in pieces; dict keys are sorted when ``encode`` is :func:`canonical`. The export's
    windows (a :class:`~sparkwatch.core.window_rows.WindowRows`) are made ``items`` at a time."""
    sort = encode is canonical
    if isinstance(value, dict):
        yield b"{"
        for n, (key, item) in enumerate(sorted(value.items()) if sort else value.items()):
            yield (b"," if n else b"") + encode(str(key)) + b":"
            yield from json_pieces(item, encode, items)
        yield b"}"
    elif is_rows(value) and len(value) > items:
        yield b"["
        for start in range(0, len(value), items):
            yield (b"," if start else b"") + encode(value[start : start + items])[1:-1]
        yield b"]"
    elif is_rows(value):
        yield b"["
        for n, item in enumerate(value):
            if n:
                yield b","
            yield from json_pieces(item, encode, items)
        yield b"]"
    else:
        yield encode(value)
