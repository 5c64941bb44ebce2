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

import orjson

ITEMS = 500
Encoder = Callable[[Any], bytes]


def wire(value: Any) -> bytes:
    """Compact JSON for answers: numpy scalars as numbers, non-string keys as strings."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def canonical(value: Any) -> bytes:
    """The export digest's form: sorted keys, no spaces, ASCII (``json.dumps``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


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
