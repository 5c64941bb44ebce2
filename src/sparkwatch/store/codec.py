"""Named numpy columns as one compact blob, and back, bit for bit.

Integer columns are stored as differences from the value before (a clock that ticks every 100 ms becomes a
column of near-equal numbers), float columns as the XOR of each value's bits with the value before (a
reading that repeats, or moves in its low digits only, leaves mostly zero bytes); each column's bytes are
then transposed so the n-th byte of every value sits together (the zero high bytes form long runs), and the
whole is deflated once. Both steps are exact: NaN payloads, -0.0 and integer wrap-around survive.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import orjson

from sparkwatch.store.tx import StoreError

MAGIC = b"SWC1"
_HEAD = struct.Struct("<4sI")  # magic, header length
#: zlib level: 6 (the default) is within 2 % of 9 on sample blocks here, at a third of the time.
LEVEL = 6
_KINDS: Mapping[str, np.dtype[Any]] = MappingProxyType({"i": np.dtype(np.int64), "f": np.dtype(np.float64)})


class CodecError(StoreError):
    """A blob this codec did not write (or a damaged one): a store error like any other, so an export or a
    retention pass that meets one says so in one line instead of failing with a traceback."""


def _transposed(raw: np.ndarray) -> bytes:
    return raw.view(np.uint8).reshape(-1, 8).T.tobytes()


def _untransposed(data: bytes, count: int) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).reshape(8, count).T.copy().view(np.uint64).reshape(count)


def encode(columns: Mapping[str, np.ndarray], strings: list[str]) -> bytes:
    """``columns``: int64 or float64 arrays of any lengths; ``strings``: a table the columns may index."""
    names, kinds, counts, parts = [], [], [], []
    for name, column in columns.items():
        kind = "f" if column.dtype.kind == "f" else "i"
        values = np.ascontiguousarray(column, dtype=_KINDS[kind])
        bits = values.view(np.uint64)
        if kind == "i":
            steps = np.diff(bits, prepend=np.uint64(0))  # modular: wraps exactly like the cumsum back
        else:
            steps = bits ^ np.concatenate((np.zeros(1, np.uint64), bits[:-1]))
        names.append(name)
        kinds.append(kind)
        counts.append(len(values))
        parts.append(_transposed(steps))
    header = orjson.dumps({"names": names, "kinds": kinds, "counts": counts, "strings": strings})
    return _HEAD.pack(MAGIC, len(header)) + header + zlib.compress(b"".join(parts), LEVEL)


def decode(blob: bytes) -> tuple[dict[str, np.ndarray], list[str]]:
    """The columns and string table :func:`encode` was given."""
    try:
        magic, size = _HEAD.unpack_from(blob)
        if magic != MAGIC:
            raise CodecError("not a sparkwatch column block")
        header = orjson.loads(blob[_HEAD.size : _HEAD.size + size])
        payload = zlib.decompress(blob[_HEAD.size + size :])
    except (struct.error, orjson.JSONDecodeError, zlib.error) as exc:
        raise CodecError(f"damaged column block: {exc}") from None
    columns: dict[str, np.ndarray] = {}
    at = 0
    for name, kind, count in zip(header["names"], header["kinds"], header["counts"], strict=True):
        steps = _untransposed(payload[at : at + 8 * count], count)
        at += 8 * count
        if kind == "i":
            columns[name] = np.cumsum(steps, dtype=np.uint64).view(np.int64)
        else:
            columns[name] = np.bitwise_xor.accumulate(steps).view(np.float64)
    if at != len(payload):
        raise CodecError("damaged column block: its columns do not fill it")
    return columns, list(header["strings"])
