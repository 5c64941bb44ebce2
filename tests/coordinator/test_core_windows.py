"""The window model: one field list, one set of rules, the JSON forms."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from sparkwatch.core.windows import (
    OPTIONAL_INT_FIELDS,
    OPTIONAL_STR_FIELDS,
    REQUIRED_FIELDS,
    WINDOW_FIELDS,
    Window,
    WindowError,
    check_window,
    duplicate_id,
)
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow

T0 = 1_800_000_000 * 10**9
GOOD = Window(
    "w1", "timed", T0, T0 + 100, t_first_byte_ns=T0 + 1, t_first_token_ns=T0 + 2, t_last_token_ns=T0 + 99
)


def test_the_field_groups_cover_the_model_exactly() -> None:
    assert sorted((*REQUIRED_FIELDS, *OPTIONAL_INT_FIELDS, *OPTIONAL_STR_FIELDS, "source")) == sorted(
        WINDOW_FIELDS
    )


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"id": ""}, "id", "must be 1..200 characters"),
        ({"id": "x" * 201}, "id", "must be 1..200 characters"),
        ({"id": "a\nb"}, "id", "must not hold control characters"),  # it forged lines of the table
        ({"id": "x\x1b[31mred"}, "id", "must not hold control characters"),  # a terminal escape
        ({"finish_reason": "stop\r"}, "finish_reason", "must not hold control characters"),
        ({"id": "a\u2028b"}, "id", "line breaks"),  # U+2028: splitlines() and viewers break there
        ({"finish_reason": "stop\u2029"}, "finish_reason", "line breaks"),
        ({"id": "a\u202eb"}, "id", "bidirectional overrides"),  # shows reversed: "Trojan Source"
        ({"id": "a\u2066b\u2069"}, "id", "bidirectional overrides"),  # an isolate
        ({"source": {"upstream_broke_off": "yes"}}, "source.upstream_broke_off", "true or false"),
        ({"source": {"harness_failed": 1}}, "source.harness_failed", "true or false"),
        ({"phase": "Timed"}, "phase", "must match"),
        ({"t_start_ns": 10, "t_end_ns": 20}, "t_start_ns", "not Unix epoch nanoseconds"),
        ({"t_end_ns": 2**63}, "t_end_ns", "not Unix epoch nanoseconds"),
        ({"t_end_ns": T0 - 1, "t_first_byte_ns": None, "t_first_token_ns": None, "t_last_token_ns": None},
         "t_end_ns", "ends before it starts"),
        ({"t_first_byte_ns": T0 + 101}, "t_first_byte_ns", "lies outside"),
        ({"t_first_token_ns": T0 + 50, "t_last_token_ns": T0 + 40}, "t_last_token_ns", "before first token"),
        ({"completion_tokens": -1}, "completion_tokens", "non-negative"),
        ({"prompt_tokens": 2**63}, "prompt_tokens", "non-negative"),
        ({"http_status": 99}, "http_status", "not an HTTP status code"),
        ({"finish_reason": ""}, "finish_reason", "1..64 characters"),
        ({"source": {"x": float("nan")}}, "source", "NaN"),
    ],
)  # fmt: skip
def test_each_rule_names_its_field(changes: dict[str, object], field: str, says: str) -> None:
    with pytest.raises(WindowError) as caught:
        check_window(dataclasses.replace(GOOD, **changes))
    assert caught.value.field == field and says in caught.value.problem
    assert str(caught.value).startswith(f"{field}: ")


def test_json_forms_and_duplicates() -> None:
    assert check_window(GOOD) is GOOD
    held = dataclasses.replace(GOOD, source={"none": None, "text": "null", "n": [1.5, None]})
    assert check_window(held) is held  # a null is no NaN
    assert list(GOOD.to_json()) == list(WINDOW_FIELDS)
    body = GOOD.to_body()
    assert "completion_tokens" not in body and body["source"] == {}
    assert duplicate_id([GOOD, dataclasses.replace(GOOD, id="w2"), GOOD]) == "w1"
    assert duplicate_id([GOOD]) is None


def test_the_store_keeps_every_field(tmp_path: pathlib.Path) -> None:
    full = Window(
        "w-all", "warmup", T0, T0 + 9, T0 + 1, T0 + 2, T0 + 8, 11, 22, 3, 4, 200, "stop", {"k": [1, "x"]}
    )
    store = Store(tmp_path / "w.db")
    store.create_run(RunRow("r", "run", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r", [full, GOOD])
    assert store.windows("r") == [full, GOOD]
    store.close()


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "source",
    [
        {"n": 10**30},
        {"s": "\ud800"},
        {"deep": _nested(250)},
        {"f": float("inf")},
        {"none": None, "nested": {"f": [float("-inf")]}},  # beside a null, which orjson writes NaN as too
    ],
)
def test_a_source_the_export_cannot_carry_is_refused(source: dict[str, object]) -> None:
    """Found by the nightly API fuzz: a source holding 10**30 was stored and made its run's export a 500."""
    window = Window("w", "timed", 1_800_000_000 * 10**9, 1_800_000_001 * 10**9, source=source)
    with pytest.raises(WindowError, match="source: is not JSON the export can carry"):
        check_window(window)
