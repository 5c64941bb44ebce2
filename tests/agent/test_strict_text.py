"""shared.strict_text: JSON and TOML read so that what Python's parsers let through to fail later (inf from
1e400, integers past a double, digit limits, RecursionError) is refused where it is read, in words."""

from __future__ import annotations

import math

import pytest

from sparkwatch_agent.shared.strict_text import (
    MAX_INT_DIGITS,
    TextFormatError,
    loads_json,
    loads_toml,
    whole_number,
)


def test_json_reads_what_standard_json_reads() -> None:
    text = '{"a": [1, -2.5e300, 1e-400, null, true, "\\u00e9"], "b": ' + "9" * MAX_INT_DIGITS + "}"
    assert loads_json(text) == {"a": [1, -2.5e300, 0.0, None, True, "é"], "b": int("9" * MAX_INT_DIGITS)}
    assert math.isfinite(float(loads_json(text)["b"]))  # the largest integer it takes is still a double
    assert loads_json(b'{"x": 1}') == {"x": 1}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{nope", "is not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ('{"x": NaN}', "contains NaN, not a number JSON allows (null says unknown)"),
        ("[-Infinity]", "contains -Infinity, not a number JSON allows (null says unknown)"),
        ("[1e400]", "contains 1e400, a number too large to store"),
        ("[-1.000000000000000000000000001e999]", "contains -1.00000000000000000000…, a number too large"),
        ("[" + "1" * (MAX_INT_DIGITS + 1) + "]", f"contains an integer of {MAX_INT_DIGITS + 1} digits"),
        ("[-" + "1" * 5000 + "]", "contains an integer of 5000 digits, a number too large to store"),
        ("[" * 100_000 + "]" * 100_000, "is JSON nested too deep to read"),
        (b"\xff\xfe{}", "is not UTF-8 text (byte 0xff at offset 0)"),
        (b'{"a": "\xc3"}', "is not UTF-8 text (byte 0xc3 at offset 7)"),
    ],
)
def test_json_refusals_are_one_predicate(text: str | bytes, said: str) -> None:
    with pytest.raises(TextFormatError) as refused:
        loads_json(text)
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value), refused.value


def test_a_key_named_twice_is_refused_only_where_keys_must_be_unique() -> None:
    text = '{"a": {"b": 1, "c": 2, "b": 3}}'
    assert loads_json(text) == {"a": {"b": 3, "c": 2}}  # a file: as every JSON reader takes it
    with pytest.raises(TextFormatError, match=r'^names the key "b" twice in one object$'):
        loads_json(text, unique_keys=True)  # a request: refused
    assert loads_json('[{"b": 1}, {"b": 2}]', unique_keys=True) == [{"b": 1}, {"b": 2}]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a = ", "Invalid value (at end of document)"),
        ("a = " + "[" * 2000 + "]" * 2000, "nested too deep to read"),
        ("a = " + "{b = " * 2000 + "1" + "}" * 2000, "nested too deep to read"),
        ("a = " + "1" * 5000, "an integer too long to read"),
    ],
)
def test_toml_refusals_are_the_detail_after_not_valid_toml(text: str, said: str) -> None:
    with pytest.raises(TextFormatError) as refused:
        loads_toml(text)
    assert str(refused.value) == said


def test_toml_reads_what_tomllib_reads_within_64_bits() -> None:
    """inf is TOML (a caller's range check refuses it where it is no value); an integer past 64 bits is
    not (TOML's own bound, which tomllib does not apply)."""
    assert loads_toml("a = [1, 2]\n[b]\nc = inf\n") == {"a": [1, 2], "b": {"c": math.inf}}
    top = 2**63 - 1
    assert loads_toml(f"a = {top}\nb = {-top - 1}") == {"a": top, "b": -top - 1}
    for text in (f"a = {top + 1}", f"[t]\nb = [1, [{-top - 2}]]", "a = " + "1" + "0" * 400):
        with pytest.raises(TextFormatError, match=r"^an integer past 64 bits \("):
            loads_toml(text)


def test_a_byte_order_mark_before_json_bytes_is_passed_over() -> None:
    """RFC 8259 lets a reader ignore it, Windows editors write it, and json.loads(bytes) passed it over."""
    assert loads_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}


def test_a_number_typed_as_text_is_refused_past_a_double_before_int_is_asked() -> None:
    assert whole_number(" 42 ") == 42 and whole_number("-7") == -7
    with pytest.raises(TextFormatError, match=r"^an integer of 5000 digits, a number too large to store$"):
        whole_number("9" * 5000)  # int() said "use sys.set_int_max_str_digits()"
    with pytest.raises(ValueError, match="invalid literal"):
        whole_number("4x")
