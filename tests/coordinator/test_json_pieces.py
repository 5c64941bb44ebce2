"""The export's JSON in pieces is one JSON document, the same value as the whole encoded at once."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.core.json_pieces import canonical, json_pieces, wire

SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
SCALARS |= st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=12) | st.dictionaries(st.text(max_size=5), inner, max_size=6),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(1, 4))
def test_pieces_join_into_the_same_bytes_as_the_whole(value: Any, items: int) -> None:
    """Byte for byte: the export digest is taken over the pieces and must not change."""
    for encode in (wire, canonical):
        assert b"".join(json_pieces(value, encode, items)) == encode(value)


def test_long_lists_are_cut_and_numpy_scalars_and_int_keys_are_written() -> None:
    value = {"windows": [{"id": i, "w": np.float64(i / 3)} for i in range(1201)], "by_node": {0: "a"}}
    pieces = list(json_pieces(value, items=500))
    assert max(len(p) for p in pieces) < len(b"".join(pieces)) / 2  # no piece is the whole list
    assert json.loads(b"".join(pieces)) == {
        "windows": [{"id": i, "w": i / 3} for i in range(1201)],
        "by_node": {"0": "a"},
    }


#: Values where orjson and json write differently: tiny and huge floats, DEL, non-ASCII, big integers.
AWKWARD = st.sampled_from([1e-5, 5.28e-05, 1e-7, 1e16, 1.5e300, -2e-9, "a\x7fb", "é", "\u2028", 2**70, "9e9"])
#: Strings that hold such numbers, after the characters a number follows, and quotes and backslashes before
#: them; tiny numbers with one- and two-digit exponents, and the smallest denormal.
AWKWARD |= st.sampled_from([",1e-5,", ":0.00001]", '\\",1e-7}', '\\\\",[2e-9]', "[1e-9,", "1e-9"])
AWKWARD |= st.sampled_from([1e-9, -3.5e-6, 1e-10, 5e-324, 1e-300, 0.0001, 1.2e-4])


@settings(max_examples=400, deadline=None)
@given(
    st.recursive(
        SCALARS | AWKWARD,
        lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=4), inner, max_size=5),
        max_leaves=30,
    )
)
def test_the_digest_form_is_what_json_dumps_writes(value: Any) -> None:
    """orjson makes the digest's bytes only where they are json's: the digest of an export never moves."""
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def test_the_digest_form_of_numbers_orjson_writes_otherwise_is_jsons_inside_a_string_untouched() -> None:
    value = {"s": '",1e-9,"', "t": "x\\", "v": [1e-9, 0.00001, 2.5e-7], ",1e-9,": 1e-9}
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    assert b'",1e-9,"' in canonical(value)  # the key's and the string's text are as they were


def test_the_digest_form_of_non_string_keys_is_jsons() -> None:
    assert canonical({2: "b", 1: [0.1, None]}) == b'{"1":[0.1,null],"2":"b"}'
