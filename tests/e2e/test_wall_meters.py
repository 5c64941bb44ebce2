"""Wall meters end to end: a real coordinator polls a Redfish BMC (sushy-static serving the mockup tree
deploy/redfish-mockup ships, shaped like DMTF's public-rackmount1, copied and changed by the test) for one
node and a Shelly plug (digest auth) for another; each becomes its node's ``wall`` domain and headline.
Killing a meter mid-run leaves a gap with its reason, never a carried-over value."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from doubles.shelly import ShellyPlug
from helpers.app_thread import AppThread
from helpers.cli import sparkwatch as cli
from helpers.loopback import wait_http
from helpers.meter_sink import Sink
from helpers.processes import AgentProcess, Coordinator, free_port, sim_load, wait_connected, wait_stored
from helpers.prometheus import PROMETHEUS, Prometheus
from sparkwatch.meters.poller import MeterPoller
from sparkwatch.meters.prometheus import PrometheusMeter
from sparkwatch.meters.spec import MeterSpec

SUSHY = shutil.which("sushy-static")
POLL_S = 0.5


def _write(path: pathlib.Path, body: dict[str, object]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / ".index.json"
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path / "index.json")  # sushy-static opens the file afresh on every request


#: The Redfish mockup shipped for trying a wall meter without a BMC (docs/power-domains.md, *Try it*): the
#: resources a BMC serves for chassis power, DMTF public-rackmount1 trimmed. Copied, then changed here.
MOCKUP = pathlib.Path(__file__).parents[2] / "deploy" / "redfish-mockup"


def write_mockup(root: pathlib.Path, watts: float) -> None:
    shutil.copytree(MOCKUP, root)
    set_bmc_watts(root, watts)


def set_bmc_watts(root: pathlib.Path, watts: float) -> None:
    metrics = root / "Chassis" / "1U" / "EnvironmentMetrics"
    body = json.loads((metrics / "index.json").read_text())
    body["PowerWatts"]["Reading"] = watts
    _write(metrics, body)


@dataclass
class Rig:
    coord: Coordinator
    agents: list[AgentProcess]
    mockup: pathlib.Path
    bmc: subprocess.Popen[bytes]
    plug: ShellyPlug
    shelly: AppThread


@pytest.fixture
def rig(tmp_path: pathlib.Path) -> Iterator[Rig]:
    if SUSHY is None:
        pytest.fail("sushy-static missing: install the dev extra (sushy-tools), as .ci/run does")
    mockup = tmp_path / "mockup"
    write_mockup(mockup, 374.0)
    bmc_port, shelly_port = free_port(), free_port()
    bmc = subprocess.Popen(
        [SUSHY, "-i", "127.0.0.1", "-p", str(bmc_port), "-m", str(mockup)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    plug = ShellyPlug(power_w=61.0, password="plug-secret-1")
    (tmp_path / "plug.pw").write_text("plug-secret-1\n")
    shelly = AppThread(plug.app(), shelly_port)
    shelly.start()
    env = dict(os.environ)
    agents: list[AgentProcess] = []
    coord = None
    try:
        wait_http(f"http://127.0.0.1:{bmc_port}/redfish/v1/")
        assert shelly.ready.wait(10)
        for name in ("spark-1", "spark-2"):
            args = ["--backend", "sim", "--no-sim-sensors", "--node", name, "--interval", "0.1"]
            agents.append(AgentProcess(args, env, free_port()))
        for agent in agents:
            agent.wait_ready()
        nodes = (
            f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agents[0].port}"\n'
            f'[nodes.spark-1.meter]\nkind = "redfish"\nurl = "http://127.0.0.1:{bmc_port}"\n'
            f"interval_s = {POLL_S}\n"
            f'[nodes.spark-2]\nurl = "ws://127.0.0.1:{agents[1].port}"\n'
            f'[nodes.spark-2.meter]\nkind = "shelly"\nurl = "http://127.0.0.1:{shelly_port}"\n'
            f'interval_s = {POLL_S}\npassword_file = "{tmp_path / "plug.pw"}"\n'
        )
        (tmp_path / "coordinator").mkdir()
        coord = Coordinator(tmp_path / "coordinator", nodes)
        coord.start()
        wait_connected(coord, 2)
        yield Rig(coord, agents, mockup, bmc, plug, shelly)
    finally:
        if coord is not None:
            coord.stop()
        for agent in agents:
            agent.stop()
        bmc.kill()
        bmc.wait()
        shelly.stop()


def _meter_lines(rig: Rig) -> list[str]:
    """The coordinator's /metrics lines of the meters' series (what Prometheus would scrape)."""
    with urllib.request.urlopen(f"{rig.coord.url}/metrics", timeout=5) as r:
        return sorted(line for line in r.read().decode().splitlines() if line.startswith("sparkwatch_meter_"))


def _meter_state(rig: Rig, node: str) -> dict[str, object]:
    _, body = rig.coord.call("GET", "/v1/nodes")
    return next(n["meter"] for n in body["nodes"] if n["node"] == node)


def test_redfish_and_shelly_meters_feed_the_wall_domain_and_a_dead_meter_leaves_a_reasoned_gap(
    rig: Rig,
) -> None:
    status, run = rig.coord.call("POST", "/v1/runs", {"name": "meters", "interval_s": 0.1})
    assert status == 201
    for agent in rig.agents:
        sim_load(agent, 0.8)
    set_bmc_watts(rig.mockup, 512.0)
    rig.plug.set_power(88.0)
    time.sleep(1.5)  # both meters have answered at the new level
    a = time.time_ns()
    time.sleep(3.0)
    b = time.time_ns()
    time.sleep(2 * POLL_S)  # a reading after the window's end, so that its last interval is covered
    state = _meter_state(rig, "spark-1")
    assert state["kind"] == "redfish" and state["last_power_w"] == 512.0 and state["error"] is None
    lines = _meter_lines(rig)
    shelly_energy = 'sparkwatch_meter_energy_joules_total{domain="wall",node="spark-2",source="meter:shelly"}'
    energy_j = [float(line.split()[1]) for line in lines if line.startswith(shelly_energy)]
    # the plug's own counter (Wh, as its aenergy.total shows it) in J, for increase(); the BMC's has none
    assert len(energy_j) == 1 and 7258.589 * 3600 < energy_j[0] <= round(rig.plug.total_wh, 3) * 3600
    failed = "sparkwatch_meter_failed_polls_total"  # always shown; asked of below, once the meters are dead
    assert [line for line in lines if not line.startswith((shelly_energy, failed))] == [  # latest readings
        'sparkwatch_meter_poll_interval_seconds{domain="wall",node="spark-1",source="meter:redfish"} 0.5',
        'sparkwatch_meter_poll_interval_seconds{domain="wall",node="spark-2",source="meter:shelly"} 0.5',
        'sparkwatch_meter_power_watts{domain="wall",node="spark-1",source="meter:redfish"} 512.0',
        'sparkwatch_meter_power_watts{domain="wall",node="spark-2",source="meter:shelly"} 88.0',
    ]
    rig.bmc.kill()  # the BMC and the plug stop answering
    rig.bmc.wait()
    rig.shelly.stop()
    time.sleep(1.5)
    c = time.time_ns()
    time.sleep(3.0)
    d = time.time_ns()
    windows = [
        {"id": "alive", "phase": "timed", "t_start_ns": a, "t_end_ns": b, "completion_tokens": 10},
        {"id": "dead", "phase": "timed", "t_start_ns": c, "t_end_ns": d, "completion_tokens": 10},
    ]
    assert rig.coord.call("POST", f"/v1/runs/{run['id']}/windows", {"windows": windows})[0] == 201
    wait_stored(rig.coord, *rig.agents)
    assert rig.coord.call("POST", f"/v1/runs/{run['id']}/end")[0] == 200
    assert _meter_state(rig, "spark-2")["error"] is not None
    lines = _meter_lines(rig)
    assert [line for line in lines if not line.startswith(failed)] == []  # nothing carried over the silence
    counts = {line.split("node=")[1].split(",")[0]: float(line.split()[1]) for line in lines}
    assert set(counts) == {'"spark-1"', '"spark-2"'} and min(counts.values()) >= 3  # polls every 0.5 s
    status, export = rig.coord.call("GET", f"/v1/runs/{run['id']}/export")
    assert status == 200

    nodes = {n["node"]: n for n in export["nodes"]}
    for name, watts, source in (("spark-1", 512.0, "meter:redfish"), ("spark-2", 88.0, "meter:shelly")):
        system = nodes[name]["system"]
        assert system["headline_domain"] == "wall"
        (wall,) = system["domains"]
        assert (wall["domain"], wall["kind"], wall["source"]) == ("wall", "system", source)
        assert wall["energy_method"] == "trapezoid"
        assert wall["errors"] and "\n" not in wall["errors"][0]["error"]  # why the gap began
        assert wall["errors"][0]["t_ns"] >= b  # no failure while the meter was alive
        alive, dead = (
            next(x for x in w["nodes"] if x["node"] == name)["system"][0] for w in export["windows"]
        )
        assert alive["power_w_gated_mean"] == pytest.approx(watts, rel=0.001)
        assert alive["coverage_ratio"] == pytest.approx(1.0, abs=0.02), (name, alive, wall)
        assert alive["energy_j"] == pytest.approx(watts * (b - a) / 1e9, rel=0.01)
        # nothing is carried over the dead meter's silence: no figure, and the gap is there
        assert dead["energy_j"] is None and dead["power_w_gated_mean"] is None
        assert dead["coverage_ratio"] in (None, 0.0)
        assert wall["samples"]["max_gap_s"] >= round((d - c) / 1e9, 3) - 0.001  # the export rounds to ms
    # each node's headline energy is that of the covered half of the scope: no sum of them is the whole
    totals = export["totals"]
    assert totals["system_energy_j"] is None
    assert totals["null_reasons"]["system_energy_j"].startswith("the headline domains of spark-1 (0.")
    assert "spark-2 (0." in totals["null_reasons"]["system_energy_j"]
    verdicts = {w["id"]: (w["verdict"], w["reasons"]) for w in export["windows"]}
    # ok; or incomplete on the GPU rail alone, where the loaded machine stalled a 10 Hz agent (test_clocks)
    verdict, reasons = verdicts["alive"]
    rail_gaps = bool(reasons) and all(r.startswith("coverage ") for r in reasons)
    assert (verdict, reasons) == ("ok", []) or (verdict == "incomplete" and rail_gaps), verdicts["alive"]
    assert verdicts["dead"][0] == "low_confidence"
    assert [r.split(":")[0] for r in verdicts["dead"][1]] == ["spark-1 wall", "spark-2 wall"]


def test_a_prometheus_meter_reads_one_series_from_a_real_prometheus(tmp_path: pathlib.Path) -> None:
    """Prometheus scrapes a PDU exporter's page (the text format); the meter asks it for the outlet's watts
    the way the coordinator does, and a query that matches two series is refused, not summed."""
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail("prometheus missing: install the Debian package prometheus (.ci/run does)")
    page = (
        '# TYPE pdu_outlet_watts gauge\npdu_outlet_watts{outlet="3"} 301.5\npdu_outlet_watts{outlet="4"} 12\n'
    )

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    exporter = AppThread(app, free_port())
    exporter.start()
    assert exporter.ready.wait(10)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: pdu\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter.port}']\n"
    )
    prom = Prometheus(config, tmp_path / "data", tmp_path / "prometheus.log")
    try:
        prom.wait_ready()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(prom.query("pdu_outlet_watts")) < 2:
            time.sleep(0.3)

        async def poll(query: str) -> Sink:
            spec = MeterSpec("prometheus", prom.url, query=query)
            sink = Sink()
            async with aiohttp.ClientSession() as session:
                await MeterPoller("pdu-node", spec, PrometheusMeter(spec), sink).poll_once(session)
            return sink

        one = asyncio.run(poll('pdu_outlet_watts{outlet="3"}'))
        assert [r.power_w for r in one.readings] == [301.5] and one.errors == []
        two = asyncio.run(poll("pdu_outlet_watts"))
        assert two.readings == [] and "must return one series, it returned 2 (vector)" in two.errors[0][2]
        bad = asyncio.run(poll("pdu_outlet_watts{"))
        assert bad.readings == [] and "HTTP 400" in bad.errors[0][2]
    finally:
        prom.stop()
        exporter.stop()


def test_runs_end_waits_for_each_meters_reading_after_the_end(rig: Rig) -> None:
    """A run measured whole: the meters were read to its end only, and `runs end` did not wait for their
    next poll, so the stretch from each meter's last poll before the end to the end was never covered (up to
    a poll interval of every run). Now each meter's first reading after the end closes it, `runs end`
    waits for that reading, and an export made right after is the one made later."""
    env = {"SPARKWATCH_COORDINATOR": rig.coord.url, "SPARKWATCH_TOKEN_FILE": str(rig.coord.token)}
    opened = cli("runs", "open", "--name", "whole", "--scope", "run", env=env)
    assert opened.returncode == 0, opened.stderr
    run_id = opened.stdout.strip()
    time.sleep(2.2)
    ended = cli("runs", "end", run_id, env=env)
    assert ended.returncode == 0 and "meter" not in ended.stderr, ended.stderr
    first = cli("runs", "export", run_id, env=env)
    assert first.returncode == 0, first.stderr
    export = json.loads(first.stdout)
    for node in export["nodes"]:
        (wall,) = node["system"]["domains"]
        assert wall["samples"]["coverage_ratio"] == 1.0, (node["node"], wall["samples"])
    time.sleep(3 * POLL_S)  # more polls stored after the end change nothing
    assert json.loads(cli("runs", "export", run_id, env=env).stdout) == export
