"""Routes of the coordinator API. Bearer token on everything but /healthz and /metrics; bad input is a 4xx
with a JSON reason and stores nothing."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import time
from collections.abc import Mapping
from typing import Any, TypeVar

from aiohttp import compression_utils, web
from aiohttp.web_protocol import RequestPayloadError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel

from sparkwatch.coordinator.api import bodies
from sparkwatch.coordinator.api.metrics import coordinator_registry
from sparkwatch.coordinator.api.models import Empty, MarkIn, RunCreate, RunEnd
from sparkwatch.coordinator.api.openapi import openapi_document
from sparkwatch.coordinator.piece_stream import PieceStream
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.defaults import SERIES_BUCKETS, check_series_buckets
from sparkwatch.store import (
    Corrupt,
    Damaged,
    DuplicateIds,
    Invalid,
    NotFound,
    RepeatsProxy,
    RunEnded,
    StoreError,
    Unavailable,
    corrupt_or_none,
    unavailable_now,
)
from sparkwatch_agent.shared.auth import ServerToken, is_loopback
from sparkwatch_agent.shared.http import (
    COORDINATOR_SERVER,
    Handler,
    bearer_middleware,
    browser_guard,
    json_error,
    json_refusals,
    name_server,
    query_middleware,
)
from sparkwatch_agent.shared.strict_text import TextFormatError, cut_short, whole_number

COORDINATOR = web.AppKey("coordinator", Coordinator)
REGISTRY = web.AppKey("registry", CollectorRegistry)
OPENAPI = web.AppKey("openapi", dict[str, Any])
MAX_BODY_BYTES = 64 * 1024 * 1024
#: The most a body that is not a window batch may be (a run's name and command, a mark): generous.
SMALL_BODY_BYTES = 1024 * 1024
READ_CHUNK_BYTES = 256 * 1024
WHOLE = re.compile(r"-?[0-9]+")
M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)


error = json_error


async def parse(request: web.Request, kind: type[M]) -> M:
    """A small body, validated on the loop (runs, marks: a few hundred bytes). One announced over
    ``SMALL_BODY_BYTES`` is refused unread: read and parsed here, 50 MB held the loop for seconds."""
    return bodies.model(await read_body(request, SMALL_BODY_BYTES), kind)


async def read_body(request: web.Request, limit_bytes: int) -> bytes:
    """The body, if it is at most ``limit_bytes`` as read (decompressed: a 30 KB gzip body can be 30 MB);
    one announced larger is a 413 before a byte is read (aiohttp's own limit reads up to it first), any
    other is stopped at the limit. A ``Content-Encoding`` aiohttp does not decode is a 415 before then."""
    _decoded_encoding(request)
    size = request.content_length
    if size is not None and size > limit_bytes:
        raise web.HTTPRequestEntityTooLarge(max_size=limit_bytes, actual_size=size)
    body = bytearray()
    async for piece in request.content.iter_chunked(READ_CHUNK_BYTES):
        body += piece
        if len(body) > limit_bytes:
            raise web.HTTPRequestEntityTooLarge(max_size=limit_bytes, actual_size=len(body))
    return bytes(body)


#: The body encodings aiohttp decodes (one of them, named alone: ``http_parser``; br and zstd only with
#: Brotli or zstandard installed, else it refuses them itself, a plain-text 400); any other reached the
#: handler as it was sent, so ``Content-Encoding: bogus`` opened a run from the bytes behind the label.
DECODED_ENCODINGS = frozenset(
    {"identity", "gzip", "deflate"}
    | ({"br"} if getattr(compression_utils, "HAS_BROTLI", False) else set())
    | ({"zstd"} if getattr(compression_utils, "HAS_ZSTD", False) else set())
)


def _decoded_encoding(request: web.Request) -> None:
    """``415 unsupported_media_type`` for a body labelled with an encoding that is not decoded before it is
    read, or with several (aiohttp decodes none of a list)."""
    labels = request.headers.getall("Content-Encoding", [])
    named = [part.strip().lower() for label in labels for part in label.split(",") if part.strip()]
    if len(named) > 1 or (named and named[0] not in DECODED_ENCODINGS):
        shown = cut_short(", ".join(labels))
        taken = ", ".join(sorted(DECODED_ENCODINGS - {"identity"}))
        said = f"Content-Encoding {shown!r} is not one this API decodes: send the body as it is, or in one of"
        raise web.HTTPUnsupportedMediaType(text=f"{said} {taken}")


def _declared_queries(request: web.Request, method: str, route: str) -> list[str] | None:
    """The query parameters the route declares in the OpenAPI document (None: no such operation)."""
    operation = request.app[OPENAPI]["paths"].get(route, {}).get(method.lower())
    if operation is None:
        return None
    return [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]


@web.middleware
async def store_refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A body that fails validation or a request the store refuses becomes a 4xx (503 while the store cannot
    write) with its reason, for every route; a 409 says which kind of conflict in ``error``."""
    try:
        return await handler(request)
    except NotFound as exc:
        return error(404, "not_found", str(exc))
    except Invalid as exc:
        return error(400, "invalid_body", str(exc))
    except bodies.BodyError as exc:
        return error(400, "invalid_body", exc.details)
    except RequestPayloadError as exc:  # e.g. labelled gzip and not gzip: aiohttp cannot decode it
        # the rest is not read: aiohttp would drain it after the answer, fail again and drop the connection
        # with the answer unsent; the connection closes instead
        request.content.feed_eof()
        response = error(400, "invalid_body", f"the body cannot be read: {' '.join(str(exc).split())}")
        response.force_close()
        return response
    except Unavailable as exc:
        return error(503, "unavailable", str(exc))
    except DuplicateIds as exc:  # the ids, so a client can tell which of its windows the run has
        body = {"duplicate_ids": exc.ids, "duplicates": exc.count}
        return web.json_response({"error": "duplicate_window_ids", "reason": str(exc), **body}, status=409)
    except RunEnded as exc:
        body = {"error": "run_ended", "reason": str(exc), "t_end_ns": exc.t_end_ns}
        return web.json_response(body, status=409)
    except RepeatsProxy as exc:  # dropped: the proxy's requests again (core/repeated_windows.py)
        body = {"error": "repeats_proxy", "reason": str(exc), "repeats": exc.repeats, "windows": exc.windows}
        return web.json_response(body, status=409)
    except Corrupt as exc:
        return _damaged_file(request, exc)
    except Damaged as exc:  # a row edited outside sparkwatch: no conflict of the client's, no retry mends it
        return error(409, "damaged", str(exc))
    except StoreError as exc:
        return error(409, "conflict", str(exc))
    except sqlite3.DatabaseError as exc:  # a read (writes are said by tx): a damaged file, or a locked one
        if corrupt_or_none(exc) is not None:
            return _damaged_file(request, exc)
        if unavailable_now(exc):  # locked, an I/O error: not "no such column", which is a bug's 500
            log.warning("%s %s: the database cannot be read now: %s", request.method, request.path, exc)
            return error(503, "unavailable", f"the database cannot be read now: {exc}")
        raise


def _damaged_file(request: web.Request, exc: sqlite3.DatabaseError | Corrupt) -> web.Response:
    """A 500 (the coordinator's file, not the request, is at fault), said in the log in one line."""
    store = request.app[COORDINATOR].store
    said = corrupt_or_none(exc, store.path) or exc
    store.saw_damage(str(said))  # /healthz says so from now on
    log.error("%s %s: %s", request.method, request.path, said)
    return error(500, "database_damaged", str(said))


async def healthz(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    states = coord.states()
    down = [s.node for s in states if not s.connected]
    damage = coord.store.damage  # met by a request or a link: every export of it fails until it is mended
    healthy = not down and not damage
    body = {"status": "ok" if healthy else "degraded", "nodes": len(states), "disconnected": down}
    if damage:  # no token here: the file's path and SQLite's words are in the log, not in this answer
        body["database"] = "damaged"
    return web.json_response(body, status=200 if healthy else 503)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def time_probe(request: web.Request) -> web.Response:
    """The coordinator's clocks, for whoever stamps windows elsewhere (a proxy) and must map to ours."""
    coord = request.app[COORDINATOR]
    return web.json_response(
        {"t_wall_ns": coord.now_ns(), "t_mono_ns": time.monotonic_ns(), "boot_id": coord.instance}
    )


async def nodes(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    now = coord.now_ns()
    return web.json_response({"nodes": coord.node_json(now), "engine": coord.engine_json()})


async def create_run(request: web.Request) -> web.Response:
    body: RunCreate = await parse(request, RunCreate)
    coord = request.app[COORDINATOR]
    run = coord.open_run(body.name, body.interval_s, body.gate_threshold, body.scope, body.phases)
    return web.json_response(run.to_json(), status=201)


async def list_runs(request: web.Request) -> web.Response:
    """Every run, each with ``size_bytes``: its stored samples (blocks its span touches, on every node);
    ``damaged``: the runs whose rows were damaged outside sparkwatch, with why (one such row once made the
    whole list a 409)."""
    coordinator = request.app[COORDINATOR]
    sizes = await coordinator.run_sizes()
    runs = [{**r.to_json(), "size_bytes": sizes.get(r.id, 0)} for r in coordinator.runs()]
    damaged = [{"id": run_id, "reason": str(why)} for run_id, why in coordinator.damaged_runs().items()]
    return web.json_response({"runs": runs, "damaged": damaged})


async def get_run(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    run, windows = await coord.run(request.match_info["run_id"])
    return web.json_response({**run.to_json(), "windows": windows})


async def end_run(request: web.Request) -> web.Response:
    body = await parse(request, RunEnd) if request.can_read_body else RunEnd()
    command = body.command.model_dump() if body.command is not None else None
    run, dropped = request.app[COORDINATOR].end_run(request.match_info["run_id"], command)
    return web.json_response({**run.to_json(), "dropped_marks": dropped})


async def delete_run(request: web.Request) -> web.Response:
    """202: the run is gone from every read now; its rows go in the background (store/deletion.py)."""
    run_id = request.match_info["run_id"]
    windows = await request.app[COORDINATOR].delete_run(run_id)
    return web.json_response({"deleted": run_id, "windows": windows}, status=202)


async def add_windows(request: web.Request) -> web.Response:
    """A batch is validated in a worker thread and written in the coordinator's window thread: 100 000
    windows never hold the event loop."""
    coord = request.app[COORDINATOR]
    run_id = request.match_info["run_id"]
    batch = await asyncio.to_thread(bodies.window_batch, await read_body(request, MAX_BODY_BYTES))
    count = await coord.add_windows(run_id, batch.windows, batch.import_id)
    answer: dict[str, Any] = {"stored": count}
    if batch.import_id is not None:
        answer["import_id"] = batch.import_id
    return web.json_response(answer, status=201)


async def begin_import(request: web.Request) -> web.Response:
    run_id = request.match_info["run_id"]
    if request.can_read_body:
        await parse(request, Empty)
    import_id = await request.app[COORDINATOR].begin_import(run_id)
    return web.json_response({"run_id": run_id, "import_id": import_id}, status=201)


async def commit_import(request: web.Request) -> web.Response:
    run_id, import_id = request.match_info["run_id"], request.match_info["import_id"]
    if request.can_read_body:
        await parse(request, Empty)
    done = await request.app[COORDINATOR].commit_import(run_id, import_id)
    body = {"run_id": run_id, "import_id": import_id, "committed": done.windows, "note": done.note}
    return web.json_response(body)


async def abort_import(request: web.Request) -> web.Response:
    run_id, import_id = request.match_info["run_id"], request.match_info["import_id"]
    count = await request.app[COORDINATOR].abort_import(run_id, import_id)
    return web.json_response({"run_id": run_id, "import_id": import_id, "dropped": count})


async def marks(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    run_id = request.match_info["run_id"]
    body: MarkIn = await parse(request, MarkIn)
    if body.event == "begin":
        t_begin = coord.begin_mark(run_id, body.name, body.phase or "timed")
        return web.json_response({"name": body.name, "t_begin_ns": t_begin}, status=201)
    window = coord.end_mark(run_id, body.name, body.age_ns or 0)
    return web.json_response(
        {"name": body.name, "t_start_ns": window.t_start_ns, "t_end_ns": window.t_end_ns}
    )


def series_buckets(query: Mapping[str, str]) -> int | None:
    """The export's ``series`` block asked for by the query: ``series=true`` (default buckets) and/or
    ``series_buckets=N``; None when not asked. A ValueError says what is wrong with the query."""
    flag, raw = query.get("series"), query.get("series_buckets")
    if flag not in (None, "true", "false"):
        raise ValueError(f"series must be true or false, got {flag!r}")
    if raw is None:
        return SERIES_BUCKETS if flag == "true" else None
    if flag == "false":
        raise ValueError("series_buckets asks for the series block that series=false leaves out")
    if not WHOLE.fullmatch(raw):
        raise ValueError(f"series_buckets must be a whole number, got {cut_short(raw)!r}")
    try:  # a whole number out of bounds says the bounds (it said "must be a whole number" of -1)
        return check_series_buckets(whole_number(raw))
    except TextFormatError as exc:
        raise ValueError(f"series_buckets is {exc}") from None
    except ValueError as exc:
        raise ValueError(f"series_buckets {exc}") from None


async def export(request: web.Request) -> web.StreamResponse:
    """Computed off the loop (its errors answered as any other), then serialised off the loop in pieces and
    written out chunked while they are made: the answer is never held whole. ``?series=true`` or
    ``?series_buckets=N`` adds the plot data (core/series.py)."""
    try:
        buckets = series_buckets(request.query)
    except ValueError as exc:
        return error(400, "invalid_query", str(exc))
    return await _streamed(
        request, await request.app[COORDINATOR].export_json(request.match_info["run_id"], buckets)
    )


async def run_windows(request: web.Request) -> web.StreamResponse:
    """The run and its windows as stored, none measured: read and written out as the export is."""
    return await _streamed(request, await request.app[COORDINATOR].windows_json(request.match_info["run_id"]))


async def _streamed(request: web.Request, pieces: PieceStream) -> web.StreamResponse:
    """``pieces`` written out chunked while they are made; a client that leaves stops their making."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        async for piece in pieces:
            await response.write(piece)
        await response.write_eof()
    except ConnectionError:  # the client left mid-answer: no error of ours, and the pieces stop being made
        log.debug("client left during %s", request.path)
        response.force_close()
    finally:
        pieces.close()
    return response


async def report(request: web.Request) -> web.Response:
    """The run report (report/page.py), built off the loop from the run's export with its
    series block (``?series_buckets=N``, else the default buckets)."""
    query = {**request.query, "series": "true"}
    try:
        buckets = series_buckets(query) or SERIES_BUCKETS
    except ValueError as exc:
        return error(400, "invalid_query", str(exc))
    page = await request.app[COORDINATOR].report_html(request.match_info["run_id"], buckets)
    return web.Response(text=page, content_type="text/html", charset="utf-8")


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI])


def make_app(
    coordinator: Coordinator, token: ServerToken | None, *, listen_host: str = "127.0.0.1"
) -> web.Application:
    """The API; ``listen_host``: where it listens (on loopback without a token, only an address or
    localhost is answered as ``Host``: shared.http.browser_guard)."""
    middleware = bearer_middleware(token, lambda path: path not in ("/healthz", "/metrics"))
    browsers = browser_guard(hosts_by_address=token is None and is_loopback(listen_host))
    middlewares = [json_refusals, browsers, middleware, query_middleware(_declared_queries), store_refusals]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[COORDINATOR] = coordinator
    app[REGISTRY] = coordinator_registry(coordinator)  # built once, like the agent's
    app[OPENAPI] = openapi_document()
    name_server(app, COORDINATOR_SERVER)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/openapi.json", openapi)
    app.router.add_get("/v1/time", time_probe)
    app.router.add_get("/v1/nodes", nodes)
    app.router.add_post("/v1/runs", create_run)
    app.router.add_get("/v1/runs", list_runs)
    app.router.add_get("/v1/runs/{run_id}", get_run)
    app.router.add_delete("/v1/runs/{run_id}", delete_run)
    app.router.add_post("/v1/runs/{run_id}/end", end_run)
    app.router.add_post("/v1/runs/{run_id}/windows", add_windows)
    app.router.add_post("/v1/runs/{run_id}/imports", begin_import)
    app.router.add_post("/v1/runs/{run_id}/imports/{import_id}/commit", commit_import)
    app.router.add_delete("/v1/runs/{run_id}/imports/{import_id}", abort_import)
    app.router.add_post("/v1/runs/{run_id}/marks", marks)
    app.router.add_get("/v1/runs/{run_id}/export", export)
    app.router.add_get("/v1/runs/{run_id}/windows", run_windows)
    app.router.add_get("/v1/runs/{run_id}/report", report)
    return app
