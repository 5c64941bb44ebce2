"""HTTP pieces both distributions use: JSON errors, the bearer-token and query-parameter middlewares, and
bind-or-fail with the connection limits every server gets."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from sparkwatch_agent.shared.auth import ServerToken, bearer_ok, bearer_token, expected_token
from sparkwatch_agent.shared.conn_guard import ConnectionGuard, RefusalBody, error_and_reason
from sparkwatch_agent.shared.listener import GuardedSite
from sparkwatch_agent.shared.log_limit import install_accept_error_log
from sparkwatch_agent.shared.server_limits import LimitsError, ServerLimits, limits_from_environ, soft_nofile

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: What each sparkwatch server says it is in its ``Server`` header (:func:`name_server`).
AGENT_SERVER = "sparkwatch-agent"
COORDINATOR_SERVER = "sparkwatch-coordinator"
SIM_MODEL_SERVER = "sparkwatch-sim-model"
#: The proxy names itself in ``Via`` on what it relays and in ``Server`` on its own answers.
PROXY_SERVER = "sparkwatch-proxy"
SERVER_NAMES = (AGENT_SERVER, COORDINATOR_SERVER, SIM_MODEL_SERVER, PROXY_SERVER)
#: The name an application's answers give in ``Server``, kept on it for :func:`start_site`: the connection
#: guard's refusals, written before aiohttp sees the connection, give it too.
SERVER_NAME = web.AppKey("server_name", str)


#: The exit code of a server whose address cannot be had now but may be soon (sysexits' EX_TEMPFAIL): a port
#: still held (an old process stopping), an address not assigned yet (a NIC up after the network target), a
#: resolver that does not answer for now. The units restart it (``Restart=on-failure``); exit 2, a mistake,
#: they do not (``RestartPreventExitStatus=2``), and an agent that booted before its address stayed down.
EXIT_TRY_AGAIN = 75
_FOR_NOW = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL})


class BindError(Exception):
    """A server could not listen as asked (port in use, bad address, a bad limit); one line for the user,
    and the exit code: 2, or ``EXIT_TRY_AGAIN`` where it may pass (``for_now``)."""

    def __init__(self, message: str, *, for_now: bool = False) -> None:
        super().__init__(message)
        self.exit_code = EXIT_TRY_AGAIN if for_now else 2


def host_port(host: str, port: int | None) -> str:
    """``host:port`` as a URL writes it (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return shown if port is None else f"{shown}:{port}"


def bind_error(host: str, port: int, exc: OSError) -> BindError:
    """The one line for ``exc`` met listening on host:port (an IPv6 host in brackets, as it is typed)."""
    for_now = exc.errno in _FOR_NOW or (isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN)
    return BindError(f"cannot listen on {host_port(host, port)}: {exc.strerror or exc}", for_now=for_now)


def name_server(app: web.Application, name: str) -> None:
    """Every answer of ``app`` names the sparkwatch service that sent it (``Server: sparkwatch-agent``): a
    client pointed at the wrong one (an agent's port given as the coordinator's) can say which it reached
    instead of echoing a bare "no route". The name only: no version for a scanner to match."""
    app[SERVER_NAME] = name

    async def named(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Server"] = name

    app.on_response_prepare.append(named)


def other_service(headers: Mapping[str, str], expected: str) -> str | None:
    """The sparkwatch service an answer's ``Server`` header(s) name when it is not ``expected`` (None: the
    expected one, or no sparkwatch service at all, which the caller judges by its answer). Each name is
    read without a version (``sparkwatch-agent/0.2``), in a list a proxy may have made of several. An
    answer sparkwatch's proxy relayed names it in ``Via`` (``1.1 sparkwatch-proxy``): the proxy is what
    was reached, whatever its upstream calls itself."""
    hops = {fields[1] for part in _parts(headers, "Via") if len(fields := part.split()) > 1}
    if PROXY_SERVER in hops and expected != PROXY_SERVER:
        return PROXY_SERVER
    names = {part.split("/", 1)[0].strip() for part in _parts(headers, "Server")}
    if expected in names:
        return None
    return next((name for name in SERVER_NAMES if name in names), None)


def _parts(headers: Mapping[str, str], name: str) -> list[str]:
    """The comma-separated parts of every value of header ``name`` (a multidict has several)."""
    getall = getattr(headers, "getall", None)
    values = getall(name, []) if getall is not None else [headers.get(name, "")]
    return [part for value in values for part in value.split(",")]


def json_error(status: int, error: str, reason: Any) -> web.Response:
    """Every refusal the servers send: a status, a short error code and a reason people can act on."""
    return web.json_response({"error": error, "reason": reason}, status=status)


@web.middleware
async def json_refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (no such route, a method the route lacks, a body over the size limit, a plain
    GET on a WebSocket route) as JSON with a reason, like every other refusal; the outermost middleware. A
    client that drops its connection mid-request is no error of ours: not an ERROR with a traceback."""
    try:
        return await handler(request)
    except ConnectionResetError:  # the client went away: its body half sent, or its answer half read
        log.debug("client left during %s %s", request.method, request.path[:200])
        gone = json_error(400, "client_gone", "the connection was lost")  # for nobody: it closes quietly
        gone.force_close()
        return gone
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":  # already one of ours
            raise
        if exc.status == 404:
            reason = f"no route for {request.method} {request.path[:200]}"
        elif exc.status == 405:
            reason = f"{request.method} is not allowed here; allowed: {exc.headers.get('Allow', 'none')}"
        else:
            # aiohttp's words, on one line ("No WebSocket UPGRADE hdr: None\n Can "Upgrade" only to …")
            reason = " ".join((exc.text or exc.reason).removeprefix(f"{exc.status}: ").split())
        refusal = json_error(exc.status, exc.reason.lower().replace(" ", "_"), reason)
        for name in ("Allow", "Retry-After"):
            if name in exc.headers:
                refusal.headers[name] = exc.headers[name]
        return refusal


def query_middleware(
    declared: Callable[[web.Request, str, str], Sequence[str] | None],
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """``400 invalid_query`` for a query parameter a ``/v1/`` route does not take, naming it and those the
    route takes, or one given twice. ``declared(request, METHOD, route)``: the names the matched route
    (its canonical path; HEAD as GET) takes, None where it has no such method (whose 405 says more); no
    route matched is left to its 404. Refused, not ignored: an ignored ``?gate_threshold=0.9`` answered as
    if it had been taken."""

    def taken_by(request: web.Request) -> Sequence[str] | None:
        resource = request.match_info.route.resource
        if not request.query or not request.path.startswith("/v1/") or resource is None:
            return None
        return declared(request, "GET" if request.method == "HEAD" else request.method, resource.canonical)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        taken = taken_by(request)
        unknown = sorted(set(request.query) - set(taken)) if taken is not None else []
        if unknown:
            names = ", ".join(repr(name[:40]) for name in unknown[:5]) + (", …" if len(unknown) > 5 else "")
            takes = f"this route takes {', '.join(taken or ())}" if taken else "this route takes none"
            noun = "parameter" if len(unknown) == 1 else "parameters"
            return json_error(400, "invalid_query", f"unknown query {noun} {names}: {takes}")
        again = sorted({name for name in request.query if len(request.query.getall(name)) > 1})
        if again and taken is not None:  # which of them counts is no client's guess (?x=1&x=2 took the first)
            said = ", ".join(repr(name[:40]) for name in again[:5])
            return json_error(400, "invalid_query", f"query parameter {said} given more than once")
        return await handler(request)

    return check


def bearer_middleware(
    token: ServerToken | None, protected: Callable[[str], bool]
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """401 with a JSON reason for a protected path without the right bearer token (none configured: open);
    a token file's token is the one in force at each request (auth.TokenFile)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if (
            token is not None
            and protected(request.path)
            and len(request.headers.getall("Authorization", [])) > 1
        ):
            # which one counts is each intermediary's guess (the first was taken, the second ignored)
            return json_error(401, "unauthorized", "send one Authorization header, not several")
        if token is not None and protected(request.path) and not bearer_ok(header, expected_token(token)):
            if bearer_token(header) is None:  # no Bearer header at all, in any case of the scheme
                return json_error(
                    401, "unauthorized", "send 'Authorization: Bearer <token>' (see --token-file)"
                )
            return json_error(
                401, "unauthorized", "the bearer token sent is not this server's (see --token-file)"
            )
        return await handler(request)

    return check


#: Methods a page of another site may send without asking first: the ones that change nothing here.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def browser_guard(hosts_by_address: bool) -> Callable[..., Awaitable[web.StreamResponse]]:
    """403 with a JSON reason for what only a browser sends on a page's behalf. A request that changes
    state, or opens a WebSocket, with an ``Origin`` other than this server's: a page of another site (a
    ``text/plain`` POST needs no CORS preflight, so without this any page could open or end runs on an
    API open without a token). ``hosts_by_address``: also a ``Host`` that is not an IP address or
    ``localhost`` (DNS rebinding: a name that now resolves to 127.0.0.1 makes another site's page
    same-origin to the browser), for an API on loopback without a token. Clients that are not browsers
    send no ``Origin`` and address the server as they were told."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        changes = (
            request.method not in SAFE_METHODS or request.headers.get("Upgrade", "").lower() == "websocket"
        )
        if origin is not None and changes and _origin_host(origin) != request.host.lower():
            return json_error(
                403,
                "cross_origin",
                f"a request from a page of {origin} is refused (another site, in a browser)",
            )
        if hosts_by_address and not _address_or_localhost(request.host):
            return json_error(
                403,
                "host_not_allowed",
                f"Host {request.host!r}: an API open without a token answers to an IP address or localhost"
                " only (a name could be another site's, rebound to this address); use the address",
            )
        return await handler(request)

    return check


def _origin_host(origin: str) -> str | None:
    """``host[:port]`` of an ``Origin`` (``null``, or one without a host: None)."""
    scheme, _, rest = origin.partition("://")
    return rest.lower() or None if scheme in ("http", "https") and "/" not in rest else None


def _address_or_localhost(host: str) -> bool:
    """Whether a ``Host`` (``name[:port]``, ``[v6]:port``) names an IP address or localhost: no DNS name
    another site could point at this address."""
    name = host.rsplit("]", 1)[0].lstrip("[") if host.startswith("[") else host.rsplit(":", 1)[0]
    if name.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


async def start_site(
    runner: web.AppRunner,
    host: str,
    port: int,
    limits: ServerLimits | None = None,
    refusal_shape: RefusalBody = error_and_reason,
    *,
    fds_per_connection: int = 1,
) -> str:
    """Set the runner up and listen on host:port (0: any free port) under ``limits`` (default: the
    environment's, see ``server_limits``); returns its ``http://`` URL. A port in use, a bad address or a
    bad limit is a :class:`BindError`, with the runner already cleaned up. ``refusal_shape``: the JSON
    the guard's 503 and 408 carry (the proxy answers OpenAI clients in OpenAI's error shape); they name the
    app's server as its other answers do (:data:`SERVER_NAME`). ``fds_per_connection``: the descriptors
    each connection holds (the proxy's 2: the client's and the upstream's): the default cap is derived from
    the open files left per connection, and the warning of a cap that leaves too few counts them.

    Every accepted connection passes a :class:`ConnectionGuard` (the cap, the header deadline), aiohttp's
    keep-alive timeout closes connections idle between requests, and accept errors such as EMFILE are
    logged once a minute instead of a traceback a second."""
    nofile = soft_nofile()
    if limits is None:
        try:
            limits = limits_from_environ(os.environ, None if nofile is None else nofile // fds_per_connection)
        except LimitsError as exc:
            raise BindError(str(exc)) from None
    if nofile is not None and limits.max_connections * fds_per_connection > nofile // 2:
        log.warning(
            "up to %d connections leave few of the %d open files for anything else; raise LimitNOFILE",
            limits.max_connections,
            nofile,
        )
    # the handler arguments aiohttp's runner keeps for the server it makes in setup()
    handler_args = runner._kwargs
    handler_args["keepalive_timeout"] = min(
        handler_args.get("keepalive_timeout", math.inf), limits.idle_timeout_s
    )
    install_accept_error_log(asyncio.get_running_loop(), log)
    await runner.setup()
    try:
        guard = ConnectionGuard(limits, shape=refusal_shape, server=runner.app.get(SERVER_NAME))
        await GuardedSite(runner, host, port, guard).start()
    except OSError as exc:
        await runner.cleanup()
        raise bind_error(host, port, exc) from None
    bound_host, bound_port = runner.addresses[0][:2]
    return f"http://[{bound_host}]:{bound_port}" if ":" in bound_host else f"http://{bound_host}:{bound_port}"
