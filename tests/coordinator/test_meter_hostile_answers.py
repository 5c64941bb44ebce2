"""A meter that answers what its reader does not expect — JSON nested past the parser, a Members that is no
list, a redirect to another host, a password rotated on the plug — gives a failed poll with its reason (or
the reading, with the new password), and the poller polls on: each of these once ended its task for good,
in silence, or sent the BMC's session token to another host."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from doubles.shelly import ShellyPlug
from helpers.loopback import served
from helpers.meter_sink import Sink
from sparkwatch.meters.poller import MeterPoller, Reading
from sparkwatch.meters.prometheus import PrometheusMeter
from sparkwatch.meters.redfish import RedfishMeter
from sparkwatch.meters.shelly import ShellyMeter
from sparkwatch.meters.spec import MeterSpec

T0 = 1_800_000_000_000_000_000
ROOT = {"Chassis": {"@odata.id": "/redfish/v1/Chassis"}}
CHASSIS = {"EnvironmentMetrics": {"@odata.id": "/redfish/v1/Chassis/1/EnvironmentMetrics"}}
ENVIRONMENT = {"PowerWatts": {"Reading": 100}}


def _ticks() -> Any:
    now = iter(range(T0, T0 + 10**15, 10**6))
    return lambda: next(now)


def _bmc(answers: dict[str, Any], seen: list[str] | None = None) -> web.Application:
    """A BMC without credentials serving ``answers`` by path: a dict as JSON, bytes as they are, a
    ``web.Response`` as it is."""

    async def get(request: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen.append(f"{request.path} {request.headers.get('X-Auth-Token')}")
        answer = answers.get(request.path)
        if answer is None:
            return web.json_response({}, status=404)
        if isinstance(answer, web.StreamResponse):
            return answer
        if isinstance(answer, bytes):
            return web.Response(body=answer, content_type="application/json")
        return web.json_response(answer)

    app = web.Application()
    app.router.add_get("/{tail:.*}", get)
    return app


def _resources(members: Any) -> dict[str, Any]:
    return {
        "/redfish/v1/": ROOT,
        "/redfish/v1/Chassis": {"Members": members},
        "/redfish/v1/Chassis/1": CHASSIS,
        "/redfish/v1/Chassis/1/EnvironmentMetrics": ENVIRONMENT,
    }


@pytest.mark.parametrize(
    ("resources", "said"),
    [
        ({**_resources([]), "/redfish/v1/": b"[" * 200_000 + b"]" * 200_000}, "JSON nested too deep to read"),
        (_resources(5), "redfish /redfish/v1/Chassis Members is not a list, got int"),
        (_resources(None), "Members is not a list, got NoneType"),
    ],
    ids=["deep-json", "members-int", "members-null"],
)
async def test_an_answer_the_reader_does_not_expect_is_a_failed_poll_and_polling_goes_on(
    resources: dict[str, Any], said: str
) -> None:
    async for url in served(_bmc(resources)):
        spec = MeterSpec("redfish", url, interval_s=0.5)
        sink = Sink()
        poller = MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticks())
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                await poller.poll_once(session)  # raised (RecursionError, TypeError): the task ended
    assert poller.state.polls == poller.state.failures == 3 and sink.readings == []
    assert poller.state.error is not None and said in poller.state.error
    assert [error for _, _, error in sink.errors] == [poller.state.error] * 3


class _Buggy:
    """A reader with a bug that only some answer brings out."""

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        raise TypeError("'int' object is not iterable")

    def waiting_for(self) -> str | None:
        return None

    async def close(self, session: aiohttp.ClientSession) -> None:
        pass


async def test_a_readers_bug_is_a_failed_poll_with_its_trace_once(caplog: pytest.LogCaptureFixture) -> None:
    spec = MeterSpec("shelly", "http://127.0.0.1:9", interval_s=0.5)
    sink = Sink()
    poller = MeterPoller("n", spec, _Buggy(), sink, now_ns=_ticks())
    async with aiohttp.ClientSession() as session:
        with caplog.at_level(logging.WARNING, logger="sparkwatch.meters"):
            for _ in range(3):
                await poller.poll_once(session)
    assert poller.state.failures == 3 and poller.state.error == "TypeError: 'int' object is not iterable"
    (said,) = caplog.records  # a bug: its trace, once, and no second line of the same failure
    assert said.exc_info is not None and "reading failed" in said.getMessage()


async def test_a_redfish_redirect_to_another_host_is_not_followed_and_no_token_goes_there(
    tmp_path: pathlib.Path,
) -> None:
    """aiohttp strips Authorization on a redirect to another host, not X-Auth-Token: the session token went
    with each poll to wherever the BMC pointed, and that host's reading was stored as the node's."""
    elsewhere: list[str] = []
    async for other in served(_bmc({"/leak": ENVIRONMENT | {"PowerWatts": {"Reading": 1}}}, elsewhere)):
        moved = web.Response(status=302, headers={"Location": f"{other}/leak"})
        resources = {**_resources([{"@odata.id": "/redfish/v1/Chassis/1"}])}
        resources["/redfish/v1/Chassis/1/EnvironmentMetrics"] = moved
        async for url in served(_bmc(resources)):
            spec = MeterSpec("redfish", url, interval_s=0.5)
            sink = Sink()
            poller = MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticks())
            async with aiohttp.ClientSession() as session:
                await poller.poll_once(session)
    assert elsewhere == [] and sink.readings == []
    assert poller.state.error is not None and poller.state.error.startswith(
        f"redfish answered HTTP 302 for /redfish/v1/Chassis/1/EnvironmentMetrics, pointing to {other}/leak:"
        " not followed"
    )


async def test_a_shelly_password_rotated_on_the_plug_and_in_its_file_is_taken_at_the_next_poll(
    tmp_path: pathlib.Path,
) -> None:
    """The digest middleware was made once, with the password read at the first poll: a rotated one was
    never read again (the docs say every secret file is read where it is used)."""
    plug = ShellyPlug(power_w=50.0, password="first-pass")
    secret = tmp_path / "plug.pw"
    secret.write_text("first-pass\n")
    async for url in served(plug.app()):
        spec = MeterSpec("shelly", url, interval_s=0.5, password_file=secret)
        sink = Sink()
        meter = ShellyMeter(spec)
        poller = MeterPoller("n", spec, meter, sink, now_ns=_ticks())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
            plug.password = "second-pass"
            secret.write_text("second-pass\n")
            await poller.poll_once(session)
            kept = meter._middlewares()
            await poller.poll_once(session)  # the unchanged password: its middleware kept (and its nonce)
    assert [r.power_w for r in sink.readings] == [50.0] * 3 and sink.errors == []
    assert meter._middlewares() == kept


async def test_a_redirect_on_the_meters_own_host_is_followed_with_its_credentials(
    tmp_path: pathlib.Path,
) -> None:
    """A BMC that adds a trailing slash, a plug behind a rewrite: followed (refusing every redirect broke
    them), as far as MAX_REDIRECTS; the Shelly's digest answered at the new path."""
    seen: list[str] = []
    resources = _resources([{"@odata.id": "/redfish/v1/Chassis/1"}])
    resources["/redfish/v1/Chassis"] = web.Response(status=301, headers={"Location": "/redfish/v1/Chassis/"})
    resources["/redfish/v1/Chassis/"] = {"Members": [{"@odata.id": "/redfish/v1/Chassis/1"}]}
    async for url in served(_bmc(resources, seen)):
        spec = MeterSpec("redfish", url, interval_s=0.5)
        sink = Sink()
        async with aiohttp.ClientSession() as session:
            await MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticks()).poll_once(session)
    assert [r.power_w for r in sink.readings] == [100.0] and "/redfish/v1/Chassis/ None" in seen
    plug = ShellyPlug(power_w=50.0, password="pass-word")
    secret = tmp_path / "plug.pw"
    secret.write_text("pass-word\n")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/rpc/Switch.GetStatus?{request.query_string}")

    app = plug.app()
    app.router.add_get("/old/rpc/Switch.GetStatus", moved)
    async for url in served(app):
        spec = MeterSpec("shelly", f"{url}/old", interval_s=0.5, password_file=secret)
        sink = Sink()
        async with aiohttp.ClientSession() as session:
            await MeterPoller("n", spec, ShellyMeter(spec), sink, now_ns=_ticks()).poll_once(session)
    assert [r.power_w for r in sink.readings] == [50.0] and sink.errors == []


async def test_a_shelly_redirect_to_another_host_is_not_followed() -> None:
    async def moved(_request: web.Request) -> web.Response:
        raise web.HTTPFound("http://192.0.2.7/rpc/Switch.GetStatus?id=0")

    app = web.Application()
    app.router.add_get("/rpc/Switch.GetStatus", moved)
    async for url in served(app):
        spec = MeterSpec("shelly", url, interval_s=0.5)
        sink = Sink()
        poller = MeterPoller("n", spec, ShellyMeter(spec), sink, now_ns=_ticks())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
    assert sink.readings == [] and poller.state.error == (
        "shelly answered HTTP 302 for /rpc/Switch.GetStatus, pointing to"
        " http://192.0.2.7/rpc/Switch.GetStatus?id=0: not followed (another host: credentials go to the"
        " configured url only)"
    )


async def test_a_prometheus_meter_follows_a_redirect_on_its_own_host_only(tmp_path: pathlib.Path) -> None:
    """aiohttp followed any redirect: the bearer token dropped on another host, but that host's power was
    stored as the node's. Now that is a failed poll with its reason; a move on the same host is followed,
    token and query kept."""
    (tmp_path / "token").write_text("pdu-reader\n")
    asked: list[str] = []

    async def query(request: web.Request) -> web.Response:
        asked.append(
            f"{request.host.split(':')[0]} {request.headers.get('Authorization')} {request.query_string}"
        )
        value = [1733270000.1, "301.5"]
        return web.json_response({"status": "success", "data": {"resultType": "scalar", "result": value}})

    async def moved(request: web.Request) -> web.Response:
        where = (
            f"http://localhost:{request.url.port}/api/v1/query" if "away" in request.path else "/api/v1/query"
        )
        raise web.HTTPFound(f"{where}?{request.query_string}")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    app.router.add_get("/away/api/v1/query", moved)
    app.router.add_get("/old/api/v1/query", moved)
    found = {}
    async for url in served(app):
        for name in ("away", "old"):
            spec = MeterSpec(
                "prometheus", f"{url}/{name}", query="pdu_watts", bearer_token_file=tmp_path / "token"
            )
            sink = Sink()
            poller = MeterPoller("n", spec, PrometheusMeter(spec), sink, now_ns=_ticks())
            async with aiohttp.ClientSession() as session:
                await poller.poll_once(session)
            found[name] = ([r.power_w for r in sink.readings], poller.state.error)
    assert asked == ["127.0.0.1 Bearer pdu-reader query=pdu_watts"]
    assert found["old"] == ([301.5], None)
    readings, error = found["away"]
    assert readings == [] and error is not None
    assert error.startswith(
        "prometheus answered HTTP 302 for /away/api/v1/query, pointing to http://localhost:"
    )
    assert error.endswith(": not followed (another host: credentials go to the configured url only)")
