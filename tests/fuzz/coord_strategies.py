"""Request bodies for the coordinator's API, drawn from its published OpenAPI description (generated from
the very pydantic models the API validates with) by hypothesis-jsonschema, next to windows that obey every
rule (``check_window``, which relates fields as no schema can) and hostile variants of both."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from fuzz.hostile import JSON, hostile_body, json_objects
from fuzz.window_rules import source_problem
from sparkwatch.coordinator.api.openapi import openapi_document
from sparkwatch.core.windows import (
    COUNT_FIELDS,
    FINISH_REASON_MAX_CHARS,
    ID_MAX_CHARS,
    NS_MAX,
)

S = 1_000_000_000
#: What the docs say a phase is: a lower-case word (defaults.PHASE_RE, without its anchors).
PHASE_WORD = r"[a-z][a-z0-9_-]{0,31}"
#: The published description of the API (docs/openapi.json, GET /v1/openapi.json), generated from the
#: models the handlers validate with.
DOC = openapi_document()


#: Characters a window's id or finish reason may hold: any but controls (and lone surrogates, as ever).
ONE_LINE = st.characters(exclude_categories=("Cc", "Cs"))


def body_schema(name: str, max_items: int = 8) -> dict[str, Any]:
    """A request body's schema from the document, its lists kept short (100 000 windows are for the
    benchmarks)."""
    schemas = copy.deepcopy(DOC["components"]["schemas"])
    for schema in schemas.values():
        for prop in schema.get("properties", {}).values():
            if prop.get("type") == "array" and prop.get("maxItems", 0) > max_items:
                prop["maxItems"] = max_items
    return {"$ref": f"#/components/schemas/{name}", "components": {"schemas": schemas}}


RUN_CREATE = from_schema(body_schema("RunCreate"))
RUN_END = from_schema(body_schema("RunEnd"))
MARK = from_schema(body_schema("MarkIn"))
SCHEMA_WINDOWS = from_schema(body_schema("WindowBatch"))
IMPORT_BEGIN: st.SearchStrategy[JSON] = st.just({})


#: Windows are placed in the hour before the suite started: a run takes windows from a day before it, and
#: a strategy must not depend on the time it is drawn at (hypothesis replays its draws).
REFERENCE_NS = time.time_ns()


@st.composite
def valid_window(draw: st.DrawFn) -> dict[str, JSON]:
    """A window every rule accepts, within a day of any run this session makes."""
    start = draw(st.integers(REFERENCE_NS - 3600 * S, REFERENCE_NS))
    end = start + draw(st.integers(0, 600 * S))
    window: dict[str, JSON] = {
        "id": draw(st.text(ONE_LINE, min_size=1, max_size=ID_MAX_CHARS)),
        "phase": draw(st.sampled_from(["timed", "warmup"]) | st.from_regex(PHASE_WORD, fullmatch=True)),
        "t_start_ns": start,
        "t_end_ns": end,
    }
    first = draw(st.none() | st.integers(start, end))
    last = draw(st.none() | st.integers(first if first is not None else start, end))
    stamps = {"t_first_byte_ns": draw(st.none() | st.integers(start, end))}
    stamps.update(t_first_token_ns=first, t_last_token_ns=last)
    for name in COUNT_FIELDS:
        stamps[name] = draw(st.none() | st.integers(0, NS_MAX))
    stamps["http_status"] = draw(st.none() | st.integers(100, 599))
    for name, value in stamps.items():
        if value is not None or draw(st.booleans()):
            window[name] = value
    reason = draw(st.none() | st.text(ONE_LINE, min_size=1, max_size=FINISH_REASON_MAX_CHARS))
    if reason is not None:
        window["finish_reason"] = reason
    if draw(st.booleans()):
        window["source"] = draw(json_objects(8).filter(lambda s: source_problem(s) is None))
    return window


def valid_batch(max_size: int = 5) -> st.SearchStrategy[list[dict[str, JSON]]]:
    return st.lists(valid_window(), min_size=1, max_size=max_size, unique_by=lambda w: str(w["id"]))


def windows_body(import_id: str | None = None) -> st.SearchStrategy[dict[str, JSON]]:
    """A windows body that is valid as far as the body goes (the run may still refuse it)."""
    extra = {} if import_id is None else {"import_id": import_id}
    return valid_batch().map(lambda batch: {"windows": batch, **extra})


#: Per route, the valid-shaped bodies it is fuzzed from.
VALID_BODIES: dict[str, st.SearchStrategy[JSON]] = {
    "create": RUN_CREATE,
    "end": RUN_END,
    "windows": st.one_of(windows_body(), SCHEMA_WINDOWS),
    "imports": IMPORT_BEGIN,
    "commit": st.just({}),
    "abort": st.just({}),
    "marks": MARK,
    "read": st.just({}),
}


def route_body(route: str) -> st.SearchStrategy[bytes | None]:
    """No body, a valid-shaped one, or a hostile one."""
    valid = VALID_BODIES[route]
    as_bytes = valid.map(lambda v: json.dumps(v).encode())
    return st.one_of(st.none(), as_bytes, hostile_body(valid))
