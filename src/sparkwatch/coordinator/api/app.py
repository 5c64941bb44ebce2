"""Routes of the coordinator API. Bearer token on everything but /healthz and /metrics; bad input is a 4xx
with a JSON reason and stores nothing."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from sparkwatch.coordinator.api.metrics import coordinator_registry
from sparkwatch.coordinator.api.models import MarkIn, RunCreate, RunEnd, WindowBatch
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.windows import WindowError
from sparkwatch.store import Invalid, NotFound, StoreError, Unavailable
from sparkwatch_agent.shared.http import Handler, bearer_middleware, json_error

COORDINATOR = web.AppKey("coordinator", Coordinator)
REGISTRY = web.AppKey("registry", CollectorRegistry)
MAX_BODY_BYTES = 64 * 1024 * 1024


error = json_error


async def parse(request: web.Request, model: type[BaseModel]) -> Any:
    try:
        raw = await request.read()
        return model.model_validate_json(raw)
    except ValidationError as exc:
        details = [_detail(e) for e in exc.errors(include_url=False)]
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "invalid_body", "reason": details[:20]}),
            content_type="application/json",
        ) from None


def _detail(error: ErrorDetails) -> dict[str, str]:
    """One refusal as ``{"loc", "msg"}``; a broken window rule names its field in ``loc``."""
    loc = [str(part) for part in error["loc"]]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, WindowError):
        return {"loc": ".".join([*loc, cause.field]), "msg": cause.problem}
    return {"loc": ".".join(loc), "msg": error["msg"]}


@web.middleware
async def store_refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """What the store refuses becomes a 4xx (503 while it cannot write) with its reason, for every route."""
    try:
        return await handler(request)
    except NotFound as exc:
        return error(404, "not_found", str(exc))
    except Invalid as exc:
        return error(400, "invalid_body", str(exc))
    except Unavailable as exc:
        return error(503, "unavailable", str(exc))
    except StoreError as exc:
        return error(409, "conflict", str(exc))


async def healthz(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    states = coord.states()
    down = [s.node for s in states if not s.connected]
    body = {"status": "ok" if not down else "degraded", "nodes": len(states), "disconnected": down}
    return web.json_response(body, status=200 if not down else 503)


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
    return web.json_response({"nodes": [s.to_json(now) for s in coord.states()]})


async def create_run(request: web.Request) -> web.Response:
    body: RunCreate = await parse(request, RunCreate)
    run = request.app[COORDINATOR].open_run(body.name, body.interval_s, body.gate_threshold, body.scope)
    return web.json_response(run.to_json(), status=201)


async def list_runs(request: web.Request) -> web.Response:
    return web.json_response({"runs": [r.to_json() for r in request.app[COORDINATOR].runs()]})


async def get_run(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    run, windows = coord.run(request.match_info["run_id"])
    return web.json_response({**run.to_json(), "windows": windows})


async def end_run(request: web.Request) -> web.Response:
    body = await parse(request, RunEnd) if request.can_read_body else RunEnd()
    command = body.command.model_dump() if body.command is not None else None
    run = request.app[COORDINATOR].end_run(request.match_info["run_id"], command)
    return web.json_response(run.to_json())


async def add_windows(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    run_id = request.match_info["run_id"]
    batch: WindowBatch = await parse(request, WindowBatch)
    count = coord.add_windows(run_id, batch.windows)
    return web.json_response({"stored": count}, status=201)


async def marks(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    run_id = request.match_info["run_id"]
    body: MarkIn = await parse(request, MarkIn)
    if body.event == "begin":
        t_begin = coord.begin_mark(run_id, body.name, body.phase)
        return web.json_response({"name": body.name, "t_begin_ns": t_begin}, status=201)
    window = coord.end_mark(run_id, body.name)
    return web.json_response(
        {"name": body.name, "t_start_ns": window.t_start_ns, "t_end_ns": window.t_end_ns}
    )


async def export(request: web.Request) -> web.Response:
    coord = request.app[COORDINATOR]
    body = await coord.export_async(request.match_info["run_id"])
    return web.json_response(body)


def make_app(coordinator: Coordinator, token: str | None) -> web.Application:
    middleware = bearer_middleware(token, lambda path: path not in ("/healthz", "/metrics"))
    app = web.Application(middlewares=[middleware, store_refusals], client_max_size=MAX_BODY_BYTES)
    app[COORDINATOR] = coordinator
    app[REGISTRY] = coordinator_registry(coordinator)  # built once, like the agent's
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/time", time_probe)
    app.router.add_get("/v1/nodes", nodes)
    app.router.add_post("/v1/runs", create_run)
    app.router.add_get("/v1/runs", list_runs)
    app.router.add_get("/v1/runs/{run_id}", get_run)
    app.router.add_post("/v1/runs/{run_id}/end", end_run)
    app.router.add_post("/v1/runs/{run_id}/windows", add_windows)
    app.router.add_post("/v1/runs/{run_id}/marks", marks)
    app.router.add_get("/v1/runs/{run_id}/export", export)
    return app
