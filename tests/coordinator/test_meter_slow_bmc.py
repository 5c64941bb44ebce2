"""A Redfish BMC as real ones are: slow to answer (0.5–1.5 s a request is common), and with two resources
that may be two sensors. A loopback BMC that takes longer for the four requests to its power reading than
a poll's timeout still gives readings (the search outlives the poll, the next poll waits for it, and the
failed polls meanwhile say so), and a reading taken from ``Power`` because EnvironmentMetrics had none is
logged, as is the return to EnvironmentMetrics, which is tried again after ``PREFERRED_RETRY_S``."""

from __future__ import annotations

import asyncio
import base64
import logging
import pathlib
from collections import Counter
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from helpers.loopback import served
from helpers.meter_sink import Sink
from sparkwatch.meters import poller as meter_poller
from sparkwatch.meters import redfish
from sparkwatch.meters.poller import MeterPoller
from sparkwatch.meters.redfish import RedfishMeter
from sparkwatch.meters.spec import MeterSpec

T0 = 1_800_000_000_000_000_000
CHASSIS = "/redfish/v1/Chassis/1U"


def resources(environment_w: Any) -> dict[str, Any]:
    return {
        "/redfish/v1/": {"Chassis": {"@odata.id": "/redfish/v1/Chassis"}},
        "/redfish/v1/Chassis": {"Members": [{"@odata.id": CHASSIS}]},
        CHASSIS: {
            "EnvironmentMetrics": {"@odata.id": f"{CHASSIS}/EnvironmentMetrics"},
            "Power": {"@odata.id": f"{CHASSIS}/Power"},
        },
        f"{CHASSIS}/EnvironmentMetrics": {"PowerWatts": {"Reading": environment_w}},
        f"{CHASSIS}/Power": {"PowerControl": [{"PowerConsumedWatts": 344}]},
    }


def bmc(answers: dict[str, Any], asked: Counter[str], delay_s: float = 0.0) -> web.Application:
    async def get(request: web.Request) -> web.Response:
        asked[request.path] += 1
        await asyncio.sleep(delay_s)
        if request.path not in answers:
            return web.json_response({}, status=404)
        return web.json_response(answers[request.path])

    app = web.Application()
    app.router.add_get("/{tail:.*}", get)
    return app


def ticks() -> Any:
    now = iter(range(T0, T0 + 10**15, 10**6))
    return lambda: next(now)


async def two_readings(spec: MeterSpec) -> Sink:
    """What a poller of ``spec`` stored, polling on its schedule until it has two readings (5 s at most)."""
    sink = Sink()
    poller = MeterPoller("spark-1", spec, RedfishMeter(spec), sink, now_ns=ticks())
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(poller.run(session))
        try:
            async with asyncio.timeout(5):
                while len(sink.readings) < 2:
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return sink


async def test_a_bmc_slower_than_a_polls_timeout_to_show_its_reading_still_gives_readings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.2 s a request, a 0.3 s timeout: each of the four requests of the search fits, all four do not
    (at the default 1 s poll: 0.6 s a request against 2 s). The search was begun again by every poll."""
    monkeypatch.setattr(meter_poller, "MIN_TIMEOUT_S", 0.3)
    asked: Counter[str] = Counter()
    async for url in served(bmc(resources(374), asked, delay_s=0.2)):
        sink = await two_readings(MeterSpec("redfish", url, interval_s=0.1))
    assert [r.power_w for r in sink.readings[:2]] == [374.0, 374.0]
    assert asked["/redfish/v1/"] == 1  # one search, over as many polls as it took
    said = Counter(error for _, _, error in sink.errors)  # the poll that waited on the search, then read
    searching = (  # past its timeout, may be cut short on the read: that poll says so in the plain words
        "no answer within the timeout: the search for redfish's power reading goes on"
        " (the next poll waits for it)"
    )
    assert said[searching] >= 1 and set(said) <= {searching, "no answer within the timeout"}, said


async def settled(asked: Counter[str], path: str, times: int) -> None:
    """Until the BMC was asked for ``path`` ``times`` times (a search behind the polls has gone that far),
    and a moment for the search to take its answer."""
    async with asyncio.timeout(5):
        while asked[path] < times:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def test_power_standing_in_for_environment_metrics_is_logged_and_the_preferred_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The retry runs behind the polls, which read the stand-in meanwhile; a retry that fails is made again
    only after as long (each poll had searched again, and failed, where Power answered)."""
    answers, asked = resources(None), Counter[str]()  # a null reading: EnvironmentMetrics has none now
    clock = [100.0]
    environment = f"{CHASSIS}/EnvironmentMetrics"
    async for url in served(bmc(answers, asked)):
        spec = MeterSpec("redfish", url)
        sink = Sink()
        reader = RedfishMeter(spec, monotonic=lambda: clock[0])
        poller = MeterPoller("spark-1", spec, reader, sink, now_ns=ticks())
        async with aiohttp.ClientSession() as session:
            with caplog.at_level(logging.WARNING, logger=redfish.__name__):
                await poller.poll_once(session)
                del answers[environment]  # 404 for the retry: a search that fails
                clock[0] += redfish.PREFERRED_RETRY_S - 1
                await poller.poll_once(session)  # still the stand-in: the search is not made every poll
                clock[0] += 1
                await poller.poll_once(session)  # the retry begins behind it
                await settled(asked, environment, 2)
                await poller.poll_once(session)
                await poller.poll_once(session)
                searches = asked["/redfish/v1/"]
                answers[environment] = {"PowerWatts": {"Reading": 374}}
                clock[0] += redfish.PREFERRED_RETRY_S
                await poller.poll_once(session)
                await settled(asked, environment, 3)
                await poller.poll_once(session)
            await reader.close(session)
    assert [r.power_w for r in sink.readings] == [344.0] * 6 + [374.0] and sink.errors == []
    assert searches == 2 and asked["/redfish/v1/"] == 3  # the failed retry was not made again at once
    said = [r.getMessage() for r in caplog.records if r.name == redfish.__name__]
    assert said == [
        f"redfish meter at {url}: EnvironmentMetrics has no usable PowerWatts.Reading; reading Power"
        " PowerControl[0].PowerConsumedWatts instead (maybe another sensor), and EnvironmentMetrics again"
        f" in {redfish.PREFERRED_RETRY_S:g} s",
        f"redfish meter at {url}: reading EnvironmentMetrics PowerWatts.Reading again",
    ]


async def test_a_reading_gone_null_after_the_search_falls_back_to_power() -> None:
    """EnvironmentMetrics' reading turned null after the search chose it: the parse failed outside the read's
    guard, the path was kept, and every poll failed for good; now the next poll searches again."""
    answers, asked = resources(374), Counter[str]()
    async for url in served(bmc(answers, asked)):
        spec = MeterSpec("redfish", url)
        sink = Sink()
        poller = MeterPoller("spark-1", spec, RedfishMeter(spec), sink, now_ns=ticks())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
            answers[f"{CHASSIS}/EnvironmentMetrics"] = {"PowerWatts": {"Reading": None}}
            for _ in range(3):
                await poller.poll_once(session)
    assert [r.power_w for r in sink.readings] == [374.0, 344.0, 344.0]
    assert [e for _, _, e in sink.errors] == ["redfish EnvironmentMetrics has no PowerWatts.Reading"]


async def test_the_stop_cancels_a_search_still_going() -> None:
    """close() waited for a login but left the search running past the stop (and its logout), for up to
    30 s, with the session closed under it."""
    asked: Counter[str] = Counter()
    async for url in served(bmc(resources(374), asked, delay_s=2.0)):
        spec = MeterSpec("redfish", url)
        reader = RedfishMeter(spec)
        async with aiohttp.ClientSession() as session:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await reader.read(session)
            assert reader.waiting_for() is not None  # the search outlived the poll
            await reader.close(session)
            assert reader.waiting_for() is None
    assert asked["/redfish/v1/Chassis"] == 0  # it went no further than its first request


async def test_a_slow_bmc_with_basic_auth_is_not_locked_out_by_its_own_search(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll cut short while the search went on took the credentials as refused (a BMC may slow a failed
    login's answer), though the search then found the way with them: no reading for 300 s (a review)."""
    monkeypatch.setattr(meter_poller, "MIN_TIMEOUT_S", 0.3)
    (tmp_path / "pw").write_text("bmc-pass\n")
    basic = "Basic " + base64.b64encode(b"root:bmc-pass").decode()
    answers, asked = resources(374), Counter[str]()

    async def get(request: web.Request) -> web.Response:
        asked[request.path] += 1
        await asyncio.sleep(0.2)
        if request.path != "/redfish/v1/" and request.headers.get("Authorization") != basic:
            return web.json_response({}, status=401)
        return web.json_response(answers[request.path])

    async def login(request: web.Request) -> web.Response:
        return web.Response(status=204)  # no session given out (as sushy-static): basic auth

    app = web.Application()
    app.router.add_post("/redfish/v1/SessionService/Sessions", login)
    app.router.add_get("/{tail:.*}", get)
    async for url in served(app):
        spec = MeterSpec("redfish", url, interval_s=0.1, username="root", password_file=tmp_path / "pw")
        sink = await two_readings(spec)
    assert [r.power_w for r in sink.readings[:2]] == [374.0, 374.0]
    assert not any("taken as refused" in e for _, _, e in sink.errors), sink.errors


async def test_a_stand_in_that_fails_says_why_it_was_read() -> None:
    """EnvironmentMetrics' reading a string ("120"), its Power linked but not there: each poll's error was
    only "HTTP 404 for …/Power", a resource nobody meant to read, and the real cause was nowhere."""
    answers, asked = resources("120"), Counter[str]()
    del answers[f"{CHASSIS}/Power"]
    async for url in served(bmc(answers, asked)):
        spec = MeterSpec("redfish", url)
        sink = Sink()
        poller = MeterPoller("spark-1", spec, RedfishMeter(spec), sink, now_ns=ticks())
        async with aiohttp.ClientSession() as session:
            await poller.poll_once(session)
    assert [e for _, _, e in sink.errors] == [
        f"redfish answered HTTP 404 for {CHASSIS}/Power (read for EnvironmentMetrics, which has no usable"
        " PowerWatts.Reading)"
    ]
