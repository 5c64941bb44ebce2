"""`sparkwatch export --prometheus` end to end: two simulated agents stream to a real coordinator and are
scraped every second by a real Prometheus and a real VictoriaMetrics, beside two loopback targets serving
recorded dcgm-exporter and nvidia_gpu_exporter text with one scripted GPU's values, and a serving engine's
recorded vLLM page with scripted counters (scraped by the coordinator too), and the coordinator itself,
whose ``/metrics`` shows the latest reading of spark-1's wall meter (a Shelly plug it polls every 0.2 s).
The coordinator also remote-writes to the Prometheus, which then holds every node series twice, as a site
that scrapes with the shipped config and turns remote write on does. One scripted run is exported from
the coordinator's SQLite and from both engines: the gated mean power per node agrees within the tolerance
docs/fleets.md states for 1 s scrapes, a window shorter than two scrapes is ``low_confidence`` from the
engines only, the engine blocks give the scripted token rates, and the scraped wall meter is spark-1's
system domain; the Prometheus that holds both is refused until ``--series-matchers`` picks the scrapes or
the remote write.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import pytest
from aiohttp import web

from doubles.shelly import ShellyPlug
from helpers.app_thread import AppThread
from helpers.cli import sparkwatch as cli
from helpers.engine_replay import VLLM, EngineReplay, capture, with_values
from helpers.processes import AgentProcess, Coordinator, free_port, sim_load, wait_connected, wait_stored
from helpers.prometheus import PROMETHEUS, Prometheus
from helpers.victoria import VICTORIA, Victoria
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.tracks import GAP_INTERVALS
from sparkwatch.defaults import OPEN_RUN_NOTE

#: Every test here on one xdist worker (the suite runs with --dist loadgroup): the module's rig of engines,
#: agents and coordinators is set up once, not once on each worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_export_prometheus")
FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
DCGM_TEXT = FIXTURES / "dcgm" / "dcgm-exporter-a100.prom"
NVIDIA_TEXT = FIXTURES / "nvidia_gpu_exporter" / "h200-load.metrics"
HOST = "ub20-a100-k8s"  # the recorded capture's Hostname label
MIB = 1024 * 1024
#: What a scripted target scraped at 1 s gives against its script (a recorded target has no snapshot lag).
TOLERANCE = 0.01
#: docs/fleets.md: a node's gated mean over a run, and a steady-load window's energy, within this much of the
#: agent's snapshot lag at either end (a scrape shows the agent's latest sample, up to one 0.1 s interval
#: old, and one late tick on a loaded machine) over the gated time or the window: the energy counter
#: telescopes between those two ends.
SNAPSHOT_LAG_S = 0.2
#: The clock event reason the scripted GPU reports in its light phase (NVML's bit; a slowdown).
SW_THERMAL = 0x20
#: The scripted vLLM engine's token counters grow this fast (per s).
GENERATED_PER_S, PROMPT_PER_S = 1000.0, 400.0
#: spark-1's wall meter: its power idle, busy and light (W), and the coordinator's poll interval (s).
WALL_IDLE_W, WALL_BUSY_W, WALL_LIGHT_W, METER_S = 80.0, 150.0, 100.0, 0.2
#: The recorded GPU's energy counter at the first step (mJ, the capture's value).
ENERGY_BASE_MJ = 319159391
#: A second dcgm-exporter, as it runs by default: it collects every HELD_COLLECT_S (its ``-c``; 30 s unless
#: set) and serves those values to every scrape in between; its GPU draws HELD_SCALE × the script.
HELD_HOST, HELD_COLLECT_S, HELD_SCALE = "held-a100", 4.0, 3.0
#: How far an engine's stamp of a scrape may sit from when the target answered it (a scrape started late).
STAMP_JITTER_S = 0.2


def vllm_page(elapsed_s: float) -> str:
    """The recorded vLLM page with counters that grow steadily from when the engine started."""
    values = {
        "vllm:generation_tokens_total": GENERATED_PER_S * elapsed_s,
        "vllm:prompt_tokens_total": PROMPT_PER_S * elapsed_s,
        "vllm:num_requests_running": 4.0,
    }
    return with_values(capture(VLLM), values)


@dataclass
class GpuScript:
    """The recorded targets' GPU: (from time, W, util %, FB MiB, clock event reasons) steps; its energy
    counter integrates them."""

    steps: list[tuple[float, float, float, float, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, watts: float, util: float, fb_mib: float, reasons: int = 0) -> None:
        with self.lock:
            self.steps.append((time.time(), watts, util, fb_mib, reasons))

    def now(self) -> tuple[float, float, float, float, int]:
        """Power, util, FB used, the energy counter (mJ since the first step) and the reasons now."""
        with self.lock:
            steps, t = list(self.steps), time.time()
        energy_j = sum(
            step[1] * (min(t, nxt[0]) - step[0]) for step, nxt in zip(steps, [*steps[1:], (t,)], strict=True)
        )
        _, watts, util, fb, reasons = steps[-1]
        return watts, util, fb, ENERGY_BASE_MJ + energy_j * 1000, reasons


def dcgm_values(script: GpuScript, scale: float = 1.0) -> dict[str, str]:
    """dcgm-exporter's units: W, %, MiB and an energy counter in mJ (power and energy ``scale`` × the
    script's)."""
    watts, util, fb, energy_mj, _ = script.now()
    energy_mj = ENERGY_BASE_MJ + (energy_mj - ENERGY_BASE_MJ) * scale
    return {
        "DCGM_FI_DEV_POWER_USAGE": f"{watts * scale:.6f}",
        "DCGM_FI_DEV_GPU_UTIL": f"{util:.0f}",
        "DCGM_FI_DEV_FB_USED": f"{fb:.0f}",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": f"{energy_mj:.0f}",
    }


def nvidia_values(script: GpuScript) -> dict[str, str]:
    """nvidia_gpu_exporter's, as it writes them (Go's %g): W, utilisation as a 0-1 ratio, memory in
    bytes, the clock event reasons' bitmask; its nvidia-smi backend has no energy counter."""
    watts, util, fb, _, reasons = script.now()
    return {
        "nvidia_smi_power_draw_watts": f"{watts:g}",
        "nvidia_smi_utilization_gpu_ratio": f"{util / 100:g}",
        "nvidia_smi_memory_used_bytes": f"{fb * MIB:e}",
        "nvidia_smi_clocks_event_reasons_active": str(reasons),
    }


def collected(values: Callable[[], dict[str, str]], every_s: float) -> Callable[[], dict[str, str]]:
    """``values`` as an exporter that collects on its own timer serves them: taken again only once
    ``every_s`` has passed since the last collection (at the first scrape after it), else the last ones."""
    last: list[tuple[float, dict[str, str]]] = []

    def now() -> dict[str, str]:
        t = time.monotonic()
        if not last or t - last[0][0] >= every_s:
            last[:] = [(t, values())]
        return last[0][1]

    return now


def recorded_app(
    recorded: pathlib.Path, values: Callable[[], dict[str, str]], host: str | None = None
) -> web.Application:
    """A target serving a recorded exporter's page with each named series' value replaced by ``values``'s
    at every scrape (every label set of it; the rest of the page as recorded); ``host``: the page's
    ``Hostname`` label made that."""
    text = recorded.read_text()
    if host is not None:
        text = text.replace(f'Hostname="{HOST}"', f'Hostname="{host}"')

    async def metrics(_: web.Request) -> web.Response:
        now = values()
        page = re.sub(
            r"^(\w+)(\{[^}]*\}) (\S+)$",
            lambda m: f"{m[1]}{m[2]} {now.get(m[1], m[3])}",
            text,
            flags=re.M,
        )
        return web.Response(text=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def _wait_written(url: str, after_ms: float, timeout_s: float = 15.0) -> None:
    """Until the coordinator's remote write of the agents' samples reaches past ``after_ms``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _newest_ms(url, 'sparkwatch_gpu_power_watts{job=""}') > after_ms:
            return
        time.sleep(0.2)
    raise AssertionError(f"the remote write did not reach past {after_ms}")


@dataclass
class Rig:
    tmp: pathlib.Path
    sqlite_export: dict[str, Any]
    prometheus: str
    victoria: str
    windows: pathlib.Path
    nvidia_instance: str  # the nvidia_gpu_exporter target's instance label
    coordinator: Coordinator  # still running: its run's windows can be asked for


def _scrape_config(
    agents: list[AgentProcess],
    coordinator_port: int,
    dcgm_port: int,
    nvidia_port: int,
    vllm_port: int,
    held: int,
) -> str:
    targets = ", ".join(f"'127.0.0.1:{a.port}'" for a in agents)
    return (
        "global:\n  scrape_interval: 1s\nscrape_configs:\n"
        f"  - job_name: agents\n    static_configs:\n      - targets: [{targets}]\n"
        f"  - job_name: coordinator\n    static_configs:\n      - targets: ['127.0.0.1:{coordinator_port}']\n"
        f"  - job_name: dcgm\n    static_configs:\n      - targets: ['127.0.0.1:{dcgm_port}']\n"
        f"  - job_name: nvidia\n    static_configs:\n      - targets: ['127.0.0.1:{nvidia_port}']\n"
        f"  - job_name: vllm\n    static_configs:\n      - targets: ['127.0.0.1:{vllm_port}']\n"
        f"  - job_name: dcgm_held\n    static_configs:\n      - targets: ['127.0.0.1:{held}']\n"
    )


def _samples(url: str, selector: str, start_s: float, end_s: float) -> list[tuple[float, float]]:
    """The raw samples a selector matches, (ms, value), all series together, in time order: through
    /api/v1/export, which VictoriaMetrics does not hold back (its queries leave out the last 30 s:
    -search.latencyOffset), else a range vector, as Prometheus has no export."""
    query = urllib.parse.urlencode({"match[]": selector, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}"})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/export?{query}", timeout=5) as r:
            lines = [json.loads(line) for line in r.read().splitlines() if line.strip()]
        pairs = (pair for s in lines for pair in zip(s["timestamps"], s["values"], strict=True))
        return sorted((float(t), float(v)) for t, v in pairs if v is not None)  # null: a staleness marker
    except urllib.error.HTTPError:
        ranged = f"{selector}[{max(1, round((end_s - start_s) * 1000))}ms]"
        query = urllib.parse.urlencode({"query": ranged, "time": f"{end_s:.3f}"})
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as r:
            result = json.loads(r.read())["data"]["result"]
        return sorted((float(t) * 1000, float(v)) for series in result for t, v in series["values"])


def _newest_ms(url: str, metric: str) -> float:
    now = time.time()
    return max((t for t, _ in _samples(url, metric, now - 60, now + 60)), default=0.0)


def _wait_held_moved(urls: list[str], timeout_s: float = 15.0) -> None:
    """Until every engine holds a move of the held target's counter: a window that starts before the first
    move an export reads has no known power there (a gap), and this target's first collection is taken
    at its first scrape, which may be just before the run (a real engine holds months before it)."""
    deadline = time.monotonic() + timeout_s
    held = f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{Hostname="{HELD_HOST}"}}'
    while time.monotonic() < deadline:
        now = time.time()
        if all(len({v for _, v in _samples(u, held, now - 60, now + 60)}) >= 2 for u in urls):
            return
        time.sleep(0.2)
    raise AssertionError(f"the engines hold no move of {held}")


def _wait_scraped(urls: list[str], after_ms: float, timeout_s: float = 15.0) -> None:
    """Until every engine holds a scrape of the agents and of both recorded targets after ``after_ms``."""
    deadline = time.monotonic() + timeout_s
    metrics = ("sparkwatch_gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE", "nvidia_smi_power_draw_watts")
    metrics += ("vllm:generation_tokens_total", "sparkwatch_meter_power_watts")
    while time.monotonic() < deadline:
        if all(_newest_ms(u, m) > after_ms for u in urls for m in metrics):
            return
        time.sleep(0.2)
    raise AssertionError(f"the engines did not scrape past {after_ms}")


def _script(
    coord: Coordinator, agents: list[AgentProcess], gpu: GpuScript, plug: ShellyPlug
) -> tuple[dict[str, Any], list[Any]]:
    """Idle, busy (util 0.8 / 90 %), light (0.2 / 20 %), idle; windows: a long busy one, a short one, one
    across the busy→light change."""
    status, run = coord.call("POST", "/v1/runs", {"name": "tsdb", "interval_s": 0.1})
    assert status == 201
    t0 = time.time_ns()
    time.sleep(3.0)
    for agent in agents:
        sim_load(agent, 0.8)
    gpu.set(300.0, 90, 40000)
    plug.set_power(WALL_BUSY_W)
    time.sleep(7.0)
    for agent in agents:
        sim_load(agent, 0.2)
    gpu.set(120.0, 20, 20000, SW_THERMAL)
    plug.set_power(WALL_LIGHT_W)
    time.sleep(3.0)
    for agent in agents:
        sim_load(agent, 0.0)
    gpu.set(60.0, 0, 4845)
    plug.set_power(WALL_IDLE_W)
    s = 1_000_000_000
    windows = [
        {
            "id": "long",
            "phase": "timed",
            "t_start_ns": t0 + 4 * s,
            "t_end_ns": t0 + 9 * s,
            "completion_tokens": 600,
        },
        {"id": "short", "phase": "timed", "t_start_ns": t0 + 6 * s, "t_end_ns": t0 + 6 * s + s // 2},
        {"id": "across", "phase": "timed", "t_start_ns": t0 + 9 * s, "t_end_ns": t0 + 12 * s},
    ]
    assert coord.call("POST", f"/v1/runs/{run['id']}/windows", {"windows": windows})[0] == 201
    return run, windows


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    for binary, package in ((PROMETHEUS, "prometheus"), (VICTORIA, "victoria-metrics")):
        if not os.access(binary, os.X_OK):
            pytest.fail(f"{package} missing: install the Debian package {package} (.ci/run does)")
    tmp = tmp_path_factory.mktemp("tsdb")
    gpu = GpuScript()
    gpu.set(60.0, 0, 4845)
    exporters = [
        AppThread(recorded_app(DCGM_TEXT, lambda: dcgm_values(gpu)), free_port()),
        AppThread(recorded_app(NVIDIA_TEXT, lambda: nvidia_values(gpu)), free_port()),
        AppThread(EngineReplay(vllm_page).app(), free_port()),
    ]
    plug = ShellyPlug(power_w=WALL_IDLE_W)
    exporters.append(AppThread(plug.app(), free_port()))
    held = collected(lambda: dcgm_values(gpu, HELD_SCALE), HELD_COLLECT_S)
    exporters.append(AppThread(recorded_app(DCGM_TEXT, held, HELD_HOST), free_port()))
    for exporter in exporters:
        exporter.start()
    names = ("spark-1", "spark-2")
    sim = ["--backend", "sim", "--no-sim-sensors", "--interval", "0.1", "--node"]
    agents = [AgentProcess([*sim, n], dict(os.environ), free_port()) for n in names]
    coord: Coordinator | None = None
    engines: list[Any] = []
    try:
        assert all(exporter.ready.wait(10) for exporter in exporters)
        for agent in agents:
            agent.wait_ready()
        config = tmp / "scrape.yml"
        coord_port = free_port()
        config.write_text(
            _scrape_config(agents, coord_port, *(e.port for e in exporters[:3]), exporters[4].port)
        )
        engines = [
            Prometheus(config, tmp / "prom", tmp / "prometheus.log", remote_write_receiver=True),
            Victoria(tmp / "vm", tmp / "victoria.log", scrape_config=config),
        ]
        (tmp / "coordinator").mkdir()
        nodes = f'[engine]\nurl = "http://127.0.0.1:{exporters[2].port}"\n'
        nodes += "".join(
            f'[nodes.{n}]\nurl = "ws://127.0.0.1:{a.port}"\n' for n, a in zip(names, agents, strict=True)
        )
        nodes += f'[nodes.spark-1.meter]\nkind = "shelly"\nurl = "http://127.0.0.1:{exporters[3].port}"\n'
        nodes += f"interval_s = {METER_S}\n"
        coord = Coordinator(
            tmp / "coordinator", nodes, port=coord_port, args=["--remote-write", engines[0].write_url]
        )
        coord.start()
        wait_connected(coord, 2)
        for engine in engines:
            engine.wait_ready()
        _wait_scraped([e.url for e in engines], time.time() * 1000)
        _wait_held_moved([e.url for e in engines])
        run, windows = _script(coord, agents, gpu, plug)
        wait_stored(coord, *agents)
        status, _ = coord.call("POST", f"/v1/runs/{run['id']}/end")
        assert status == 200
        _wait_scraped([e.url for e in engines], time.time() * 1000 + 1000)
        _wait_written(engines[0].url, (time.time() - 0.5) * 1000)
        status, export = coord.call("GET", f"/v1/runs/{run['id']}/export")
        assert status == 200
        path = tmp / "windows.json"
        path.write_text(json.dumps({"windows": windows}))
        yield Rig(tmp, export, engines[0].url, engines[1].url, path, f"127.0.0.1:{exporters[1].port}", coord)
    finally:
        if coord is not None:
            coord.stop()
        for engine in engines:
            engine.stop()
        for agent in agents:
            agent.stop()
        for exporter in exporters:
            exporter.stop()


def _export_argv(url: str) -> list[str]:
    """`sparkwatch export --prometheus URL` as this interpreter runs it; the rest is each test's."""
    return [sys.executable, "-m", "sparkwatch", "export", "--prometheus", url]


def export_cli(
    rig: Rig, url: str, *more: str, scrapes: bool = True
) -> tuple[int, dict[str, Any] | None, str]:
    """`sparkwatch export --prometheus URL …`; from the Prometheus, which holds the remote write too, the
    scrapes unless ``scrapes`` is false."""
    run = rig.sqlite_export["run"]
    if url == rig.prometheus and scrapes:
        more = ("--series-matchers", '{job!=""}', *more)
    out = rig.tmp / f"export-{time.monotonic_ns()}.json"
    span = (("--start", str(run["t_start_ns"] / 1e9)), ("--end", str(run["t_end_ns"] / 1e9)))
    defaults = (("--windows", str(rig.windows)), *span)  # unless ``more`` gives its own: a flag is given once
    argv = [
        *_export_argv(url),
        *(part for flag, value in defaults if flag not in more for part in (flag, value)),
        "-o",
        str(out),
        *more,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(out.read_text()) if out.exists() else None, done.stderr


def _nodes(export: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in export["nodes"]}


def _window(export: dict[str, Any], wid: str) -> dict[str, Any]:
    return next(w for w in export["windows"] if w["id"] == wid)


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_an_engine_scraping_every_second_gives_the_figures_sqlite_gives(rig: Rig, engine: str) -> None:
    url = rig.prometheus if engine == "prometheus" else rig.victoria
    rc, export, said = export_cli(rig, url)
    assert rc == 0, said
    assert export is not None
    jsonschema.validate(export, run_schema())
    jsonschema.validate(rig.sqlite_export, run_schema())
    assert rig.sqlite_export["source"] == {"kind": "sqlite", "metrics": "sparkwatch"}
    source = export["source"]
    assert (source["kind"], source["metrics"], source["url"]) == (engine, "sparkwatch", url)
    assert source["api"] == (
        "/api/v1/export" if engine == "victoriametrics" else "/api/v1/query (range selectors)"
    )
    assert export["method"]["interval_s"] == pytest.approx(1.0, abs=0.05)
    sqlite, tsdb = _nodes(rig.sqlite_export), _nodes(export)
    assert sorted(tsdb) == sorted(sqlite) == ["spark-1", "spark-2"]
    for name, node in tsdb.items():
        ref = sqlite[name]
        assert node["clock"]["method"] == "tsdb" and node["clock"]["offset_ns"] is None
        assert node["samples"]["interval_s"] == pytest.approx(1.0, abs=0.05)
        assert ref["samples"]["interval_s"] == pytest.approx(0.1, abs=0.01)
        assert node["energy_method"] == "counter"
        gated, expected = node["power_w"]["gated_mean"], ref["power_w"]["gated_mean"]
        lag = SNAPSHOT_LAG_S / node["gated_s"]
        print(f"{engine} {name}: gated mean {gated} W vs sqlite {expected} W ({gated / expected - 1:+.4%})")
        print(f"{engine} {name}: gated {node['gated_s']} s, so within {lag:.2%}")
        assert gated == pytest.approx(expected, rel=lag)
        assert gated == pytest.approx(45.0, rel=lag)  # the sim at util 0.8: 5 W + 50 W × 0.8
        assert node["memory_used_bytes"]["peak"] == ref["memory_used_bytes"]["peak"]
    for wid in ("long", "short", "across"):  # the figures docs/fleets.md quotes
        for ref, got in zip(
            _window(rig.sqlite_export, wid)["nodes"], _window(export, wid)["nodes"], strict=True
        ):
            print(f"{engine} {wid} {got['node']}: {got['energy_j']} J vs sqlite {ref['energy_j']} J")
    long_ref, long_tsdb = _window(rig.sqlite_export, "long"), _window(export, "long")
    assert long_tsdb["verdict"] == "ok", long_tsdb["reasons"]
    long_s = (long_ref["t_end_ns"] - long_ref["t_start_ns"]) / 1e9
    for ref, got in zip(long_ref["nodes"], long_tsdb["nodes"], strict=True):
        # at steady load the edges' interpolated counter readings are off by their snapshot lags only
        assert got["energy_j"] == pytest.approx(ref["energy_j"], rel=max(TOLERANCE, SNAPSHOT_LAG_S / long_s))
    short = _window(export, "short")
    assert short["verdict"] == "low_confidence"
    assert any("than 2 sampling intervals" in r for r in short["reasons"])
    assert _window(rig.sqlite_export, "short")["verdict"] == "ok"  # 0.5 s is five 10 Hz samples


def test_a_dcgm_exporter_target_scraped_by_prometheus_matches_its_script(rig: Rig) -> None:
    rc, export, said = export_cli(
        rig, rig.prometheus, "--metrics", "dcgm", "--nodes-label", "Hostname", "--nodes", HOST
    )
    assert rc == 0, said
    assert export is not None
    jsonschema.validate(export, run_schema())
    (node,) = export["nodes"]
    assert node["node"] == HOST
    assert node["gpus"][0]["uuid"] == "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
    assert export["source"]["metrics"] == "dcgm"
    assert export["method"]["gate"]["source"].startswith("DCGM_FI_DEV_GPU_UTIL")
    assert node["energy_method"] == "counter"
    assert node["power_w"]["gated_mean"] == pytest.approx(300.0, rel=TOLERANCE)
    assert node["memory_model"] == "discrete"
    assert node["memory_used_bytes"]["peak"] == 40000 * MIB
    long = _window(export, "long")
    gated, energy = node["power_w"]["gated_mean"], long["nodes"][0]["energy_j"]
    print(f"dcgm: gated mean {gated} W (script 300), long {energy} J (script 1500)")
    assert long["nodes"][0]["energy_j"] == pytest.approx(300.0 * 5, rel=TOLERANCE)
    assert long["nodes"][0]["power_w_gated_mean"] == pytest.approx(300.0, rel=TOLERANCE)
    assert _window(export, "short")["verdict"] == "low_confidence"
    entry = long["nodes"][0]  # the capture's SM clock (MHz) and temperature; no maximum: no ratio
    assert (entry["sm_clock_hz_mean"], entry["sm_clock_ratio"], entry["temperature_c_max"]) == (
        1.215e9,
        None,
        61.0,
    )


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_a_dcgm_exporter_serving_one_collection_to_several_scrapes_keeps_its_energy(
    rig: Rig, engine: str
) -> None:
    """dcgm-exporter as it runs by default serves each collection's values until the next: a 1 s scrape
    reads one energy counter value several times, then the jump (here every 4 s, on a GPU at 900 W busy).
    The held seconds read 0 W and each jump (3 600 W in one second) was rejected as no GPU's draw, so the
    gated mean came out near 0 W; now each jump is spread over the seconds it covers. The figures keep the
    collection's resolution (a collection that straddles a load change averages it), and say so: the
    interval is the collection's."""
    url = rig.prometheus if engine == "prometheus" else rig.victoria
    argv = ("--metrics", "dcgm", "--nodes-label", "Hostname", "--nodes", HELD_HOST)
    rc, export, said = export_cli(rig, url, *argv)
    assert rc == 0 and export is not None, said
    (node,) = export["nodes"]
    gated, long = node["power_w"]["gated_mean"], _window(export, "long")["nodes"][0]
    print(f"dcgm held/{engine}: gated mean {gated} W (script 900), long {long['energy_j']} J (script 4500)")
    assert node["samples"]["implausible_intervals"] == 0
    assert node["energy_method"] == "counter"
    # how often the counter moved: every collection, which this target takes at the first scrape 4 s on by
    # its own clock when the scrape arrives; the engine stamps a scrape when it starts it, so a scrape sent
    # late on a loaded machine puts the engine's spacing a little under 4 s (3.975 s in one CI run)
    assert HELD_COLLECT_S - STAMP_JITTER_S <= node["samples"]["interval_s"] <= HELD_COLLECT_S + 1.05
    assert export["method"]["interval_s"] == pytest.approx(1.0, rel=0.05)  # the scrape's: gaps, series
    long_window = _window(export, "long")  # 5 s: under two collections
    reasons = long_window["reasons"]
    assert any(r.startswith("shorter (5.000 s) than 2 sampling intervals (") for r in reasons)
    # A loaded machine may answer a scrape late (the timeout is the 1 s interval): missed scrapes inside a
    # collection cost nothing, but a collection first seen after such a gap leaves the spans it bounds
    # unknown, which makes the window incomplete. Read what the engine scraped around the window: as far
    # back as a span bounded by a late move may reach into it (two collections, and the gap before it).
    start_s, end_s = long_window["t_start_ns"] / 1e9, long_window["t_end_ns"] / 1e9
    around_s = (start_s - 5 * HELD_COLLECT_S, end_s + 3 * HELD_COLLECT_S)
    counter = _samples(url, f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{Hostname="{HELD_HOST}"}}', *around_s)
    limit_ms = 0.9 * GAP_INTERVALS * 1000.0  # the engine's median spacing (1 s), give or take
    late = [(a, b) for a, b in itertools.pairwise(counter) if b[0] - a[0] > limit_ms and b[1] != a[1]]
    print(
        f"dcgm held/{engine}: {len(counter)} scrapes around the window, moves after a gap {late}, {reasons}"
    )
    assert sum(start_s * 1000 <= t <= end_s * 1000 for t, _ in counter) >= 4  # the window's 5, give or take
    busiest = 900.0 * HELD_COLLECT_S / (HELD_COLLECT_S - STAMP_JITTER_S)  # the busy 900 W (below)
    if late:  # what is left known is still no more than the GPU drew
        assert long_window["verdict"] in ("low_confidence", "incomplete"), reasons
        assert all(r.startswith(("shorter (", "coverage ")) for r in reasons), (reasons, late)
        assert (long["energy_j"] or 0.0) <= 900.0 * 5 * long["coverage_ratio"] * (1 + TOLERANCE)
        assert gated is None or gated <= busiest * (1 + TOLERANCE)
        return
    assert long_window["verdict"] == "low_confidence", (reasons, long)
    assert long["coverage_ratio"] == 1.0
    # every gated second sits in a collection with util >= 50 % at its end, whose mean is the busy 900 W
    # unless it straddles the busy phase's start or end (idle 180 W, light 360 W); a collection's 3 600 J
    # are spread over its seconds as the engine stamped them, which a late scrape shortens by up to
    # STAMP_JITTER_S (909 W once in CI, a collection seen 3.96 s long)
    assert 0.7 * 900.0 <= gated <= busiest * (1 + TOLERANCE)
    assert long["energy_j"] == pytest.approx(900.0 * 5, rel=0.3)


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_an_nvidia_gpu_exporter_target_matches_its_script(rig: Rig, engine: str) -> None:
    """Its recorded page (nvidia-smi backend: no energy counter, so the trapezoid of power) scraped by either
    engine, nodes told apart by the scrape's ``instance`` label."""
    url = rig.prometheus if engine == "prometheus" else rig.victoria
    rc, export, said = export_cli(rig, url, "--metrics", "nvidia_gpu_exporter", "--nodes-label", "instance")
    assert rc == 0 and export is not None, said
    jsonschema.validate(export, run_schema())
    (node,) = export["nodes"]
    assert node["node"] == rig.nvidia_instance
    (gpu,) = node["gpus"]
    assert gpu["uuid"] == "00000000-0000-0000-0000-000000000000"  # the capture's (zeroed by its recorder)
    # the model name joined from nvidia_smi_gpu_info
    assert node["hardware"]["gpus"] == [{"uuid": gpu["uuid"], "name": "NVIDIA H200"}]
    assert export["method"]["gate"]["source"].startswith("nvidia_smi_utilization_gpu_ratio")
    assert node["energy_method"] == "trapezoid"
    assert node["memory_model"] == "discrete"
    assert node["memory_used_bytes"]["peak"] == 40000 * MIB
    long = _window(export, "long")
    gated, energy = node["power_w"]["gated_mean"], long["nodes"][0]["energy_j"]
    print(f"nvidia_gpu_exporter/{engine}: gated mean {gated} W (script 300), long {energy} J (script 1500)")
    assert gated == pytest.approx(300.0, rel=TOLERANCE)
    assert energy == pytest.approx(300.0 * 5, rel=TOLERANCE)
    assert _window(export, "short")["verdict"] == "low_confidence"
    entry = long["nodes"][0]  # the capture's SM clock at its maximum and its temperature, no reason
    assert (entry["sm_clock_hz_mean"], entry["sm_clock_ratio"], entry["temperature_c_max"]) == (
        1.98e9,
        1.0,
        52.0,
    )
    assert entry["clock_event_reasons"] == [] and entry["throttle"] == []
    across = _window(export, "across")  # the light phase's scripted sw_thermal bitmask
    assert across["nodes"][0]["clock_event_reasons"] == ["sw_thermal"]
    assert across["verdict"] == "low_confidence"
    assert any("throttled:sw_thermal" in r for r in across["reasons"]), across["reasons"]


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_nodes_named_are_the_only_ones_measured_and_a_missing_one_is_one_line(rig: Rig, engine: str) -> None:
    """A fleet's engine holds more nodes than the benchmark ran on: ``--nodes`` measures those named, in
    that order, with the figures the full export gives them; a name with no series writes nothing."""
    url = rig.prometheus if engine == "prometheus" else rig.victoria
    rc, full, said = export_cli(rig, url)
    assert rc == 0 and full is not None, said
    rc, export, said = export_cli(rig, url, "--nodes", "spark-2,spark-1")
    assert rc == 0 and export is not None, said
    assert "2 node(s) (spark-2, spark-1)" in said
    assert [n["node"] for n in export["nodes"]] == ["spark-2", "spark-1"]
    assert _nodes(export) == _nodes(full)
    rc, export, said = export_cli(rig, url, "--nodes", "spark-2")
    assert rc == 0 and export is not None, said
    assert list(_nodes(export)) == ["spark-2"] and _nodes(export)["spark-2"] == _nodes(full)["spark-2"]
    assert export["totals"]["energy_j"] == _nodes(full)["spark-2"]["energy_j"] != full["totals"]["energy_j"]
    assert all([e["node"] for e in w["nodes"]] == ["spark-2"] for w in export["windows"])
    rc, export, said = export_cli(rig, url, "--nodes", "spark-2,spark-9")
    assert rc != 0 and export is None
    assert said.count("\n") == 1 and "Traceback" not in said, said
    assert 'node="spark-9"' in said and "(nodes with them: spark-1, spark-2)" in said, said


def test_a_refusing_engine_or_a_missing_label_is_one_line_and_writes_nothing(rig: Rig) -> None:
    rc, export, said = export_cli(rig, f"http://127.0.0.1:{free_port()}")
    assert rc != 0 and export is None
    assert said.count("\n") == 1 and "cannot reach" in said and "Traceback" not in said
    rc, export, said = export_cli(rig, rig.prometheus, "--metrics", "dcgm")  # dcgm has no "node" label
    assert rc != 0 and export is None
    assert "Hostname" in said and "--nodes-label" in said and "Traceback" not in said
    rc, export, said = export_cli(rig, rig.prometheus, "--engine", "victoriametrics")  # forced, and wrong
    # the nodes are counted by /api/v1/query, which both engines answer: the first read is what fails
    (error,) = [line for line in said.splitlines() if "error" in line]
    assert rc != 0 and export is None and said.splitlines()[-1] == error, said
    assert "/api/v1/export answered HTTP 404" in error and "--engine auto asks the engine" in error


@pytest.mark.parametrize("given", ["run", "file"])
def test_a_coordinator_runs_windows_measured_again_from_the_engine(rig: Rig, given: str) -> None:
    """Windows from a coordinator: its RUN (asked of it: --coordinator, --token-file), or its run's export
    as the windows file (`--windows-format export`); no --start/--end (the run's span, gate, scope and phases
    are the run's). The figures a plain windows file with the span typed give; each window says which run
    it came from."""
    run = rig.sqlite_export["run"]
    if given == "run":
        coord = rig.coordinator
        windows = [run["id"], "--coordinator", coord.url, "--token-file", str(coord.token)]
    else:
        exported = rig.tmp / "coordinator-run.json"
        exported.write_text(json.dumps(rig.sqlite_export))
        windows = ["--windows", str(exported), "--windows-format", "export"]
    out = rig.tmp / f"from-coordinator-{given}.json"
    argv = [*_export_argv(rig.victoria), *windows, "-o", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    export = json.loads(out.read_text())
    rc, typed, said = export_cli(rig, rig.victoria)
    assert rc == 0 and typed is not None, said
    assert (export["run"]["t_start_ns"], export["run"]["t_end_ns"]) == (run["t_start_ns"], run["t_end_ns"])
    assert export["run"]["name"] == run["name"]
    assert (
        export["method"]["gate"]["threshold_ratio"] == rig.sqlite_export["method"]["gate"]["threshold_ratio"]
    )
    assert [w["id"] for w in export["windows"]] == [w["id"] for w in typed["windows"]]
    for mine, ref in zip(export["windows"], typed["windows"], strict=True):
        assert mine["source"]["run_id"] == run["id"] and mine["verdict"] == ref["verdict"], mine
        for node, ref_node in zip(mine["nodes"], ref["nodes"], strict=True):
            assert node["energy_j"] == pytest.approx(ref_node["energy_j"], rel=1e-6, abs=1e-3), node
    for node, ref in zip(export["nodes"], typed["nodes"], strict=True):
        assert node["power_w"]["gated_mean"] == pytest.approx(ref["power_w"]["gated_mean"], rel=1e-6)


def test_a_runs_own_nodes_are_the_ones_measured_and_an_open_runs_export_needs_an_end(rig: Rig) -> None:
    """Windows from a run's export: the nodes the run measured are measured (a fleet's engine holds others
    over the same span, and every one of them was summed into the totals); a node of the run the engine has
    no power series of is one line that names the run's nodes. A run exported while it was open has no
    end (the export's time stood in for it, and was taken as the end)."""
    exported = rig.sqlite_export
    one = rig.tmp / "run-of-spark-2.json"
    one.write_text(json.dumps(exported | {"nodes": [n for n in exported["nodes"] if n["node"] == "spark-2"]}))
    rc, export, said = export_cli(rig, rig.victoria, "--windows", str(one), "--windows-format", "export")
    assert rc == 0 and export is not None, said
    assert [n["node"] for n in export["nodes"]] == ["spark-2"] and "1 node(s) (spark-2)" in said
    rc, both, said = export_cli(
        rig, rig.victoria, "--windows", str(one), "--windows-format", "export", "--nodes", "spark-1,spark-2"
    )
    assert rc == 0 and both is not None and [n["node"] for n in both["nodes"]] == ["spark-1", "spark-2"], said
    away = rig.tmp / "run-of-spark-9.json"
    away.write_text(json.dumps(exported | {"nodes": [{**exported["nodes"][0], "node": "spark-9"}]}))
    rc, export, said = export_cli(rig, rig.victoria, "--windows", str(away), "--windows-format", "export")
    assert rc != 0 and export is None and said.count("\n") == 1, said
    assert 'node="spark-9"' in said and "(the run measured spark-9: --nodes picks the ones to export)" in said
    run = exported["run"] | {"notes": [OPEN_RUN_NOTE]}
    opened = rig.tmp / "open-run.json"
    opened.write_text(json.dumps(exported | {"run": run}))
    argv = [*_export_argv(rig.victoria), "--windows", str(opened), "--windows-format", "export"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.endswith(
        f"run {run['id']} was still open when exported (it has no end yet): give --end\n"
    )


def test_a_coordinator_run_that_is_not_there_is_one_line(rig: Rig) -> None:
    coord = rig.coordinator
    argv = [*_export_argv(rig.victoria), "run-nope"]
    argv += ["--coordinator", coord.url, "--token-file", str(coord.token)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"GET {coord.url}/v1/runs/run-nope: HTTP 404: no run run-nope" in done.stderr, done.stderr
    assert (
        "(a run's export file gives its windows too: --windows FILE --windows-format export)" in done.stderr
    )


def test_a_forced_engine_path_reads_victoriametrics_and_names_it(rig: Rig) -> None:
    """`--engine prometheus` against VictoriaMetrics reads by range selectors, gives the figures its
    /api/v1/export gives, and the export still says which engine it read (before: "prometheus")."""
    rc, auto, _ = export_cli(rig, rig.victoria)
    assert rc == 0 and auto is not None
    rc, forced, said = export_cli(rig, rig.victoria, "--engine", "prometheus")
    assert rc == 0 and forced is not None, said
    source = forced["source"]
    assert (source["kind"], source["api"]) == ("victoriametrics", "/api/v1/query (range selectors)")
    assert "from victoriametrics (read by /api/v1/query (range selectors), as --engine says)" in said, said
    for node, ref in zip(forced["nodes"], auto["nodes"], strict=True):
        assert node["power_w"]["gated_mean"] == pytest.approx(ref["power_w"]["gated_mean"], rel=1e-9), node
        assert node["samples"] == ref["samples"]


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_the_serving_engines_series_in_the_tsdb_give_its_engine_blocks(rig: Rig, engine: str) -> None:
    """`--engine-metrics '{job="vllm"}'`: the vLLM page the engine scraped every second gives the scripted
    token rates, as the coordinator's own scrapes of it do; matchers that select nothing are one line."""
    url = rig.prometheus if engine == "prometheus" else rig.victoria
    rc, export, said = export_cli(rig, url, "--engine-metrics", '{job="vllm"}')
    assert rc == 0 and export is not None, said
    jsonschema.validate(export, run_schema())
    assert export["source"]["engine_series"] == '{job="vllm"}'
    scope, ref = export["engine"], rig.sqlite_export["engine"]
    print(f"{engine}: engine scope {scope}\nsqlite: {ref}")
    assert scope["family"] == ref["family"] == "vllm"
    assert scope["generation_tokens"] == pytest.approx(ref["generation_tokens"], rel=TOLERANCE)
    for wid in ("long", "across"):
        got, want = _window(export, wid)["engine"], _window(rig.sqlite_export, wid)["engine"]
        assert got["generation_tokens_per_s"] == pytest.approx(GENERATED_PER_S, rel=TOLERANCE), got
        assert got["prompt_tokens_per_s"] == pytest.approx(PROMPT_PER_S, rel=TOLERANCE)
        assert want["generation_tokens_per_s"] == pytest.approx(GENERATED_PER_S, rel=TOLERANCE), want
        assert got["running_requests"]["mean"] == 4.0
        assert got["sources"]["generation_tokens"] == "vllm:generation_tokens_total"
    assert _nodes(export).keys() == {"spark-1", "spark-2"}  # the engine's series are not a node's
    without = export_cli(rig, url)[1]
    assert without is not None and without["engine"] is None and without["source"]["engine_series"] is None
    rc, export, said = export_cli(rig, url, "--engine-metrics", '{job="sglang"}')
    assert rc == 2 and export is None  # the CLI's code for a command that could not do what it was asked
    progress, error = said.splitlines()  # the export's "exporting …" line, then one error line
    assert progress.startswith("sparkwatch: exporting 3 window(s)"), said
    assert error.startswith('sparkwatch: error: no vLLM or SGLang series match {job="sglang"} from '), said
    rc, export, said = export_cli(rig, url, "--engine-metrics", "{job=}")  # the engine's own refusal
    assert rc == 2 and export is None
    assert said.splitlines()[-1].startswith("sparkwatch: error: --engine-metrics {job=}: "), said
    assert said.count("\n") == 2 and "Traceback" not in said


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics"])
def test_a_scraped_coordinators_wall_meter_is_the_nodes_system_domain(rig: Rig, engine: str) -> None:
    """The coordinator's ``/metrics`` scraped every second (no remote write): the wall meter it polls every
    0.2 s is spark-1's ``wall`` domain at the scrape's resolution, its gaps read against the scrapes'
    spacing (not the poll interval every scraped reading carries), and its figures are the SQLite
    export's within what one scrape interval at a load change can move them."""
    url = rig.prometheus if engine == "prometheus" else rig.victoria
    rc, export, said = export_cli(rig, url)
    assert rc == 0 and export is not None, said
    tsdb, sqlite = _nodes(export), _nodes(rig.sqlite_export)
    assert tsdb["spark-2"]["system"] is None and sqlite["spark-2"]["system"] is None
    (wall,) = tsdb["spark-1"]["system"]["domains"]
    (ref,) = sqlite["spark-1"]["system"]["domains"]
    print(
        f"{engine} wall: {wall['power_w']} {wall['samples']}\nsqlite wall: {ref['power_w']} {ref['samples']}"
    )
    assert (wall["domain"], wall["kind"], wall["source"]) == (ref["domain"], ref["kind"], ref["source"])
    assert (wall["domain"], wall["source"]) == ("wall", "meter:shelly")
    assert tsdb["spark-1"]["system"]["headline_domain"] == "wall"
    assert wall["samples"]["coverage_ratio"] == ref["samples"]["coverage_ratio"] == 1.0
    assert wall["samples"]["max_gap_s"] == ref["samples"]["max_gap_s"] == 0.0
    # a reading a scrape apart, not a poll (8 s of timed windows)
    assert wall["samples"]["count"] < 0.3 * ref["samples"]["count"]
    # an interval across the idle→busy change is gated in or out whole: its trapezoid can move the mean
    # by at most half the step over one scrape interval, at either end of the gated time
    gated_s = tsdb["spark-1"]["gated_s"]
    step_w = (WALL_BUSY_W - WALL_IDLE_W) * 1.0 / gated_s
    assert ref["power_w"]["gated_mean"] == pytest.approx(WALL_BUSY_W, abs=0.5)
    assert wall["power_w"]["gated_mean"] == pytest.approx(WALL_BUSY_W, abs=step_w)
    long, long_ref = _window(export, "long"), _window(rig.sqlite_export, "long")
    (entry,) = long["nodes"][0]["system"]
    (entry_ref,) = long_ref["nodes"][0]["system"]
    print(f"{engine} long wall: {entry} vs sqlite {entry_ref}")
    assert entry_ref["energy_j"] == pytest.approx(WALL_BUSY_W * 5, rel=TOLERANCE)
    assert entry["energy_j"] == pytest.approx(entry_ref["energy_j"], rel=TOLERANCE)


def test_an_engine_holding_scrapes_and_remote_write_is_refused_until_series_matchers_pick_one(
    rig: Rig,
) -> None:
    """The Prometheus scraped the agents and took the coordinator's remote write: each GPU has two series at
    once, which would interleave into a track neither is. The export is refused in one line that names the
    labels telling them apart and the flag; ``{job=""}`` then reads the remote write at the agents' full
    rate, with the SQLite export's figures."""
    rc, export, said = export_cli(rig, rig.prometheus, scrapes=False)
    assert rc == 2 and export is None
    error = said.splitlines()[-1]
    assert error.startswith("sparkwatch: error: two series of sparkwatch_gpu_power_watts for GPU "), said
    assert 'job=""} and {' in error and 'job="agents"}' in error and "--series-matchers" in error, error
    assert "Traceback" not in said
    rc, export, said = export_cli(rig, rig.prometheus, "--series-matchers", '{job=""}', scrapes=False)
    assert rc == 0 and export is not None, said
    jsonschema.validate(export, run_schema())
    assert export["source"]["series_matchers"] == '{job=""}'
    assert export["method"]["interval_s"] == pytest.approx(0.1, abs=0.01)
    sqlite = _nodes(rig.sqlite_export)
    for name, node in _nodes(export).items():
        ref = sqlite[name]
        print(f"remote write {name}: {node['power_w']} {node['energy_j']} J vs sqlite {ref['power_w']}")
        assert node["power_w"]["gated_mean"] == pytest.approx(ref["power_w"]["gated_mean"], rel=1e-3)
        assert node["energy_j"] == pytest.approx(ref["energy_j"], rel=1e-3)
    (wall,) = _nodes(export)["spark-1"]["system"]["domains"]
    (ref_wall,) = sqlite["spark-1"]["system"]["domains"]
    assert wall["power_w"]["gated_mean"] == pytest.approx(ref_wall["power_w"]["gated_mean"], rel=1e-3)
    assert abs(wall["samples"]["count"] - ref_wall["samples"]["count"]) <= 2


def test_a_run_measured_whole_is_exported_from_the_remote_write_as_from_sqlite(rig: Rig) -> None:
    """A run with no windows (`run --scope run`, as `run` suggests) exported from the coordinator's SQLite
    but was refused from an engine (`the run has no windows: nothing to measure again`); and the SQLite
    export read the wall meter only up to the run's end (its last poll interval uncovered: 0.96 against the
    engine's 1.0 in a trial, energy 2.9 % apart). Now the remote write at the agents' full rate gives the
    SQLite figures, the wall meter's included, within 0.1 %."""
    coord = rig.coordinator
    env = {"SPARKWATCH_COORDINATOR": coord.url, "SPARKWATCH_TOKEN_FILE": str(coord.token)}
    status, run = coord.call("POST", "/v1/runs", {"name": "whole", "interval_s": 0.1, "scope": "run"})
    assert status == 201
    time.sleep(2.5)
    ended = cli("runs", "end", run["id"], env=env)  # waits for the samples and the meter past the end
    assert ended.returncode == 0, ended.stderr
    end_ms = json.loads(cli("runs", "show", run["id"], "--json", env=env).stdout)["t_end_ns"] / 1e6
    _wait_written(rig.prometheus, end_ms + 500)
    deadline = time.monotonic() + 15
    while _newest_ms(rig.prometheus, 'sparkwatch_meter_power_watts{job=""}') <= end_ms + 500:
        assert time.monotonic() < deadline, "the meter's remote write did not reach past the end"
        time.sleep(0.2)
    status, sqlite = coord.call("GET", f"/v1/runs/{run['id']}/export")
    assert status == 200 and sqlite["windows"] == [] and sqlite["method"]["scope"] == "run"
    out = rig.tmp / "whole-from-remote-write.json"
    done = cli(
        "export", "--prometheus", rig.prometheus, run["id"], "--series-matchers", '{job=""}', "-o", str(out),
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tsdb = json.loads(out.read_text())
    jsonschema.validate(tsdb, run_schema())
    assert tsdb["windows"] == [] and tsdb["method"]["scope"] == "run"
    for name, node in _nodes(tsdb).items():
        ref = _nodes(sqlite)[name]
        print(f"whole run {name}: {node['energy_j']} J vs sqlite {ref['energy_j']} J")
        assert node["energy_j"] == pytest.approx(ref["energy_j"], rel=1e-3)
        # the same samples, gaps and all (a 10 Hz agent the loaded machine stalls now and then: test_clocks)
        assert node["samples"]["coverage_ratio"] == ref["samples"]["coverage_ratio"] > 0.6
    (wall,) = _nodes(tsdb)["spark-1"]["system"]["domains"]
    (ref_wall,) = _nodes(sqlite)["spark-1"]["system"]["domains"]
    assert wall["samples"]["coverage_ratio"] == ref_wall["samples"]["coverage_ratio"] == 1.0
    assert wall["energy_j"] == pytest.approx(ref_wall["energy_j"], rel=1e-3)
    assert tsdb["totals"]["system_energy_j"] == pytest.approx(sqlite["totals"]["system_energy_j"], rel=1e-3)
