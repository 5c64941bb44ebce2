"""The coordinator's HTTP API as an OpenAPI 3.1 document, generated from the pydantic models its handlers
validate with, so the published description cannot drift from what is enforced. Served at
``GET /v1/openapi.json`` and kept in ``docs/openapi.json`` (a test holds the two equal); the hostile suite
draws its request bodies from it (tests/fuzz)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from sparkwatch import __version__
from sparkwatch.coordinator.api import bodies
from sparkwatch.coordinator.api.models import CheckedWindow, MarkIn, RunCreate, RunEnd
from sparkwatch.core.windows import (
    COUNT_FIELDS,
    EPOCH_NS_MAX,
    EPOCH_NS_MIN,
    FINISH_REASON_MAX_CHARS,
    ID_MAX_CHARS,
    NS_MAX,
    STAMP_FIELDS,
)
from sparkwatch.defaults import MAX_SERIES_BUCKETS, MIN_SERIES_BUCKETS, NAME_PATTERN, PHASE_RE, SERIES_BUCKETS

REF = "#/components/schemas/{model}"
#: The routes without a token (a Prometheus scrape, a load balancer's health check).
OPEN_PATHS = ("/healthz", "/metrics")


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    path: str
    summary: str
    body: str | None = None  # a schema under components
    answer: int = 200  # the status of success
    #: refusals particular to the route (401, 404, 405, and 413, 415 and 503 for writes, are added)
    refusals: tuple[int, ...] = ()
    also: tuple[tuple[int, str], ...] = ()  # other answers of success, with what each means
    query: tuple[dict[str, Any], ...] = ()  # its query parameters, as OpenAPI parameter objects


SERIES_QUERY: dict[str, Any] = {
    "name": "series",
    "in": "query",
    "required": False,
    "description": "true: add the series block (each node's decimated time series, for the run"
    f" report) in {SERIES_BUCKETS} time buckets; false or absent: leave it out",
    "schema": {"type": "string", "enum": ["true", "false"]},
}
SERIES_BUCKETS_QUERY: dict[str, Any] = {
    "name": "series_buckets",
    "in": "query",
    "required": False,
    "description": f"the series block in this many time buckets over the run (report: {SERIES_BUCKETS})",
    "schema": {"type": "integer", "minimum": MIN_SERIES_BUCKETS, "maximum": MAX_SERIES_BUCKETS},
}

OPERATIONS = (
    Operation(
        "get",
        "/healthz",
        "200 when every link streams and the database file was not met damaged, else 503 (not a Refusal)",
        also=(
            (
                503,
                "degraded: {status, nodes, disconnected, database?}, the nodes whose links are not streaming;"
                ' database: "damaged", the database file met damaged (the log says how)',
            ),
        ),
    ),
    Operation("get", "/metrics", "Prometheus text format"),
    Operation("get", "/v1/openapi.json", "this document"),
    Operation("get", "/v1/time", "the coordinator's clocks: {t_wall_ns, t_mono_ns, boot_id}"),
    Operation(
        "get",
        "/v1/nodes",
        "every node's link, clock, capabilities and latest sample; the engine scraper's state",
    ),
    Operation(
        "get",
        "/v1/runs",
        "{runs, damaged}: every run, with the nodes it measures (nodes) and the bytes of samples its span"
        " holds (size_bytes); the runs whose rows were damaged outside sparkwatch, each {id, reason}",
    ),
    Operation("post", "/v1/runs", "start a run", "RunCreate", 201, (400,)),
    Operation(
        "get",
        "/v1/runs/{run_id}",
        "one run with its window count and the nodes it was opened with (null: stored before they were kept)",
        refusals=(404, 409),
    ),
    Operation(
        "delete",
        "/v1/runs/{run_id}",
        "delete an ended run, or a damaged one (open or not): {deleted, windows}; gone from every read at"
        " once, its rows go afterwards",
        answer=202,
        refusals=(404, 409),
    ),
    Operation("post", "/v1/runs/{run_id}/end", "end the run (now)", "RunEnd", 200, (400, 404, 409)),
    Operation("post", "/v1/runs/{run_id}/windows", "add windows", "WindowBatch", 201, (400, 404, 409)),
    Operation("post", "/v1/runs/{run_id}/imports", "begin an import", None, 201, (400, 404, 409)),
    Operation(
        "post",
        "/v1/runs/{run_id}/imports/{import_id}/commit",
        "make every window of the import part of the run",
        refusals=(400, 404, 409),
    ),
    Operation("delete", "/v1/runs/{run_id}/imports/{import_id}", "drop the import", refusals=(404, 409)),
    Operation(
        "post",
        "/v1/runs/{run_id}/marks",
        "begin a mark (201) or end it (200, its window)",
        "MarkIn",
        201,
        (400, 404, 409),
        also=((200, "the mark ended: {name, t_start_ns, t_end_ns}, the window it made"),),
    ),
    Operation(
        "get",
        "/v1/runs/{run_id}/export",
        "the sparkwatch.run/1 export",
        refusals=(400, 404, 409),
        query=(SERIES_QUERY, SERIES_BUCKETS_QUERY),
    ),
    Operation(
        "get",
        "/v1/runs/{run_id}/windows",
        "the run and its windows as stored, none measured: {run, windows} (what export --prometheus RUN"
        " measures again)",
        refusals=(404, 409),
    ),
    Operation(
        "get",
        "/v1/runs/{run_id}/report",
        "the run report: one self-contained HTML page (figures from the series block)",
        refusals=(400, 404, 409),
        query=(SERIES_BUCKETS_QUERY,),
    ),
)


def openapi_document() -> dict[str, Any]:
    """The whole document (deterministic: the same models give the same bytes)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sparkwatch coordinator",
            "version": __version__,
            "description": "docs/coordinator.md has the prose; every refusal is a JSON Refusal.",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _schemas() -> dict[str, Any]:
    schemas = {"Window": _window_schema()}
    for name, model in (("RunCreate", RunCreate), ("RunEnd", RunEnd), ("MarkIn", MarkIn)):
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    batch = bodies.Envelope.model_json_schema(ref_template=REF)
    batch["title"] = "WindowBatch"
    batch["properties"]["windows"]["items"] = {"$ref": REF.format(model="Window")}
    schemas["WindowBatch"] = batch
    schemas["Refusal"] = {
        "type": "object",
        "properties": {
            "error": {"type": "string"},
            "reason": {},
            "duplicate_ids": {
                "type": "array",
                "items": {"type": "string"},
                "description": "duplicate_window_ids: the first few ids the run holds or the batch repeats",
            },
            "duplicates": {"type": "integer", "description": "duplicate_window_ids: how many ids in all"},
            "t_end_ns": {"type": "integer", "description": "run_ended: when the run ended"},
            "repeats": {
                "type": "integer",
                "description": "repeats_proxy: how many of the import's windows repeat a proxy window",
            },
            "windows": {"type": "integer", "description": "repeats_proxy: how many windows the import had"},
        },
        "required": ["error", "reason"],
    }
    return dict(sorted(schemas.items()))


def _window_schema() -> dict[str, Any]:
    """The window's schema with each field's own bounds (the rules between fields, such as an end not
    before its start, are ``check_window``'s and listed in docs/coordinator.md)."""
    schema = TypeAdapter(CheckedWindow).json_schema(ref_template=REF)
    schema["additionalProperties"] = False
    props = schema["properties"]
    epoch = {"type": "integer", "minimum": EPOCH_NS_MIN, "maximum": EPOCH_NS_MAX - 1}
    bounds: dict[str, dict[str, Any]] = {
        "id": {"type": "string", "minLength": 1, "maxLength": ID_MAX_CHARS, "pattern": NAME_PATTERN},
        "phase": {"type": "string", "pattern": PHASE_RE.pattern},
        "t_start_ns": dict(epoch),
        "t_end_ns": dict(epoch),
        **{name: dict(epoch) for name in STAMP_FIELDS},
        **{name: {"type": "integer", "minimum": 0, "maximum": NS_MAX} for name in COUNT_FIELDS},
        "http_status": {"type": "integer", "minimum": 100, "maximum": 599},
        "finish_reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": FINISH_REASON_MAX_CHARS,
            "pattern": NAME_PATTERN,
        },
    }
    for name, bound in bounds.items():
        prop = props[name]
        if "anyOf" in prop:  # optional: the bound or null
            prop["anyOf"] = [bound, {"type": "null"}]
        else:
            prop.update(bound)
    return schema


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for op in OPERATIONS:
        name = re.sub(r"[^a-z0-9]+", "_", op.path.lower()).strip("_")
        item: dict[str, Any] = {"summary": op.summary, "operationId": f"{op.method}_{name}"}
        item["responses"] = _responses(op)
        params = [part[1:-1] for part in op.path.split("/") if part.startswith("{")]
        if params or op.query:
            item["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params
            ] + list(op.query)
        if op.body is not None:
            item["requestBody"] = {
                "required": op.body != "RunEnd",  # a run may end without saying what it wrapped
                "content": {"application/json": {"schema": {"$ref": REF.format(model=op.body)}}},
            }
        item["security"] = [] if op.path in OPEN_PATHS else [{"bearer": []}]
        paths.setdefault(op.path, {})[op.method] = item
    return paths


def _responses(op: Operation) -> dict[str, Any]:
    refusal = {"content": {"application/json": {"schema": {"$ref": REF.format(model="Refusal")}}}}
    kinds = {"/metrics": "text/plain", "/v1/runs/{run_id}/report": "text/html"}
    kind = kinds.get(op.path, "application/json")
    out: dict[str, Any] = {str(op.answer): {"description": op.summary, "content": {kind: {}}}}
    out.update({str(code): {"description": what, "content": {kind: {}}} for code, what in op.also})
    codes = set(op.refusals) | ({401} if op.path not in OPEN_PATHS else set()) | {403, 404, 405}
    if op.path.startswith("/v1/"):
        codes.add(400)  # invalid_query: a query parameter the route does not declare
    if op.method != "get":
        codes |= {413, 415, 503}
    for code in sorted(codes - {c for c, _ in op.also}):
        out[str(code)] = {"description": _REFUSALS[code], **refusal}
    return dict(sorted(out.items()))


_REFUSALS = {
    400: (
        "invalid_body: the reason lists each finding as {loc, msg} where the body's shape is wrong, else a"
        " sentence (a rule between fields or windows); invalid_query: a query parameter the route does not"
        " declare (any /v1/ route), or one out of its bounds (export, report), the reason a sentence"
    ),
    401: "unauthorized: no or a wrong bearer token",
    403: (
        "cross_origin: a request that changes state from another site's page (its Origin); host_not_allowed:"
        " on loopback without a token, a Host that is not an IP address or localhost"
    ),
    404: "not_found: no such run, import, mark or route",
    405: "method_not_allowed",
    409: (
        "duplicate_window_ids: window ids the run holds already or the batch repeats (duplicate_ids,"
        " duplicates); run_ended: a mark, or a window outside its span, in an ended run (t_end_ns);"
        " repeats_proxy: an import of which at least half the windows repeat the proxy's requests (start"
        " and end within 50 ms), dropped (repeats, windows);"
        " conflict: a committed import (to commit or drop), an open mark, an open run to delete (end it"
        " first); damaged: a row the request reads was edited or damaged outside sparkwatch (the reason"
        " names the table, row and column; docs/cli.md, damaged rows)"
    ),
    413: "request_entity_too_large: a body over 64 MiB (a window batch), over 1 MiB (any other)",
    415: (
        "unsupported_media_type: a Content-Encoding the API does not decode (it takes a body as sent, or in"
        " gzip or deflate; br and zstd where aiohttp has Brotli or zstandard), or several"
    ),
    503: "unavailable: the database cannot take the write, nothing was stored (/healthz: a link is down)",
}


if __name__ == "__main__":  # python -m sparkwatch.coordinator.api.openapi > docs/openapi.json
    print(json.dumps(openapi_document(), indent=2, ensure_ascii=False))
