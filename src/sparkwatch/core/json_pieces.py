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

ITEMS = 500
Encoder = Callable[[Any], bytes]


def wire(value: Any) -> bytes:
    """Compact JSON for answers: numpy scalars as numbers, non-string keys as strings."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def canonical(value: Any) -> bytes:
    """The export digest's form: sorted keys, no spaces, ASCII: ``json.dumps(value, sort_keys=True,
    separators=(",", ":"))``, byte for byte for any value without NaN or infinity (which the export never
    holds; orjson writes them ``null``, as the export's own file has them). orjson makes it, 8x faster,
    wherever its bytes are provably json's; anything it writes otherwise goes to json itself."""
    try:
        out = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a non-string key, an integer beyond 64 bits, a type orjson does not take
        return _by_json(value)
    return out if _as_json_writes(out) else _by_json(value)


def _by_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _as_json_writes(out: bytes) -> bool:
    """Whether orjson's bytes are json's: all ASCII but DEL (json escapes it and every non-ASCII character),
    and no number in the two forms where they differ, below 1e-4 (``0.0000…``) or an exponent (``1e16``,
    ``1e-7``; json writes ``1e+16``, ``1e-07``). A string holding such a pattern only costs the fast path."""
    if not out.isascii() or b"\x7f" in out or b"0.0000" in out:
        return False
    chars = np.frombuffer(out, dtype=np.uint8)
    e = np.flatnonzero(chars[1:-1] == ord("e")) + 1
    before, after = chars[e - 1], chars[e + 1]
    exponent = (before >= ord("0")) & (before <= ord("9"))
    exponent &= ((after >= ord("0")) & (after <= ord("9"))) | (after == ord("-"))
    return not bool(exponent.any())


def json_pieces(value: Any, encode: Encoder = wire, items: int = ITEMS) -> Iterator[bytes]:
    """``encode(value)`` in pieces; dict keys are sorted when ``encode`` is :func:`canonical`."""
    sort = encode is canonical
    if isinstance(value, dict):
        yield b"{"
        for n, (key, item) in enumerate(sorted(value.items()) if sort else value.items()):
            yield (b"," if n else b"") + encode(str(key)) + b":"
            yield from json_pieces(item, encode, items)
        yield b"}"
    elif isinstance(value, list) and len(value) > items:
        yield b"["
        for start in range(0, len(value), items):
            yield (b"," if start else b"") + encode(value[start : start + items])[1:-1]
        yield b"]"
    elif isinstance(value, list):
        yield b"["
        for n, item in enumerate(value):
            if n:
                yield b","
            yield from json_pieces(item, encode, items)
        yield b"]"
    else:
        yield encode(value)
