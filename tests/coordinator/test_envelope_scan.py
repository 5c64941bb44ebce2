"""The windows body is walked one window at a time; what it accepts and refuses must match one whole parse."""

from __future__ import annotations

import json

import pytest

from sparkwatch.coordinator.api.bodies import BodyError, window_batch
from sparkwatch.coordinator.api.envelope_scan import ScanError, scan

T0_NS = 1_800_000_000_000_000_000
WINDOW = {"id": "w1", "phase": "timed", "t_start_ns": T0_NS, "t_end_ns": T0_NS + 1_000_000_000}


@pytest.mark.parametrize(
    "body",
    [
        '{"windows": [1, {"a": [2, 3]}, "x,]"], "import_id": "i"}',
        ' \n{ "windows" : [ ] , "k" : null }\t',
        '{"windows": 5}',
        '{"windows": [{"a": {"a": 1}}], "k": {"a": [{"a": 2}]}}',  # a name again, but in another object
        "{}",
    ],
)
def test_members_and_spans_agree_with_one_whole_parse(body: str) -> None:
    scanned = scan(body.encode(), 10)
    whole = json.loads(body)
    assert set(scanned.members) == set(whole)
    if isinstance(whole.get("windows"), list):
        assert scanned.spans is not None
        assert [json.loads(body[a:b]) for a, b in scanned.spans] == whole["windows"]
    else:
        assert scanned.spans is None
        assert scanned.members.get("windows") == whole.get("windows")


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b'{"windows": [1,]}', "invalid JSON"),
        (b'{"windows": [1] 2}', "invalid JSON"),
        (b'{"windows": [1]} x', "extra data"),
        (b'{"windows": [NaN]}', "NaN is not JSON"),
        (b'{"windows": [Infinity]}', "Infinity is not JSON"),
        (b'{"windows": [1]', "invalid JSON"),
        (b'[{"windows": []}]', "'{' expected"),
        (b"{1: 2}", "invalid JSON"),
        (b'{"windows" [1]}', "':' expected"),
        (b'{"windows": ["\xff"]}', "not UTF-8"),
        (b'{"windows": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", "invalid JSON"),
        (b"", "'{' expected"),
        pytest.param(  # int() of it told the client to call sys.set_int_max_str_digits()
            b'{"windows": [' + b"9" * 5000 + b"]}",
            "an integer of 5000 digits, a number too large to store",
            id="5000-digits",
        ),
        pytest.param(
            b'{"n": -' + b"1" * 400 + b', "windows": []}', "an integer of 400 digits", id="400-digits"
        ),
    ],
)
def test_what_is_not_one_json_object_is_refused_in_one_line(raw: bytes, words: str) -> None:
    with pytest.raises(ScanError) as caught:
        scan(raw, 10)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value) and "set_int_max_str_digits" not in str(caught.value)


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        ('{"windows": [1], "windows": {"a": 1}}', "windows", "given more than once in one object"),
        ('{"import_id": "a", "windows": [], "import_id": "b"}', "import_id", "given more than once"),
        ('{"windows": [1, {"id": "w", "id": "v"}]}', "windows.1.id", "given more than once in one object"),
        ('{"windows": [{"source": {"h": 1, "h": 2}}]}', "windows.0.source.h", "given more than once"),
        ('{"windows": [{"source": {"h": {"x": 1}}, "source": {}}]}', "windows.0.source", "given more"),
        ('{"k": {"x": [1], "x": 2}, "windows": []}', "k.x", "given more than once in one object"),
        ('{"k": [{"x": 1}, {"a": 1, "a": 2}], "windows": []}', "k.1.a", "given more than once"),
        ('{"windows": [[{"a": 1}, {"b": {"a": 1, "a": 2}}]]}', "windows.0.1.b.a", "given more"),
    ],
)
def test_a_key_given_twice_in_one_object_is_refused_where_it_is(body: str, loc: str, msg: str) -> None:
    """A whole parse keeps the last of the two (and a validator after it never knows): the client meant
    one, so neither is taken. A key again in another object is no repeat (the parametrized case above)."""
    with pytest.raises(ScanError) as caught:
        scan(body.encode(), 10)
    assert (caught.value.loc, str(caught.value)[: len(msg)]) == (loc, msg)


def test_counting_stops_one_past_the_limit() -> None:
    with pytest.raises(ScanError) as caught:
        scan(b'{"windows": [1, 2, 3, oops', 2)
    assert caught.value.loc == "windows"


def test_a_batch_is_validated_from_the_body_text() -> None:
    body = json.dumps({"windows": [WINDOW, {**WINDOW, "id": "w2"}], "import_id": "imp"}, indent=2)
    batch = window_batch(body.encode())
    assert [w.id for w in batch.windows] == ["w1", "w2"]
    assert batch.import_id == "imp"


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"windows": [WINDOW], "extra": 1}, "extra"),
        ({"windows": []}, "windows"),
        ({"windows": [WINDOW], "import_id": 5}, "import_id"),
        ({"windows": [WINDOW, {**WINDOW, "t_end_ns": "late"}]}, "windows.1.t_end_ns"),
        ('{"windows": [' + json.dumps(WINDOW).replace('"id"', '"phase":"x","id"') + "]}", "windows.0.phase"),
    ],
)
def test_envelope_and_window_findings_name_the_field(body: dict[str, object] | str, loc: str) -> None:
    with pytest.raises(BodyError) as caught:
        window_batch((body if isinstance(body, str) else json.dumps(body)).encode())
    assert [d["loc"] for d in caught.value.details] == [loc]


def test_finding_a_repeat_in_a_wide_object_takes_no_quadratic_time() -> None:
    """Where the repeat is was found by a list scan per key: 40 000 keys took 12 s of a worker thread."""
    keys = ", ".join(f'"k{n}": {n}' for n in range(200_000))
    raw = ('{"windows": [{"source": {' + keys + ', "k7": 0}}]}').encode()
    with pytest.raises(ScanError) as caught:
        scan(raw, 10)
    assert caught.value.loc == "windows.0.source.k7"
