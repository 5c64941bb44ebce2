"""The agent's HTTP face (aiohttp): /metrics, /healthz, /v1/time, /v1/capabilities, /v1/interval,
/v1/stream (WebSocket) and, for the simulator, /v1/sim/load.

Handlers read the sampler's snapshot and ring; the only writes are interval leases and the simulated load.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from aiohttp import WSMsgType, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.hardware.sim import SimGb10
from sparkwatch_agent.sampling.clocks import read_pair
from sparkwatch_agent.sampling.leases import TooManyLeases, json_number, lease_asked
from sparkwatch_agent.sampling.sample import encode_frame
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot, is_stale, sample_age_s
from sparkwatch_agent.serving.hello import capabilities_json, hello_frame
from sparkwatch_agent.serving.stream_cursor import StreamCursor, beyond_newest
from sparkwatch_agent.shared.auth import Admission, ServerToken, is_loopback
from sparkwatch_agent.shared.http import (
    AGENT_SERVER,
    bearer_middleware,
    browser_guard,
    json_error,
    json_refusals,
    name_server,
    query_middleware,
)
from sparkwatch_agent.shared.protocol import CLOSE_AFTER_BEYOND_NEWEST, CLOSE_TOKEN_ROTATED
from sparkwatch_agent.shared.strict_text import TextFormatError, loads_json

log = logging.getLogger(__name__)

STREAM_BATCH = 500
#: What a ``PUT /v1/interval`` body may hold.
LEASE_KEYS = frozenset({"holder", "interval_s", "ttl_s"})
MAX_SEQ = 2**63 - 1


#: How often a stream handler looks for new frames. Polling the ring costs one event-loop wake-up per client
#: per poll whatever the sampling rate; waking per sample cost ~0.3 % of a core at 10 Hz (more than the
#: sampling itself), polling at 0.5 s ~0.12 %, at 1 s ~0.06 %. Live latency is at most this.
STREAM_POLL_S = 1.0
#: The close reason of a stream whose token was rotated (CLOSE_TOKEN_ROTATED), as the coordinator logs it.
TOKEN_ROTATED_REASON = b"the agent's API token changed: connect again with the new one"


@dataclass(frozen=True, slots=True)
class AgentContext:
    sampler: Sampler
    registry: CollectorRegistry
    token: ServerToken | None
    sim: SimGb10 | None
    wall_ns: Callable[[], int]
    mono_ns: Callable[[], int]


CONTEXT = web.AppKey("context", AgentContext)
WEBSOCKETS: web.AppKey[weakref.WeakSet[web.WebSocketResponse]] = web.AppKey("websockets")


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[CONTEXT].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    snap = ctx.sampler.snapshot
    reasons = []
    age_s = None
    age_s = sample_age_s(snap, ctx.mono_ns())
    if age_s is None:
        reasons.append("no sample yet")
    elif is_stale(snap, age_s):
        reasons.append(f"last sample is {age_s:.1f} s old")
    if snap.backend != "none" and not snap.gpu_ok:
        reasons.append(f"GPU backend {snap.backend}: {snap.gpu_reason}")
    if not snap.host_memory_ok:
        reasons.append("host memory unreadable")
    body: dict[str, Any] = {
        "node": snap.node,
        "boot_id": snap.boot_id,
        "backend": snap.backend,
        "gpu_ok": snap.gpu_ok,
        "last_seq": snap.sample.seq if snap.sample else 0,
        "last_sample_age_s": age_s,
        "interval_s": snap.interval_s,
    }
    if reasons:
        return web.json_response({"status": "degraded", "reason": "; ".join(reasons), **body}, status=503)
    return web.json_response({"status": "ok", **body})


async def time_probe(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    t_wall_ns, t_mono_ns = read_pair(ctx.wall_ns, ctx.mono_ns)
    return web.json_response({"t_wall_ns": t_wall_ns, "t_mono_ns": t_mono_ns, "boot_id": ctx.sampler.boot_id})


async def capabilities(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    snap = ctx.sampler.snapshot
    return web.json_response(capabilities_json(snap))


async def _json_body(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object. JSON is UTF-8 whatever charset the request names; a body too deep for
    the parser, a number past a double's range or a NaN is a 400 like any other (shared.strict_text)."""
    try:
        body = loads_json(await request.read(), unique_keys=True)
    except TextFormatError as exc:
        reason = f"body {exc}"[:200]
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "bad_request", "reason": reason}), content_type="application/json"
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "bad_request", "reason": "body must be a JSON object"}),
            content_type="application/json",
        )
    return body


def _interval_state(ctx: AgentContext) -> dict[str, Any]:
    now = ctx.mono_ns()
    leases = ctx.sampler.leases
    return {
        "interval_s": leases.current_s(now),
        "configured_s": leases.configured_s,
        "leases": [
            {
                "holder": lease.holder,
                "interval_s": lease.interval_s,
                "expires_in_s": round((lease.expires_mono_ns - now) / 1e9, 3),
            }
            for lease in leases.active(now)
        ],
    }


async def interval_get(request: web.Request) -> web.Response:
    return web.json_response(_interval_state(request.app[CONTEXT]))


async def interval_put(request: web.Request) -> web.Response:
    """Take or renew a lease: ``{"holder": str, "interval_s": float, "ttl_s": float?}``."""
    ctx = request.app[CONTEXT]
    body = await _json_body(request)
    try:
        holder, interval_s, ttl_s = lease_asked(body, LEASE_KEYS)
        ctx.sampler.leases.grant(holder, interval_s, ttl_s, ctx.mono_ns())
    except ValueError as exc:
        return json_error(400, "bad_request", str(exc))
    except TooManyLeases as exc:
        refusal = json_error(429, "too_many_leases", str(exc))
        refusal.headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_s)))
        return refusal
    ctx.sampler.wake()
    return web.json_response(_interval_state(ctx))


async def interval_delete(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    holder = request.query.get("holder", "")
    if not holder:
        return json_error(400, "bad_request", "query parameter holder is required")
    released = ctx.sampler.leases.release(holder)
    ctx.sampler.wake()
    return web.json_response({"released": released, **_interval_state(ctx)})


async def sim_load(request: web.Request) -> web.Response:
    """Drive the simulated GPU: ``{"util_ratio": 0..1?, "model_bytes": int?, "throttle": {"reasons": int,
    "sm_clock_mhz": int?} | null?}`` (``throttle: null`` ends an episode)."""
    ctx = request.app[CONTEXT]
    if ctx.sim is None:
        return json_error(404, "not_found", "this agent is not running the sim backend")
    body = await _json_body(request)
    try:
        unknown = set(body) - {"util_ratio", "model_bytes", "throttle"}
        if unknown:
            raise ValueError(f"unknown keys: {', '.join(sorted(unknown))}")
        util = json_number(body, "util_ratio")
        model = body.get("model_bytes")
        if model is not None and (isinstance(model, bool) or not isinstance(model, int)):
            raise ValueError("model_bytes must be an integer")
        episode = _throttle(body["throttle"]) if "throttle" in body else None  # (None, None): it ends
        ctx.sim.check_load(util, model)  # everything checked before anything changes: a 400 changes nothing
        if episode is not None:
            ctx.sim.check_throttle(*episode)
            ctx.sim.set_throttle(*episode)
        ctx.sim.set_load(util_ratio=util, model_bytes=model)
    except ValueError as exc:
        return json_error(400, "bad_request", str(exc))
    return web.json_response(ctx.sim.state())


def _throttle(value: Any) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict) or set(value) - {"reasons", "sm_clock_mhz"}:
        raise ValueError('throttle must be null or {"reasons": int, "sm_clock_mhz": int?}')
    reasons, mhz = value.get("reasons"), value.get("sm_clock_mhz")
    for key, v in (("reasons", reasons), ("sm_clock_mhz", mhz)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"throttle {key} must be an integer")
    if reasons is None:
        raise ValueError("throttle needs reasons (a clock event reasons bitmask)")
    return reasons, mhz


async def stream(request: web.Request) -> web.StreamResponse:
    """Hello, then every frame after ``?after=SEQ`` from the ring, then live; gaps are announced."""
    ctx = request.app[CONTEXT]
    raw_after = request.query.get("after")
    try:
        if raw_after is not None and not (raw_after.isascii() and raw_after.isdigit()):
            raise ValueError  # int() takes "1_0", " 7" and "+7" too: not a seq as the stream writes one
        after = int(raw_after) if raw_after is not None else ctx.sampler.last_seq
        if not 0 <= after <= MAX_SEQ:
            raise ValueError
    except ValueError:
        return json_error(400, "bad_request", "after must be a non-negative integer seq")
    # the token this stream came in with, as the request presented it: the stream ends when it is rotated
    admission = Admission(
        ctx.token, asyncio.get_running_loop().time, presented=request.headers.get("Authorization")
    )
    ws = web.WebSocketResponse(
        heartbeat=20.0, max_msg_size=1 << 20, compress=False
    )  # deflate costs more CPU than it saves
    await ws.prepare(request)
    request.app[WEBSOCKETS].add(ws)
    reader = asyncio.create_task(_drain(ws))
    try:
        await _send_frames(ws, ctx, after, reader, admission)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        reader.cancel()
        await ws.close()
    return ws


async def _drain(ws: web.WebSocketResponse) -> None:
    """Read (and ignore) client messages so pings and close frames are processed."""
    async for msg in ws:
        if msg.type == WSMsgType.ERROR:
            break


async def _send_frames(
    ws: web.WebSocketResponse,
    ctx: AgentContext,
    after: int,
    reader: asyncio.Task[None],
    admission: Admission,
) -> None:
    sampler = ctx.sampler
    snap = sampler.snapshot

    def hello(s: Snapshot) -> bytes:
        # host facts re-read for every hello: the OS and kernel it reports are those of now
        return encode_frame(hello_frame(s, read_host_facts()))

    await ws.send_str(hello(snap).decode())
    refusal = beyond_newest(after, sampler.last_seq, sampler.boot_id)
    if refusal is not None:
        await ws.send_str(encode_frame(refusal).decode())
        reason = refusal["reason"].encode()[:123].decode(errors="ignore")
        await ws.close(code=CLOSE_AFTER_BEYOND_NEWEST, message=reason.encode())
        return
    cursor = StreamCursor(after, snap.inventory_rev)
    while not ws.closed and not reader.done():
        if admission.revoked():
            await ws.close(code=CLOSE_TOKEN_ROTATED, message=TOKEN_ROTATED_REASON)
            return
        lines = cursor.next_lines(sampler, STREAM_BATCH, hello)
        if lines:
            await ws.send_str(b"\n".join(lines).decode())
            continue
        await asyncio.wait({reader}, timeout=STREAM_POLL_S)  # returns early when the client goes away


async def _close_websockets(app: web.Application) -> None:
    sockets = app[WEBSOCKETS]
    for ws in tuple(sockets):
        await ws.close(code=1001, message=b"agent shutting down")


#: The query parameters each route takes (method, path); a route not listed takes none.
QUERIES: Mapping[tuple[str, str], tuple[str, ...]] = MappingProxyType(
    {("GET", "/v1/stream"): ("after",), ("DELETE", "/v1/interval"): ("holder",)}
)


def _declared_queries(_request: web.Request, method: str, route: str) -> tuple[str, ...]:
    return QUERIES.get((method, route), ())


def make_app(ctx: AgentContext, listen_host: str = "127.0.0.1") -> web.Application:
    """The agent's API; ``listen_host``: where it listens (on loopback without a token, only an address or
    localhost is answered as ``Host``, as the coordinator's: shared.http.browser_guard; off loopback
    Prometheus may scrape it by any name)."""
    middleware = bearer_middleware(ctx.token, lambda path: path.startswith("/v1/"))
    queries = query_middleware(_declared_queries)
    browsers = browser_guard(hosts_by_address=ctx.token is None and is_loopback(listen_host))
    app = web.Application(
        middlewares=[json_refusals, browsers, middleware, queries], client_max_size=64 * 1024
    )
    app[CONTEXT] = ctx
    app[WEBSOCKETS] = weakref.WeakSet()
    app.on_shutdown.append(_close_websockets)
    name_server(app, AGENT_SERVER)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/v1/time", time_probe)
    app.router.add_get("/v1/capabilities", capabilities)
    app.router.add_get("/v1/interval", interval_get)
    app.router.add_put("/v1/interval", interval_put)
    app.router.add_delete("/v1/interval", interval_delete)
    app.router.add_post("/v1/sim/load", sim_load)
    app.router.add_get("/v1/stream", stream)
    return app
