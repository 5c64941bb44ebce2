"""A meter that answers a value sparkwatch cannot hold (JSON ``1e999`` parses to inf, ``true`` to an int, a
firmware may quote a number, a counter in Wh can be past what a float of joules holds) gives a failed poll
with its reason, as one that answers garbage does: no row of it is stored, the next good reading is, and
the run exports. Before, an energy counter of 1e305 Wh (inf J) was stored and every export of the run then
failed as "damaged"; a 400-digit integer was a traceback; a counter of ``true`` was dropped with its power
kept. Each meter is served by the real parts the other meter tests use: the Shelly double over HTTP, the
Redfish mockup under sushy-static, a Prometheus query API."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from doubles.shelly import ShellyPlug, json_with_raw
from helpers.frames import T0, sample_frame
from helpers.loopback import served, wait_http
from helpers.processes import free_port
from sparkwatch.core.clock import ClockOffset
from sparkwatch.meters.factory import make_reader
from sparkwatch.meters.poller import MeterPoller
from sparkwatch.meters.spec import MeterSpec
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow

S = 1_000_000_000
SUSHY = shutil.which("sushy-static")
MOCKUP = pathlib.Path(__file__).parents[2] / "deploy" / "redfish-mockup"
HUGE = "1" + "0" * 400  # an integer JSON allows and no float holds


def _ids(value: object) -> str | None:
    """Test ids: the 400 digits by name, the reasons left out (the text says the case)."""
    return "huge-int" if value == HUGE else "" if isinstance(value, str) and " " in value else None


def _store(tmp_path: pathlib.Path) -> Store:
    """Node n1 busy at 10 Hz for 4 s, its clock offset known: what a run's export needs of the agent."""
    store = Store(tmp_path / "c.db")
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(k, {"power_w": 50.0, "util_ratio": 0.9}) for k in range(1, 41)])
    store.add_offset("n1", "b1", ClockOffset(0, 10**6, 5, 8, mono_offset_ns=T0), t_ns=T0)
    return store


def _clock() -> Callable[[], int]:
    """The coordinator's clock, a quarter second on at each look: polls from 1.25 s after T0."""
    now = [T0 + S]

    def tick() -> int:
        now[0] += S // 4
        return now[0]

    return tick


async def _good_bad_good(
    spec: MeterSpec, store: Store, bad: Callable[[], None], good: Callable[[], None]
) -> MeterPoller:
    """Three polls of the meter by the reader the coordinator makes for it, stored in ``store``: a good
    answer, the bad one ``bad`` sets up, and the good one ``good`` sets up."""
    poller = MeterPoller("n1", spec, make_reader(spec), store, now_ns=_clock())
    async with aiohttp.ClientSession() as session:
        await poller.poll_once(session)
        bad()
        await poller.poll_once(session)
        good()
        await poller.poll_once(session)
    return poller


def _assert_refused_then_read(
    store: Store, poller: MeterPoller, reason: str, watts: list[float], source: str
) -> None:
    """Only the good readings are stored, finite; the bad poll is one failure with ``reason``; the run exports
    with that reason in its wall domain."""
    rows = store.meter_rows("n1", T0, T0 + 60 * S)  # raised Damaged on an inf stored
    assert list(rows.power_w) == watts
    assert np.all(np.isfinite(rows.energy_j) | np.isnan(rows.energy_j))  # NaN: no counter (NULL)
    assert [r.error for r in store.meter_reasons("n1", "wall", T0, T0 + 60 * S)[0]] == [reason]
    assert (poller.state.polls, poller.state.failures, poller.state.error) == (3, 1, None)
    store.create_run(RunRow("r", "meters", T0 + S, None, 0.1, 0.0, "run"))
    store.end_run("r", T0 + 3 * S)
    export = export_run(store, "r", ["n1"], lambda: T0 + 60 * S)
    (wall,) = [d for d in export["nodes"][0]["system"]["domains"] if d["domain"] == "wall"]
    assert wall["source"] == source and [e["error"] for e in wall["errors"]] == [reason]


NOT_FINITE = "not a finite number"


@pytest.mark.parametrize(
    ("field", "text", "reason"),
    [
        ("apower", "1e999", f"shelly apower is inf, {NOT_FINITE}"),
        ("apower", "-1e999", f"shelly apower is -inf, {NOT_FINITE}"),
        ("apower", "NaN", f"shelly apower is nan, {NOT_FINITE}"),
        ("apower", "true", "shelly apower is true, not a number"),
        ("apower", '"82.4"', 'shelly apower is "82.4", not a number'),
        ("apower", HUGE, f"shelly apower is an integer past a float's range, {NOT_FINITE}"),
    ],
    ids=_ids,
)
async def test_a_shelly_value_sparkwatch_cannot_hold_is_a_failed_poll(
    tmp_path: pathlib.Path, field: str, text: str, reason: str
) -> None:
    plug = ShellyPlug(power_w=82.4)
    store = _store(tmp_path)
    async for url in served(plug.app()):
        spec = MeterSpec("shelly", url)

        def good() -> None:
            plug.raw.clear()
            plug.set_power(90.0)

        poller = await _good_bad_good(spec, store, lambda: plug.raw.update({field: text}), good)
    _assert_refused_then_read(store, poller, reason, [82.4, 90.0], "meter:shelly")
    store.close()


# ---- Redfish: the mockup deploy/ ships, served by sushy-static (it sends each file as it is) ----


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pathlib.Path]]:
    if SUSHY is None:
        pytest.fail("sushy-static missing: install the dev extra (sushy-tools), as .ci/run does")
    root = tmp_path_factory.mktemp("bmc") / "mockup"
    shutil.copytree(MOCKUP, root)
    port = free_port()
    process = subprocess.Popen(
        [SUSHY, "-i", "127.0.0.1", "-p", str(port), "-m", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/redfish/v1/")
        yield f"http://127.0.0.1:{port}", root
    finally:
        process.kill()
        process.wait()


def _write(path: pathlib.Path, body: dict[str, Any], raw: dict[str, str] | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / ".index.json").write_text(json_with_raw(body, raw or {}))
    os.replace(path / ".index.json", path / "index.json")  # sushy-static opens the file afresh each request


def _chassis(root: pathlib.Path, resource: str) -> pathlib.Path:
    """The mockup's chassis linking only ``resource`` (EnvironmentMetrics, or the older Power): its path."""
    chassis = root / "Chassis" / "1U"
    body = json.loads((MOCKUP / "Chassis" / "1U" / "index.json").read_text())
    for other in {"EnvironmentMetrics", "Power"} - {resource}:
        del body[other]
    _write(chassis, body)
    return chassis / resource


def _environment(path: pathlib.Path, watts: float, raw: dict[str, str] | None = None) -> None:
    body = json.loads((MOCKUP / "Chassis" / "1U" / "EnvironmentMetrics" / "index.json").read_text())
    body["PowerWatts"]["Reading"] = watts
    body["EnergykWh"] = {"Reading": 325.675}
    _write(path, body, raw)


def _power(path: pathlib.Path, watts: float, raw: dict[str, str] | None = None) -> None:
    control = {"MemberId": "0", "Name": "System Input Power", "PowerConsumedWatts": watts}
    body = {"@odata.id": "/redfish/v1/Chassis/1U/Power", "PowerControl": [control]}
    _write(path, body, {f"PowerControl.0.{k}": v for k, v in (raw or {}).items()})


@pytest.mark.parametrize(
    ("resource", "field", "text", "reason"),
    [
        ("EnvironmentMetrics", "PowerWatts.Reading", "1e999", f"PowerWatts.Reading is inf, {NOT_FINITE}"),
        ("EnvironmentMetrics", "PowerWatts.Reading", "true", "PowerWatts.Reading is true, not a number"),
        ("EnvironmentMetrics", "PowerWatts.Reading", '"374"', 'PowerWatts.Reading is "374", not a number'),
        (
            "EnvironmentMetrics",
            "PowerWatts.Reading",
            HUGE,
            f"PowerWatts.Reading is an integer past a float's range, {NOT_FINITE}",
        ),
        ("EnvironmentMetrics", "PowerWatts", "374", "has no PowerWatts.Reading"),  # was a traceback
        ("Power", "PowerConsumedWatts", "1e999", f"PowerConsumedWatts is inf, {NOT_FINITE}"),
        ("Power", "PowerConsumedWatts", "NaN", f"PowerConsumedWatts is nan, {NOT_FINITE}"),
        ("Power", "PowerConsumedWatts", "false", "PowerConsumedWatts is false, not a number"),
        (
            "Power",
            "PowerConsumedWatts",
            HUGE,
            f"PowerConsumedWatts is an integer past a float's range, {NOT_FINITE}",
        ),
    ],
    ids=_ids,
)
async def test_a_redfish_value_sparkwatch_cannot_hold_is_a_failed_poll(
    tmp_path: pathlib.Path, bmc: tuple[str, pathlib.Path], resource: str, field: str, text: str, reason: str
) -> None:
    url, root = bmc
    path = _chassis(root, resource)
    serve = _environment if resource == "EnvironmentMetrics" else _power
    serve(path, 374.0)
    store = _store(tmp_path)
    poller = await _good_bad_good(
        MeterSpec("redfish", url),
        store,
        lambda: serve(path, 374.0, {field: text}),
        lambda: serve(path, 400.0),
    )
    where = "EnvironmentMetrics " if resource == "EnvironmentMetrics" else "Power PowerControl[0]."
    _assert_refused_then_read(store, poller, f"redfish {where}{reason}", [374.0, 400.0], "meter:redfish")
    store.close()


# ---- Prometheus: a query API answering the value as this test writes it ----


@pytest.mark.parametrize("text", ["true", HUGE], ids=_ids)
async def test_a_prometheus_value_sparkwatch_cannot_hold_is_a_failed_poll(
    tmp_path: pathlib.Path, text: str
) -> None:
    """The API writes a value as a string: a bare ``true`` was read as 1 W, a 400-digit integer was a
    traceback."""
    value = ['"301.5"']
    reason = f"prometheus value is not a number: {[1800000001.0, json.loads(text)]!r:.80}"

    async def query(request: web.Request) -> web.Response:
        sample = f"[1800000001.0, {value[0]}]"
        body = f'{{"status": "success", "data": {{"resultType": "scalar", "result": {sample}}}}}'
        return web.Response(text=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    store = _store(tmp_path)
    async for url in served(app):
        spec = MeterSpec("prometheus", url, query="pdu_outlet_watts")

        def good() -> None:
            value[0] = '"320"'

        poller = await _good_bad_good(spec, store, lambda: value.__setitem__(0, text), good)
    _assert_refused_then_read(store, poller, reason, [301.5, 320.0], "meter:prometheus")
    store.close()


# ---- a counter that is not one: left out, the power kept (the export integrates the power) ----


def _assert_counter_left_out(
    store: Store, poller: MeterPoller, reason: str, watts: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """Every poll's power is stored, the bad poll's without a counter; no poll failed; one warning says
    why the counter was left out."""
    rows = store.meter_rows("n1", T0, T0 + 60 * S)
    assert list(rows.power_w) == watts
    assert np.isnan(rows.energy_j[1]) and np.isfinite(rows.energy_j[[0, 2]]).all()
    assert store.meter_reasons("n1", "wall", T0, T0 + 60 * S) == ([], None)
    assert (poller.state.polls, poller.state.failures, poller.state.error) == (3, 0, None)
    said = [r.getMessage() for r in caplog.records if "energy counter left out" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(f"energy counter left out, power stored: {reason}"), said


@pytest.mark.parametrize(
    ("field", "text", "reason"),
    [
        ("aenergy", "5", "shelly aenergy is not an object"),
        ("aenergy.total", "1e999", f"shelly aenergy.total is inf, {NOT_FINITE}"),
        (
            "aenergy.total",
            "1e305",
            "shelly aenergy.total is 1e+305 Wh, more than a meter counts (9.0072e+15 J)",
        ),
        (
            "aenergy.total",
            "3e12",
            "shelly aenergy.total is 3e+12 Wh, more than a meter counts (9.0072e+15 J)",
        ),
        ("aenergy.total", "false", "shelly aenergy.total is false, not a number"),
        ("aenergy.total", '"7258.589"', 'shelly aenergy.total is "7258.589", not a number'),
        (
            "aenergy.total",
            "-3.5",
            "shelly aenergy.total is negative (-3.5 Wh): not a node's draw; check what it meters",
        ),
    ],
    ids=_ids,
)
async def test_a_shelly_counter_sparkwatch_cannot_hold_is_left_out_and_its_power_kept(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, field: str, text: str, reason: str
) -> None:
    """Such a counter failed the whole poll, its good power lost with it (before that, some were stored
    and made the run's export refuse the row, others dropped unsaid)."""
    plug = ShellyPlug(power_w=82.4)
    store = _store(tmp_path)
    async for url in served(plug.app()):

        def good() -> None:
            plug.raw.clear()
            plug.set_power(90.0)

        with caplog.at_level(logging.WARNING, logger="sparkwatch.meters.poller"):
            poller = await _good_bad_good(
                MeterSpec("shelly", url), store, lambda: plug.raw.update({field: text}), good
            )
    _assert_counter_left_out(store, poller, reason, [82.4, 82.4, 90.0], caplog)
    store.close()


@pytest.mark.parametrize(
    ("resource", "field", "text", "reason"),
    [
        ("EnvironmentMetrics", "EnergykWh.Reading", "1e999", f"EnergykWh.Reading is inf, {NOT_FINITE}"),
        (
            "EnvironmentMetrics",
            "EnergykWh.Reading",
            "1e303",
            "EnergykWh.Reading is 1e+303 kWh, more than a meter counts (9.0072e+15 J)",
        ),
        (
            "EnvironmentMetrics",
            "EnergykWh.Reading",
            "-1",
            "EnergykWh.Reading is negative (-1 kWh): not a node's draw; check what it meters",
        ),
        (
            "EnvironmentMetrics",
            "EnergykWh.Reading",
            '"325.675"',
            'EnergykWh.Reading is "325.675", not a number',
        ),
    ],
    ids=_ids,
)
async def test_a_redfish_counter_sparkwatch_cannot_hold_is_left_out_and_its_power_kept(
    tmp_path: pathlib.Path,
    bmc: tuple[str, pathlib.Path],
    caplog: pytest.LogCaptureFixture,
    resource: str,
    field: str,
    text: str,
    reason: str,
) -> None:
    url, root = bmc
    path = _chassis(root, resource)
    _environment(path, 374.0)
    store = _store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="sparkwatch.meters.poller"):
        poller = await _good_bad_good(
            MeterSpec("redfish", url),
            store,
            lambda: _environment(path, 380.0, {field: text}),
            lambda: _environment(path, 400.0),
        )
    _assert_counter_left_out(store, poller, f"redfish {resource} {reason}", [374.0, 380.0, 400.0], caplog)
    store.close()
