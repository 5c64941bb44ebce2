"""Hostile inputs every fuzz target shares: JSON values of every type and size, raw JSON fragments no
encoder writes (NaN, 1e999, 5 000-digit integers, lone surrogates, 20 000-deep nesting), mutations of a
real document (wrong types, unknown keys, deleted keys) and byte-level damage (truncation, flipped and
inserted bytes, duplicated or deleted lines)."""

from __future__ import annotations

import copy
import json
from typing import Any, TypeAlias

from hypothesis import strategies as st

JSON: TypeAlias = Any  # None | bool | int | float | str | list[JSON] | dict[str, JSON]
Path: TypeAlias = tuple[str | int, ...]

#: Integers at the edges of every width something on the way may store them in.
EDGE_INTS = (0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30)
EDGE_FLOATS = (-0.0, 5e-324, 1e-300, 1e308, -1e308, 0.1, 1.5e9, 1.7e18)


def ints() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(EDGE_INTS), st.integers(), st.integers(min_value=2**62, max_value=2**70))


def floats() -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=False, allow_infinity=False))


def texts(max_size: int = 40) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=max_size),
        st.sampled_from(["", "\x00", "\n", "timed\n", " timed", "TIMED", "é", "\u2028", "a" * 300]),
    )


def scalars() -> st.SearchStrategy[JSON]:
    return st.one_of(st.none(), st.booleans(), ints(), floats(), texts())


def json_values(max_leaves: int = 12) -> st.SearchStrategy[JSON]:
    """Any JSON value (as Python), numbers of every size included."""
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts(12), inner, max_size=4)),
        max_leaves=max_leaves,
    )


def json_objects(max_leaves: int = 12) -> st.SearchStrategy[dict[str, JSON]]:
    return st.dictionaries(texts(12), json_values(max_leaves), max_size=5)


@st.composite
def raw_fragments(draw: st.DrawFn) -> str:
    """JSON text that no well-behaved encoder writes, but a peer (or an attacker) can send."""
    n = draw(st.integers(min_value=1, max_value=draw(st.sampled_from([10, 300, 5000, 20000]))))
    return draw(
        st.sampled_from(
            [
                "NaN",
                "Infinity",
                "-Infinity",
                "1e999",
                "-1e999",
                "1E400",
                "-0",
                "0.0e-99999",
                '"\\ud800"',
                '"\\udfff"',
                '"a\\u0000b"',
                "1" * n,
                "-" + "9" * n,
                "0." + "1" * n,
                "[" * n + "]" * n,
                '{"a":' * n + "1" + "}" * n,
                "[" * n,
                '"' + "x" * n + '"',
                "true" * 2,
                "",
            ]
        )
    )


class Doc:
    """A JSON tree whose leaves may be placeholders for raw fragments, and its encoding."""

    def __init__(self, tree: JSON, fragments: list[str]) -> None:
        self.tree = tree
        self.fragments = fragments

    def encode(self) -> bytes:
        text = json.dumps(self.tree, ensure_ascii=False)
        for i, fragment in enumerate(self.fragments):
            text = text.replace(json.dumps(_placeholder(i)), fragment, 1)
        return text.encode("utf-8", "surrogatepass")


def _placeholder(i: int) -> str:
    return f"\x00raw-fragment-{i}\x00"


def _paths(value: JSON, prefix: Path = ()) -> list[Path]:
    """Every place in the tree, the root included."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_paths(item, (*prefix, index)))
    return out


def _get(tree: JSON, path: Path) -> JSON:
    for step in path:
        tree = tree[step]
    return tree


def _set(tree: JSON, path: Path, value: JSON) -> JSON:
    if not path:
        return value
    _get(tree, path[:-1])[path[-1]] = value
    return tree


@st.composite
def mutated(draw: st.DrawFn, original: JSON, max_mutations: int = 3) -> Doc:
    """``original`` with one to ``max_mutations`` hostile changes: a value replaced by another type, a
    huge number or a raw fragment; a key deleted or added; a list item duplicated or dropped."""
    tree = copy.deepcopy(original)
    fragments: list[str] = []
    for _ in range(draw(st.integers(min_value=1, max_value=max_mutations))):
        path = draw(st.sampled_from(_paths(tree)))
        node = _get(tree, path)
        op = draw(st.sampled_from(["replace", "raw", "delete", "add_key", "duplicate"]))
        if op == "replace":
            tree = _set(tree, path, draw(json_values(6)))
        elif op == "raw":
            fragments.append(draw(raw_fragments()))
            tree = _set(tree, path, _placeholder(len(fragments) - 1))
        elif op == "delete" and path:
            del _get(tree, path[:-1])[path[-1]]
        elif op == "add_key" and isinstance(node, dict):
            node[draw(texts(12))] = draw(json_values(4))
        elif op == "duplicate" and isinstance(node, list) and node:
            node.append(copy.deepcopy(node[draw(st.integers(0, len(node) - 1))]))
    return Doc(tree, fragments)


@st.composite
def damaged(draw: st.DrawFn, data: bytes, max_damage: int = 3) -> bytes:
    """``data`` truncated, with bytes flipped, inserted or deleted, or lines dropped or repeated."""
    for _ in range(draw(st.integers(min_value=1, max_value=max_damage))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        op = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "drop_line", "repeat_line"]))
        if op == "truncate":
            data = data[:at]
        elif op == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
        elif op == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 16)) :]
        elif op in ("drop_line", "repeat_line"):
            lines = data.split(b"\n")
            index = draw(st.integers(0, len(lines) - 1))
            if op == "drop_line":
                del lines[index]
            else:
                lines.insert(index, lines[index])
            data = b"\n".join(lines)
    return data


def hostile_bytes() -> st.SearchStrategy[bytes]:
    """Bodies that are not JSON at all, or barely: random bytes, odd encodings, raw fragments alone."""
    return st.one_of(
        st.binary(max_size=300),
        st.sampled_from(
            [b"", b"\x00", b"{", b"[]", b"null", b"{}", b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00"]
        ),
        texts(60).map(lambda t: t.encode("utf-16")),
        raw_fragments().map(lambda t: t.encode("utf-8", "surrogatepass")),
        json_values().map(lambda v: json.dumps(v).encode()),
    )


def hostile_body(valid: st.SearchStrategy[JSON]) -> st.SearchStrategy[bytes]:
    """What a route may be sent: a mutation of a valid body, damaged bytes of one, or garbage."""
    encoded = valid.map(lambda v: json.dumps(v).encode())
    return st.one_of(
        valid.flatmap(mutated).map(Doc.encode),
        encoded.flatmap(damaged),
        hostile_bytes(),
    )
