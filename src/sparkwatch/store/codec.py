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

from sparkwatch.store.tx import Damaged

MAGIC = b"SWC1"
_HEAD = struct.Struct("<4sI")  # magic, header length
#: zlib level: 3 keeps sample blocks within 2 % of 6 (the default; 6 is within 2 % of 9) on the synthetic
#: busy run's frames (benchmarks/store_size.py; ~7 % on the sim's repeating idle ones) at about a third of
#: its time; at 6, zlib was ~10 % of ingest's per-sample cost. Any level reads back the same.
LEVEL = 3
_KINDS: Mapping[str, np.dtype[Any]] = MappingProxyType({"i": np.dtype(np.int64), "f": np.dtype(np.float64)})


class CodecError(Damaged):
    """A blob this codec did not write (or a damaged one): damage, as a row edited outside sparkwatch is, so
    an export that meets one says so in one line (409 ``damaged`` from the API, not a conflict a retry
    could mend) instead of failing with a traceback."""


def _untransposed(data: bytes, columns: int, count: int) -> np.ndarray:
    """``columns`` transposed columns of ``count`` values each, back to one row of uint64 per column."""
    raw = np.frombuffer(data, dtype=np.uint8).reshape(columns, 8, count)
    return np.ascontiguousarray(raw.transpose(0, 2, 1)).view(np.uint64).reshape(columns, count)


def _runs(names: list[str], kinds: list[str], counts: list[int]) -> list[tuple[str, int, list[str]]]:
    """Consecutive columns of one kind and length, each decoded in one 2-D pass (as they were encoded)."""
    runs: list[tuple[str, int, list[str]]] = []
    for name, kind, count in zip(names, kinds, counts, strict=True):
        if kind not in _KINDS or not isinstance(count, int) or count < 0:
            raise CodecError(f"damaged column block: column {name!r} of kind {kind!r} and length {count!r}")
        if runs and runs[-1][0] == kind and runs[-1][1] == count:
            runs[-1][2].append(name)
        else:
            runs.append((kind, count, [name]))
    return runs


def encode(columns: Mapping[str, np.ndarray], strings: list[str]) -> bytes:
    """``columns``: int64 or float64 arrays of any lengths; ``strings``: a table the columns may index."""
    names, kinds, counts = list(columns), [], []
    groups: dict[tuple[str, int], list[str]] = {}  # columns of one kind and length: one 2-D pass each
    for name, column in columns.items():
        kind = "f" if column.dtype.kind == "f" else "i"
        kinds.append(kind)
        counts.append(len(column))
        groups.setdefault((kind, len(column)), []).append(name)
    parts: dict[str, np.ndarray] = {}
    for (kind, count), group in groups.items():
        parts.update(zip(group, _steps(kind, count, [columns[name] for name in group]), strict=True))
    header = orjson.dumps({"names": names, "kinds": kinds, "counts": counts, "strings": strings})
    payload = b"".join(parts[name].data for name in names)
    return _HEAD.pack(MAGIC, len(header)) + header + zlib.compress(payload, LEVEL)


def _steps(kind: str, count: int, group: list[np.ndarray]) -> np.ndarray:
    """Each column's steps (see the module's docstring), its bytes transposed: one row per column.

    Done on the group's columns at once (a block has some 30 columns in 4 such groups): the numpy calls,
    not the bytes, were the cost of a column."""
    bits = np.array(group, dtype=_KINDS[kind]).view(np.uint64).reshape(len(group), count)
    steps = bits.copy()
    if kind == "i":
        steps[:, 1:] -= bits[:, :-1]  # modular: wraps exactly like the cumsum back
    else:
        steps[:, 1:] ^= bits[:, :-1]
    return np.ascontiguousarray(steps.view(np.uint8).reshape(len(group), count, 8).transpose(0, 2, 1))


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
    for kind, count, names in _runs(header["names"], header["kinds"], header["counts"]):
        size = 8 * count * len(names)
        if at + size > len(payload):
            raise CodecError("damaged column block: shorter than its columns")
        steps = _untransposed(payload[at : at + size], len(names), count)
        at += size
        if kind == "i":
            values = np.cumsum(steps, axis=1, dtype=np.uint64).view(np.int64)
        else:
            values = np.bitwise_xor.accumulate(steps, axis=1).view(np.float64)
        columns.update(zip(names, values, strict=True))
    if at != len(payload):
        raise CodecError("damaged column block: its columns do not fill it")
    return columns, list(header["strings"])
