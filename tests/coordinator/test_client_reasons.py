"""Why the CLI could not reach a coordinator, in the words that help: the system's reason for a refused
connection (aiohttp's own text says ``ssl:default`` of plain http too), the resolver's for a name that does
not resolve, and the TLS library's for a certificate that fails; and a refusal that is not a
coordinator's, from a URL that names another service."""

from __future__ import annotations

import socket
import ssl

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.test_utils import TestServer

from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget
from sparkwatch.http_reasons import unreachable_reason
from sparkwatch.proxy.proxy import ProxyConfig
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sinks import PrintSink
from sparkwatch_agent.shared.http import AGENT_SERVER, host_port, name_server

#: A connection key as aiohttp builds one (only its host and port are printed).
KEY = ConnectionKey(*(["coordinator.example", 8750] + [None] * (len(ConnectionKey._fields) - 2)))


def test_a_refused_connection_is_the_systems_reason() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 8750)")
    assert unreachable_reason(aiohttp.ClientConnectorError(KEY, refused)) == "Connection refused"


def test_a_name_that_does_not_resolve_is_the_resolvers_reason() -> None:
    unresolved = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert unreachable_reason(aiohttp.ClientConnectorError(KEY, unresolved)) == "Name or service not known"


def test_a_certificate_that_fails_names_its_cause() -> None:
    failed = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    said = unreachable_reason(aiohttp.ClientConnectorCertificateError(KEY, failed))
    assert "CERTIFICATE_VERIFY_FAILED" in said and "Operation not permitted" not in said


def test_a_tls_failure_is_the_tls_librarys_words_without_aiohttps_address() -> None:
    """A link to an agent behind TLS that fails: the cause once, not the address twice with "ssl:…"."""
    failed = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    said = unreachable_reason(aiohttp.ClientConnectorSSLError(KEY, failed))
    assert said == "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)"
    assert unreachable_reason(aiohttp.ClientConnectorError(KEY, OSError())) == "OSError"  # never empty


def test_an_ipv6_host_is_written_as_a_url_writes_it() -> None:
    assert host_port("::1", 9464) == "[::1]:9464"
    assert host_port("10.0.0.12", 9464) == "10.0.0.12:9464" and host_port("spark-1", None) == "spark-1"


async def test_a_refusal_that_is_not_a_coordinators_says_so() -> None:
    """A URL that names another service (a new user gave Prometheus's as --coordinator and read only
    `HTTP 404: 404 page not found`): its refusal is not a coordinator's JSON one, and the line says so; a
    coordinator's own refusal is said as it is."""

    async def prometheus_like(request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found\n")

    async def refusing(request: web.Request) -> web.Response:
        return web.json_response({"error": "not_found", "reason": "no run r1"}, status=404)

    app = web.Application()
    app.router.add_get("/v1/runs/other", prometheus_like)
    app.router.add_get("/v1/runs/r1", refusing)
    server = TestServer(app)
    await server.start_server()
    try:
        async with CoordinatorClient(CoordinatorTarget(str(server.make_url("")).rstrip("/"), None)) as client:
            with pytest.raises(CoordinatorError) as foreign:
                await client.run("other")
            with pytest.raises(CoordinatorError) as ours:
                await client.run("r1")
    finally:
        await server.close()
    url = client.target.url
    assert str(foreign.value) == (
        f"GET {url}/v1/runs/other: HTTP 404: 404 page not found (no coordinator's JSON reason: is {url}"
        " another service?)"
    )
    assert str(ours.value) == f"GET {url}/v1/runs/r1: HTTP 404: no run r1" and ours.value.code == "not_found"


async def test_a_redirect_is_not_followed_and_said_as_one() -> None:
    """aiohttp followed it: the token was dropped on the other host, whose 401 then blamed the token file (a
    307 re-sent a POST there). Nothing goes to where it points."""
    followed: list[str] = []

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"http://localhost:{request.url.port}/elsewhere{request.path}")

    async def elsewhere(request: web.Request) -> web.Response:
        followed.append(request.method)
        return web.json_response({"runs": []})

    app = web.Application()
    app.router.add_route("*", "/v1/{tail:.*}", moved)
    app.router.add_route("*", "/elsewhere/{tail:.*}", elsewhere)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        target = CoordinatorTarget(str(server.make_url("")).rstrip("/"), None)
        async with CoordinatorClient(target) as client:
            with pytest.raises(CoordinatorError) as refused:
                await client.create_run("r")
    finally:
        await server.close()
    assert followed == [] and refused.value.status == 307
    away = target.url.replace("127.0.0.1", "localhost")
    assert str(refused.value) == (
        f"POST {target.url}/v1/runs: HTTP 307, a redirect to {away}/elsewhere/v1/runs: not followed (the"
        " token goes to the coordinator's URL alone): if that is the coordinator, give --coordinator"
        f" {away}/elsewhere"
    )


async def test_the_proxys_port_given_as_the_coordinators_is_named_as_the_proxy() -> None:
    """The proxy relays a /v1/runs it is sent to the model server, whose refusal named that server (a
    sim-model behind it read as "is a sparkwatch-sim-model"): the proxy's Via names what was reached."""

    async def model_server(request: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", model_server)
    server = TestServer(app)
    await server.start_server()
    try:
        upstream = str(server.make_url("")).rstrip("/")
        async with running_proxy("127.0.0.1", 0, ProxyConfig(upstream), PrintSink()) as proxy_url:
            client = CoordinatorClient(CoordinatorTarget(proxy_url, None))
            async with client:
                with pytest.raises(CoordinatorError) as wrong:
                    await client.runs()
    finally:
        await server.close()
    assert str(wrong.value) == (
        f'GET {proxy_url}/v1/runs: HTTP 404: {{"detail": "Not Found"}} ({proxy_url} is a sparkwatch-proxy,'
        " not the coordinator: the coordinator listens on 8750 unless its --listen says otherwise)"
    )


async def test_an_agents_401_to_the_coordinators_token_is_not_said_as_a_token_to_fix() -> None:
    """An agent's port given as the coordinator's, with the coordinator's token: the agent's "the bearer
    token sent is not this server's" came first and sent the user to fix a token that was right."""

    async def refusing(request: web.Request) -> web.Response:
        reason = "the bearer token sent is not this server's (see --token-file)"
        return web.json_response({"error": "unauthorized", "reason": reason}, status=401)

    app = web.Application()
    app.router.add_get("/v1/runs", refusing)
    name_server(app, AGENT_SERVER)
    server = TestServer(app)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        async with CoordinatorClient(CoordinatorTarget(url, "the-coordinators-token-0123")) as client:
            with pytest.raises(CoordinatorError) as wrong:
                await client.runs()
    finally:
        await server.close()
    assert str(wrong.value).startswith(
        f"GET {url}/v1/runs: HTTP 401: refused by the sparkwatch-agent ({url} is a sparkwatch-agent, not the"
    )


async def test_a_401_to_a_request_without_a_token_says_where_one_is_given() -> None:
    """A new user with no token file anywhere read only `send 'Authorization: Bearer <token>'`."""

    async def locked(request: web.Request) -> web.Response:
        return web.json_response({"error": "unauthorized", "reason": "send a bearer token"}, status=401)

    app = web.Application()
    app.router.add_get("/v1/runs", locked)
    server = TestServer(app)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    try:
        said = []
        for token in (None, "wrong"):
            async with CoordinatorClient(CoordinatorTarget(url, token)) as client:
                with pytest.raises(CoordinatorError) as refused:
                    await client.runs()
                said.append(str(refused.value))
    finally:
        await server.close()
    assert said[0] == (
        f"GET {url}/v1/runs: HTTP 401: send a bearer token (no token was sent: give --token-file, or set"
        " $SPARKWATCH_TOKEN_FILE)"
    )
    assert said[1] == f"GET {url}/v1/runs: HTTP 401: send a bearer token"  # one was sent: the reason is all


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8750/v1", "http://127.0.0.1:8750/v1/", "http://h/x/api/v1"]
)
def test_a_coordinator_url_with_the_apis_prefix_is_refused(url: str) -> None:
    """`--coordinator http://host:8750/v1` asked for /v1/v1/runs and read `no route for GET /v1/v1/runs`."""
    with pytest.raises(CoordinatorError, match="coordinator URL is its base, without /"):
        CoordinatorTarget.resolve(url, None, {})
    assert CoordinatorTarget.resolve("http://127.0.0.1:8750/sparkwatch", None, {}).url.endswith("/sparkwatch")
