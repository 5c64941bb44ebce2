"""Meters the coordinator polls: each reader against a loopback server answering its real shape, the
poller's stamps and its honest failures, and the nodes.toml table."""

from __future__ import annotations

import asyncio
import base64
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from doubles.shelly import ShellyPlug
from helpers.loopback import served
from helpers.meter_sink import Sink
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.links.nodes_file import NodesFileError, NodeSpec, parse_nodes
from sparkwatch.meters import poller as meter_poller
from sparkwatch.meters.factory import make_reader
from sparkwatch.meters.poller import MeterPoller, Reading
from sparkwatch.meters.prometheus import PrometheusMeter
from sparkwatch.meters.redfish import RedfishMeter
from sparkwatch.meters.shelly import ShellyMeter
from sparkwatch.meters.spec import MeterSpec
from sparkwatch.store import Store


def _ticking(step_ns: int = 4_000_000) -> Callable[[], int]:
    now = [1_800_000_000_000_000_000]

    def tick() -> int:
        now[0] += step_ns
        return now[0]

    return tick


async def test_a_shelly_plug_with_a_password_is_read_with_digest_auth(tmp_path: pathlib.Path) -> None:
    plug = ShellyPlug(power_w=82.4, password="s3cret-plug")
    (tmp_path / "pw").write_text("s3cret-plug\n")
    async for url in served(plug.app()):
        spec = MeterSpec("shelly", url, interval_s=0.5, password_file=tmp_path / "pw", refresh_s=1.0)
        sink = Sink()
        poller = MeterPoller("spark-1", spec, ShellyMeter(spec), sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
            await poller.poll_once(session)
        assert sink.errors == []
        first = sink.readings[0]
        assert first.power_w == 82.4 and first.domain == "wall" and first.source == "meter:shelly"
        assert first.energy_j == pytest.approx(7258.589 * 3600, rel=1e-6)
        assert first.uncertainty_ns == 2_000_000 + 1_000_000_000  # half the round trip + the refresh period
        assert poller.state.to_json()["last_power_w"] == 82.4 and poller.state.error is None


async def _polled_once(spec: MeterSpec) -> tuple[MeterPoller, Sink]:
    """One poll of the meter ``spec`` names, by the reader the coordinator would make for it."""
    sink = Sink()
    poller = MeterPoller("spark-1", spec, make_reader(spec), sink, now_ns=_ticking())
    async with aiohttp.ClientSession() as session:
        await poller.poll_once(session)
    return poller, sink


@pytest.mark.parametrize(
    ("plug", "password", "channel", "words"),
    [
        (ShellyPlug(password="right"), "wrong", 0, "refused the credentials (HTTP 401"),
        (ShellyPlug(), None, 3, "Argument 'id', value 3 not found!"),
        (ShellyPlug(metering=False), None, 0, "has no apower"),
        (ShellyPlug(power_w=-3.5), None, 0, "shelly apower is negative (-3.5 W): not a node's draw"),
        (
            ShellyPlug(password="right"),
            None,
            0,
            "shelly wants a password (HTTP 401): give the meter a password_file",
        ),
    ],
)
async def test_a_shelly_that_cannot_give_a_reading_is_an_error_never_a_zero(
    tmp_path: pathlib.Path, plug: ShellyPlug, password: str | None, channel: int, words: str
) -> None:
    if password is not None:
        (tmp_path / "pw").write_text(password)
    async for url in served(plug.app()):
        spec = MeterSpec("shelly", url, channel=channel, password_file=tmp_path / "pw" if password else None)
        poller, sink = await _polled_once(spec)
        assert sink.readings == []
        ((domain, _, error),) = sink.errors
        assert domain == "wall" and words in error and "\n" not in error
        assert sink.error_sources == ["meter:shelly"]  # what the export names a meter that never answered
        assert poller.state.failures == 1 and poller.state.error == error


@pytest.mark.parametrize(("kind", "status"), [("shelly", 404), ("redfish", 200), ("prometheus", 502)])
async def test_an_answer_that_is_not_json_names_its_http_status(kind: str, status: int) -> None:
    """An HTML page where JSON was due: a wrong path, a login portal, a proxy's error page."""

    async def page(_request: web.Request) -> web.Response:
        return web.Response(
            status=status, text="<html><body>Not here</body></html>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", page)
    async for url in served(app):
        spec = MeterSpec(kind, url, query="up" if kind == "prometheus" else None)
        _, sink = await _polled_once(spec)
        assert sink.readings == []
        ((_, _, error),) = sink.errors
        assert error == f"{kind} answered HTTP {status} with a body that is not JSON"


def _prometheus(result: Any, status: int = 200) -> web.Application:
    async def query(request: web.Request) -> web.Response:
        assert request.query["query"] == 'pdu_outlet_watts{outlet="3"}'
        if status != 200:
            body = {"status": "error", "errorType": "bad_data", "error": "1:1: parse error: unexpected"}
            return web.json_response(body, status=status)
        return web.json_response({"status": "success", "data": result})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    return app


VECTOR = {"resultType": "vector", "result": [{"metric": {"outlet": "3"}, "value": [1733270000.123, "301.5"]}]}


@pytest.mark.parametrize(
    ("result", "status", "expect"),
    [
        (VECTOR, 200, 301.5),
        ({"resultType": "scalar", "result": [1733270000.1, "12"]}, 200, 12.0),
        ({"resultType": "vector", "result": []}, 200, "returned 0 (vector)"),
        ({"resultType": "vector", "result": VECTOR["result"] * 2}, 200, "returned 2 (vector)"),
        ({"resultType": "vector", "result": [{"metric": {}, "value": [1.0, "NaN"]}]}, 200, "gave nan W"),
        (VECTOR, 400, "HTTP 400: 1:1: parse error"),
    ],
)
async def test_a_prometheus_query_gives_one_series_in_watts_or_says_why_not(
    result: Any, status: int, expect: float | str
) -> None:
    async for url in served(_prometheus(result, status)):
        spec = MeterSpec("prometheus", url, query='pdu_outlet_watts{outlet="3"}')
        sink = Sink()
        poller = MeterPoller("n", spec, PrometheusMeter(spec), sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
        if isinstance(expect, float):
            assert [r.power_w for r in sink.readings] == [expect] and sink.errors == []
        else:
            assert sink.readings == [] and expect in sink.errors[0][2]


async def test_a_meter_that_does_not_answer_is_a_failure_with_a_reason() -> None:
    spec = MeterSpec("shelly", "http://127.0.0.1:9", interval_s=0.5)  # nothing listens on the discard port
    sink = Sink()
    poller = MeterPoller("n", spec, ShellyMeter(spec), sink, now_ns=_ticking())
    async with aiohttp.ClientSession() as session:
        await poller.poll_once(session)
    # the system's words, as a link says them (aiohttp's named "ssl:default" for a plain-http meter)
    assert sink.readings == [] and sink.errors[0][2] == "cannot connect to 127.0.0.1:9: Connection refused"


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('kind = "tasmota"\nurl = "http://p"', "meter.kind: must be one of redfish, shelly, prometheus"),
        ('kind = "shelly"\nurl = "ftp://p"', "meter.url: must be http(s)://host"),
        (
            'kind = "shelly"\nurl = "http://p"\ninterval_s = 0.01',
            "meter.interval_s: must be within [0.2, 60.0]",
        ),
        ('kind = "shelly"\nurl = "http://p"\nquery = "x"', "meter.query: unknown key for a shelly meter"),
        ('kind = "prometheus"\nurl = "http://p"', "meter.query: a prometheus meter needs query"),
        (
            'kind = "redfish"\nurl = "https://bmc"\nverify_tls = "no"',
            "meter.verify_tls: must be true or false",
        ),
        ('kind = "shelly"\nurl = "http://p"\nid = -1', "meter.id: must be a non-negative integer"),
        (
            'kind = "redfish"\nurl = "https://bmc"\npassword_file = "/etc/pw"',
            "meter.username: password_file goes with a username",
        ),
        ('kind = "redfish"\nurl = "https://bmc/redfish/v1/"', "meter.url: is the BMC's address without"),
        ('kind = "shelly"\nurl = "http://p?x=1"', "meter.url: must have no query or fragment"),
        ('kind = "redfish"\nurl = "https://bmc#top"', "meter.url: must have no query or fragment"),
        ('kind = "shelly"\nurl = "http://p"\ndomain = "a b"', "meter.domain: must be a name without spaces"),
        ('kind = "shelly"\nurl = "http://p"\ndomain = "w\\u0007"', "meter.domain: must be a name without"),
    ],
)
def test_a_wrong_meter_table_is_one_line_naming_the_node(table: str, words: str) -> None:
    text = f'[nodes.spark-1]\nurl = "ws://127.0.0.1:9464"\n[nodes.spark-1.meter]\n{table}\n'
    with pytest.raises(NodesFileError) as caught:
        parse_nodes(text)
    assert str(caught.value).startswith("nodes.toml: nodes.spark-1.meter") and words in str(caught.value)


def test_a_meter_table_is_read_with_its_defaults() -> None:
    text = '[nodes.spark-1]\nurl = "ws://h:9464"\n[nodes.spark-1.meter]\nkind = "redfish"\nurl = "https://bmc/"\n'
    (node,) = parse_nodes(text)
    assert node.meter == MeterSpec("redfish", "https://bmc", interval_s=1.0, domain="wall")


def _redfish(
    resources: dict[str, Any],
    token: str | None,
    basic: str | None,
    *,
    refuse_status: int = 204,
    seen: list[str] | None = None,
    refuse_after_s: float = 0.0,
    location: str = "header",
) -> web.Application:
    """A BMC serving ``resources`` by path, wanting either a session token or basic auth (as DSP0266).
    Wrong credentials posted for a session answer ``refuse_status``: 204 as sushy-static answers any login
    without a session, 401 as a BMC refusing them. ``seen``: each login attempt ("POST", or "basic" for a
    request with basic auth the BMC checks) is added to it. ``refuse_after_s``: how long a refusal takes
    (BMCs slow failed logins on purpose). ``location``: where a new session's resource is said, the
    ``Location`` header (DSP0266) or the body's ``@odata.id`` (some BMCs); a DELETE of it with its token
    (a logout) is added to ``seen`` as "DELETE"."""

    async def get(request: web.Request) -> web.Response:
        path = request.path
        if seen is not None and path != "/redfish/v1/" and "Authorization" in request.headers:
            seen.append("basic")  # the service root is open to all: checked everywhere else
        wanted_token = token is not None and request.headers.get("X-Auth-Token") == token
        wanted_basic = basic is not None and request.headers.get("Authorization") == basic
        if path != "/redfish/v1/" and not (wanted_token or wanted_basic):
            if "Authorization" in request.headers:
                await asyncio.sleep(refuse_after_s)
            return web.json_response({"error": {"code": "Base.1.8.NoValidSession"}}, status=401)
        if path not in resources:
            return web.json_response({"error": {"code": "Base.1.8.ResourceMissingAtURI"}}, status=404)
        return web.json_response(resources[path])

    async def login(request: web.Request) -> web.Response:
        body = await request.json()
        if seen is not None:
            seen.append("POST")
        if token is None:
            return web.Response(status=204)  # what sushy-static answers: no session
        if body != {"UserName": "root", "Password": "bmc-pass"}:
            await asyncio.sleep(refuse_after_s)
            return web.Response(status=refuse_status)
        where = "/redfish/v1/SessionService/Sessions/1"
        if location == "elsewhere":  # the BMC's inside address (behind a tunnel): the token goes there not
            return web.json_response(
                {"Id": "1"},
                status=201,
                headers={"X-Auth-Token": token, "Location": f"http://10.0.0.9:1{where}"},
            )
        if location == "header":
            return web.json_response(
                {"Id": "1"}, status=201, headers={"X-Auth-Token": token, "Location": where}
            )
        return web.json_response({"Id": "1", "@odata.id": where}, status=201, headers={"X-Auth-Token": token})

    async def logout(request: web.Request) -> web.Response:
        if token is None or request.headers.get("X-Auth-Token") != token:
            return web.json_response({"error": {"code": "Base.1.8.NoValidSession"}}, status=401)
        if seen is not None:
            seen.append("DELETE")
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/redfish/v1/SessionService/Sessions", login)
    app.router.add_delete("/redfish/v1/SessionService/Sessions/1", logout)
    app.router.add_get("/{tail:.*}", get)
    return app


def _bmc(environment: bool) -> dict[str, Any]:
    chassis: dict[str, Any] = {"Id": "1U", "Power": {"@odata.id": "/redfish/v1/Chassis/1U/Power"}}
    if environment:
        chassis["EnvironmentMetrics"] = {"@odata.id": "/redfish/v1/Chassis/1U/EnvironmentMetrics"}
    return {
        "/redfish/v1/": {
            "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
            "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
        },
        "/redfish/v1/Chassis": {"Members": [{"@odata.id": "/redfish/v1/Chassis/1U"}]},
        "/redfish/v1/Chassis/1U": chassis,
        "/redfish/v1/Chassis/1U/EnvironmentMetrics": {
            "PowerWatts": {"Reading": 374, "DataSourceUri": "/redfish/v1/Chassis/1U/Sensors/TotalPower"},
            "EnergykWh": {"Reading": 325.675},
        },
        "/redfish/v1/Chassis/1U/Power": {
            "PowerControl": [{"MemberId": "0", "Name": "System Input Power", "PowerConsumedWatts": 344}]
        },
    }


@pytest.mark.parametrize(
    ("environment", "token", "expect"),
    [
        (True, "session-token-1", (374.0, 325.675 * 3.6e6)),  # a session, EnvironmentMetrics
        (False, None, (344.0, None)),  # no session given out: basic auth; the older Power resource
    ],
)
async def test_redfish_logs_in_follows_the_chassis_and_reads_its_power(
    tmp_path: pathlib.Path, environment: bool, token: str | None, expect: tuple[float, float | None]
) -> None:
    (tmp_path / "pw").write_text("bmc-pass\n")
    basic = "Basic " + base64.b64encode(b"root:bmc-pass").decode() if token is None else None
    async for url in served(_redfish(_bmc(environment), token, basic)):
        spec = MeterSpec("redfish", url, username="root", password_file=tmp_path / "pw")
        sink = Sink()
        poller = MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
        assert sink.errors == []
        assert [(r.power_w, r.energy_j) for r in sink.readings] == [expect]


@pytest.mark.parametrize("location", ["header", "body", "elsewhere"])
async def test_redfish_logs_out_when_the_poller_stops(tmp_path: pathlib.Path, location: str) -> None:
    """A BMC keeps a session until its timeout and holds only a few: a coordinator restarted a few times
    used them all up. The session is deleted (DSP0266's logout) when the poller is stopped."""
    (tmp_path / "pw").write_text("bmc-pass\n")
    seen: list[str] = []
    async for url in served(_redfish(_bmc(True), "session-token-1", None, seen=seen, location=location)):
        spec = MeterSpec("redfish", url, username="root", password_file=tmp_path / "pw", interval_s=0.05)
        sink = Sink()
        poller = MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            task = asyncio.create_task(poller.run(session))
            while len(sink.readings) < 2:
                await asyncio.sleep(0.01)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert seen == ["POST", "DELETE"] and sink.errors == []


async def test_redfish_wrong_credentials_and_an_unknown_chassis_are_errors(tmp_path: pathlib.Path) -> None:
    (tmp_path / "pw").write_text("wrong\n")
    (tmp_path / "good").write_text("bmc-pass\n")
    said = []
    async for url in served(_redfish(_bmc(True), "t", None)):
        for spec in (
            MeterSpec("redfish", url, username="root", password_file=tmp_path / "pw"),
            MeterSpec("redfish", url, chassis="2U", username="root", password_file=tmp_path / "good"),
        ):
            sink = Sink()
            async with aiohttp.ClientSession() as session:
                await MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticking()).poll_once(session)
            assert sink.readings == [] and len(sink.errors) == 1
            said.append(sink.errors[0][2])
    assert "refused the credentials" in said[0] and "HTTP 401" in said[0] and "wrong" not in said[0]
    assert "has no chassis '2U'" in said[1]


@pytest.mark.parametrize(
    ("token", "basic", "refuse_status", "attempt"),
    [
        ("t", None, 401, ["POST"]),  # a session refused: not tried with basic auth too
        (None, "Basic " + base64.b64encode(b"root:bmc-pass").decode(), 204, ["POST", "basic"]),  # no sessions
    ],
)
async def test_refused_credentials_rest_until_the_password_changes_or_five_minutes_pass(
    tmp_path: pathlib.Path, token: str | None, basic: str | None, refuse_status: int, attempt: list[str]
) -> None:
    """A BMC locks an account after a few failed logins: a poll a second offered the refused pair twice a
    second (a session, then basic auth) until someone noticed."""
    (tmp_path / "pw").write_text("wrong\n")
    seen: list[str] = []
    clock = [0.0]
    async for url in served(_redfish(_bmc(True), token, basic, refuse_status=refuse_status, seen=seen)):
        spec = MeterSpec("redfish", url, username="root", password_file=tmp_path / "pw")
        sink = Sink()
        meter = RedfishMeter(spec, monotonic=lambda: clock[0])
        poller = MeterPoller("n", spec, meter, sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            for _ in range(5):  # five polls, a second apart: one login offered
                await poller.poll_once(session)
                clock[0] += 1.0
            assert seen == attempt and sink.readings == []
            said = [e[2] for e in sink.errors]
            assert said[0].startswith("redfish refused the credentials of user 'root' (HTTP ")
            again = "; not offered again for 300 s after that, or until the password file changes"
            assert said[1] == said[0] + again
            assert len(set(said[1:])) == 1  # the same words each poll: logged once
            clock[0] += 300.0  # five minutes on: offered again, once
            await poller.poll_once(session)
            assert seen == attempt * 2 and len(sink.errors) == 6
            (tmp_path / "pw").write_text("bmc-pass\n")  # mended: taken at the next poll
            await poller.poll_once(session)
    assert [r.power_w for r in sink.readings] == [374.0]


async def test_a_redfish_meter_without_credentials_says_to_give_them() -> None:
    async for url in served(_redfish(_bmc(True), "t", None)):
        spec = MeterSpec("redfish", url)
        sink = Sink()
        async with aiohttp.ClientSession() as session:
            await MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticking()).poll_once(session)
    (error,) = [e[2] for e in sink.errors]
    assert error == (
        "redfish asks for credentials (HTTP 401 for /redfish/v1/Chassis): give the meter username and"
        " password_file"
    )


class _Says:
    """A meter reader that answers these watts, one per poll."""

    def __init__(self, *watts: float) -> None:
        self._watts = list(watts)

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        return Reading(power_w=self._watts.pop(0))

    def waiting_for(self) -> str | None:
        return None

    async def close(self, session: aiohttp.ClientSession) -> None:
        pass


async def test_a_reading_no_node_draws_is_not_stored_but_said() -> None:
    """25 kW between two 3 kW readings averaged to 14 kW per interval, under the export's 20 kW check."""
    spec = MeterSpec("prometheus", "http://pdu", query="w")
    sink = Sink()
    poller = MeterPoller("n", spec, _Says(3000.0, 25000.0, -5.0, 3000.0), sink, now_ns=_ticking())
    async with aiohttp.ClientSession() as session:
        for _ in range(4):
            await poller.poll_once(session)
    assert [r.power_w for r in sink.readings] == [3000.0, 3000.0]
    assert [e[2] for e in sink.errors] == [
        "prometheus read 25000 W, outside [0, 20000] W for one node: not stored",
        "prometheus read -5 W, outside [0, 20000] W for one node: not stored",
    ]
    assert poller.state.failures == 2


@pytest.mark.parametrize(
    ("token", "basic", "refuse_status", "attempt", "first"),
    [
        ("t", None, 401, ["POST"], "no answer within the timeout: the redfish login goes on (the next poll"),
        (  # basic auth, refused at the search's first resource that wants it (the service root does not)
            None,
            "Basic x",
            204,
            ["POST", "basic"],
            "no answer within the timeout: the search for redfish's power reading goes on",
        ),
    ],
)
async def test_a_refusal_slower_than_the_polls_timeout_still_rests_the_credentials(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    token: str | None,
    basic: str | None,
    refuse_status: int,
    attempt: list[str],
    first: str,
) -> None:
    """A BMC that answers a failed login after the poll's timeout: the refusal was never counted, and each
    poll offered the pair again (3 failed logins in 3 polls against a BMC answering in 2.5 s)."""
    monkeypatch.setattr(meter_poller, "MIN_TIMEOUT_S", 0.1)
    monkeypatch.setattr(meter_poller, "TIMEOUT_INTERVALS", 0.1)
    (tmp_path / "pw").write_text("wrong\n")
    seen: list[str] = []
    app = _redfish(_bmc(True), token, basic, refuse_status=refuse_status, seen=seen, refuse_after_s=0.3)
    async for url in served(app):
        spec = MeterSpec("redfish", url, username="root", password_file=tmp_path / "pw")
        sink = Sink()
        poller = MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
            await asyncio.sleep(0.5)  # the refusal arrives after the poll gave up
            for _ in range(3):
                await poller.poll_once(session)
    assert seen == attempt and sink.readings == []
    said = [e[2] for e in sink.errors]
    assert said[0].startswith(first) and len(said) == 4, said
    assert all("not offered again for 300 s" in e for e in said[1:]), said


async def test_a_401_before_any_credential_is_sent_is_not_a_refusal(tmp_path: pathlib.Path) -> None:
    """A BMC whose service root wants credentials: no login was offered, so none is refused or rested."""
    (tmp_path / "pw").write_text("bmc-pass\n")

    async def closed(request: web.Request) -> web.Response:
        return web.json_response({"error": {"code": "Base.1.8.NoValidSession"}}, status=401)

    app = web.Application()
    app.router.add_get("/{tail:.*}", closed)
    async for url in served(app):
        spec = MeterSpec("redfish", url, username="root", password_file=tmp_path / "pw")
        sink = Sink()
        poller = MeterPoller("n", spec, RedfishMeter(spec), sink, now_ns=_ticking())
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                await poller.poll_once(session)
    assert [e[2] for e in sink.errors] == [
        "redfish answered HTTP 401 for /redfish/v1/ before any credentials were sent"
    ] * 2


async def test_a_poller_that_dies_is_said_not_lost_in_silence(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A meter poller that raised (a reading the store could not take: refresh_s = 1e300 made its
    uncertainty past 64 bits) ended its task with nothing logged; the node's wall domain just went away."""

    async def dies(self: MeterPoller, session: object) -> None:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(MeterPoller, "run", dies)
    node = NodeSpec("n1", url="ws://127.0.0.1:9", meter=MeterSpec("shelly", "http://127.0.0.1:9"))
    store = Store(tmp_path / "c.db")
    coordinator = Coordinator([node], store)
    with caplog.at_level(logging.ERROR):
        await coordinator.start()
        for _ in range(100):
            if any("meter-n1 stopped" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.01)
        await coordinator.stop()
    store.close()
    said = [r.getMessage() for r in caplog.records if "meter-n1 stopped" in r.getMessage()]
    assert said == ["meter-n1 stopped: OverflowError: cannot convert float infinity to integer"]
