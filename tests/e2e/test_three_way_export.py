"""Issue 19's three-way check: one scripted run, exported from SQLite, from Prometheus after remote write and
from VictoriaMetrics after remote write, gives the same figures within 0.1 %.

Two agents run the real nvidia-ml-py on the fake ``libnvidia-ml.so.1`` (GB10 profile, one control file per
node scripts its utilisation and so its power and energy counter) at 10 Hz. A coordinator writes to one
remote-write URL, so two coordinators dial the same agents, one writing to a real Prometheus (receiver on)
and one to a real VictoriaMetrics; each engine is compared with its own coordinator's SQLite export (the same
windows, the run's span), and the two SQLite exports with each other. Per node: the gated mean power, the
GPU energy, and each window's energy for windows of at least two sample intervals; the same of its one
system domain (a scripted hwmon ``sys_total`` that follows the utilisation), which an engine holds as the
agent's ``sparkwatch_sensor_*`` series; and spark-1's ``wall`` domain, a Shelly plug (tests/doubles/shelly.py)
that each coordinator polls itself and remote-writes as ``sparkwatch_meter_power_watts``. (The two
coordinators poll the plug at their own moments, so their SQLite exports' wall figures are not compared
with each other: each engine is held to its own coordinator's.)

spark-2's wall clock runs ``SKEW_S`` behind (libfaketime; its monotonic clock stays true): the SQLite export
corrects it from the link's clock probes, and remote write must stamp its samples on the coordinator's
clock too, or every window would read that node's samples from the wrong seconds.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest

from doubles.fake_nvml import write_control
from doubles.shelly import ShellyPlug
from helpers.app_thread import AppThread
from helpers.clocks import faketime_env, set_fake_time
from helpers.processes import AgentProcess, Coordinator, free_port, wait_connected, wait_stored
from helpers.receivers import start_receivers
from sparkwatch.core.export_schema import run_schema

#: Every test here on one xdist worker (the suite runs with --dist loadgroup): the module's rig of engines,
#: agents and coordinators is set up once, not once on each worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_three_way_export")
NAMES = ("spark-1", "spark-2")
TOLERANCE = 0.001  # issue 19: the same figures within 0.1 %
INTERVAL_S = 0.1
ENGINES = ("prometheus", "victoriametrics")
S = 1_000_000_000
#: Each node's utilisation (%) from a time (s after the script's start); the fake's GB10 draws
#: 5 W + 0.45 W per %. spark-1 drops below the 50 % gate at 6 s, spark-2 rises; both idle at 9 s.
#: How far behind the coordinator's clock spark-2's wall clock runs: longer than any scripted phase.
SKEW_S = -4.0
SCRIPT = {
    "spark-1": ((0.0, 0), (2.0, 80), (6.0, 40), (9.0, 0)),
    "spark-2": ((0.0, 0), (2.0, 85), (6.0, 100), (9.0, 0)),
}
END_S = 11.0
#: The scripted sys_total channel: this much at idle, plus this much per % of utilisation.
SYS_IDLE_W, SYS_W_PER_PCT = 30.0, 0.6
#: spark-1's wall plug: this much at idle, plus this much per % of its utilisation; polled every
#: ``METER_S`` by each coordinator.
WALL_IDLE_W, WALL_W_PER_PCT, METER_S = 60.0, 0.7, 0.2
WALL_NODE = "spark-1"
#: The plug answers 503 for this long from this time (s from the start), inside the steady window: two or
#: three failed polls for each coordinator, whose readings each side SQLite keeps apart (their errors), and
#: an engine's export too (the failed-poll count sent with each reading rose between them).
PLUG_DOWN_AT_S, PLUG_DOWN_S = 4.0, 0.5
#: (id, start s, end s): steady, across the 6 s change, across the drop to idle, and one shorter than two
#: sample intervals (low_confidence from every source; its energy is printed, not compared). Remote
#: write carries times in whole ms (corrected by one clock-probe round, floored), the SQLite export keeps
#: ns and corrects by the fit of every round: a window is shifted by up to about 1 ms, which moves its
#: energy by up to (edge power step) × 1 ms.
#: Windows that cross a change are long enough for that to stay well inside 0.1 % (45 W × 1 ms of 82 J here).
WINDOWS = (("steady", 2.5, 5.5), ("across", 5.0, 8.0), ("tail", 7.5, 10.5), ("short", 3.0, 3.15))


@dataclass
class Rig:
    tmp: pathlib.Path
    urls: dict[str, str]  # engine → its API
    runs: dict[str, dict[str, Any]]  # engine → its coordinator's run
    sqlite: dict[str, dict[str, Any]]  # engine → its coordinator's SQLite export
    windows: pathlib.Path


def wait_sent(coord: Coordinator, timeout_s: float = 20.0) -> None:
    """Until the coordinator has sent something and holds fewer than 100 samples back (as
    test_remote_write_engines waits); its graceful stop then sends the rest."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{coord.url}/metrics", timeout=5) as r:
            text = r.read().decode()
        sent = re.search(
            r'^sparkwatch_coordinator_remote_write_samples_total\{outcome="sent"\} (\S+)', text, re.M
        )
        pending = re.search(r"^sparkwatch_coordinator_remote_write_pending_samples (\S+)", text, re.M)
        if sent and float(sent.group(1)) > 0 and pending and float(pending.group(1)) < 100:
            return
        time.sleep(0.2)
    raise AssertionError(f"nothing sent: {text}")


def _play(controls: dict[str, pathlib.Path], plug: ShellyPlug, t0: float) -> None:
    """Write each node's utilisation (and its sys_total power, and spark-1's wall power) at its scripted
    times (wall clock from ``t0``), then wait for the end."""
    steps = sorted((at, node, util) for node, script in SCRIPT.items() for at, util in script)
    steps.append((PLUG_DOWN_AT_S, "", 0))
    for at, node, util in sorted(steps):
        time.sleep(max(0.0, t0 + at - time.time()))
        if not node:
            plug.go_down(PLUG_DOWN_S)
            continue
        write_control(controls[node], util=util)
        _write_sys_total(controls[node].with_name(f"{node}-hwmon"), util)
        if node == WALL_NODE:
            plug.set_power(WALL_IDLE_W + WALL_W_PER_PCT * util)
    time.sleep(max(0.0, t0 + END_S - time.time()))


def _write_sys_total(root: pathlib.Path, util: int) -> None:
    """An spbm chip with one channel, sys_total, at the script's power; written in place and always as long,
    as sysfs regenerates an attribute (the agent keeps it open and re-reads it from offset 0)."""
    chip = root / "hwmon0"
    if not chip.exists():
        chip.mkdir(parents=True)
        (chip / "name").write_text("spbm\n")
        (chip / "power1_label").write_text("sys_total\n")
    value = round((SYS_IDLE_W + SYS_W_PER_PCT * util) * 1e6)
    path = chip / "power1_input"
    with open(path, "r+b" if path.exists() else "wb") as f:
        f.write(f"{value:<24}\n".encode())


def _start_agents(
    tmp: pathlib.Path, fake_nvml_dir: pathlib.Path
) -> tuple[list[AgentProcess], dict[str, pathlib.Path]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY_SOCKET"))}
    controls, agents = {}, []
    for node, tag in zip(NAMES, ("a", "b"), strict=True):
        controls[node] = tmp / f"{node}.control"
        write_control(controls[node], util=0)
        hwmon = tmp / f"{node}-hwmon"
        _write_sys_total(hwmon, 0)
        env = base | {
            "LD_LIBRARY_PATH": str(fake_nvml_dir),
            "FAKE_NVML_PROFILE": "gb10",
            "FAKE_NVML_CONTROL": str(controls[node]),
            "FAKE_NVML_UUID_TAG": tag,  # two hosts, two GPUs: one UUID on both would be refused
        }
        # the host's meminfo, held still: read live, its page cache moved under a loaded CI machine, and a
        # sample stamped a millisecond across a window's edge on one side changed a mean on the other
        meminfo = tmp / f"{node}-meminfo"
        meminfo.write_text(pathlib.Path("/proc/meminfo").read_text())
        args = ["--backend", "nvml", "--node", node, "--interval", str(INTERVAL_S)]
        args += ["--hwmon-root", str(hwmon), "--meminfo-path", str(meminfo)]
        if node == "spark-2":
            set_fake_time(tmp / "spark-2.faketime", f"{SKEW_S:+g}")
            env |= faketime_env(tmp / "spark-2.faketime")
        agents.append(AgentProcess(args, env, free_port()))
    return agents, controls


def _run(
    coords: dict[str, Coordinator], controls: dict[str, pathlib.Path], plug: ShellyPlug
) -> tuple[dict[str, Any], list[Any]]:
    """One run on every coordinator, the script played once, the same windows posted to each."""
    runs = {}
    for engine, coord in coords.items():
        status, runs[engine] = coord.call("POST", "/v1/runs", {"name": "three-way", "interval_s": INTERVAL_S})
        assert status == 201, runs[engine]
    t0 = time.time()
    _play(controls, plug, t0)
    base = int(t0 * S)
    windows = [
        {"id": wid, "phase": "timed", "t_start_ns": base + int(a * S), "t_end_ns": base + int(b * S)}
        | {"completion_tokens": 100}
        for wid, a, b in WINDOWS
    ]
    for engine, coord in coords.items():
        assert coord.call("POST", f"/v1/runs/{runs[engine]['id']}/windows", {"windows": windows})[0] == 201
    return runs, windows


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: pathlib.Path) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("three_way")
    prometheus, victoria = start_receivers(tmp)
    agents, controls = _start_agents(tmp, fake_nvml_dir)
    plug = ShellyPlug(power_w=WALL_IDLE_W)
    shelly = AppThread(plug.app(), free_port())
    shelly.start()
    assert shelly.ready.wait(10)
    nodes = "".join(
        f'[nodes.{n}]\nurl = "ws://127.0.0.1:{a.port}"\n' for n, a in zip(NAMES, agents, strict=True)
    )
    nodes += f'[nodes.{WALL_NODE}.meter]\nkind = "shelly"\nurl = "http://127.0.0.1:{shelly.port}"\n'
    nodes += f"interval_s = {METER_S}\n"
    coords: dict[str, Coordinator] = {}
    try:
        for agent in agents:
            agent.wait_ready()
        prometheus.wait_ready()
        victoria.wait_ready()
        for engine, target in zip(ENGINES, (prometheus, victoria), strict=True):
            (tmp / engine).mkdir()
            coords[engine] = Coordinator(tmp / engine, nodes, args=["--remote-write", target.write_url])
            coords[engine].start()
        for coord in coords.values():
            wait_connected(coord, len(NAMES))
        runs, windows = _run(coords, controls, plug)
        sqlite = {}
        for engine, coord in coords.items():
            wait_stored(coord, *agents)
            run_id = runs[engine]["id"]
            status, runs[engine] = coord.call("POST", f"/v1/runs/{run_id}/end")
            assert status == 200, runs[engine]
            status, sqlite[engine] = coord.call("GET", f"/v1/runs/{run_id}/export")
            assert status == 200, sqlite[engine]
        for coord in coords.values():
            wait_sent(coord)
        for coord in coords.values():
            coord.stop()  # graceful: what is queued is sent
        victoria.settle('{__name__=~"sparkwatch_.*"}')
        path = tmp / "windows.json"
        path.write_text(json.dumps({"windows": windows}))
        urls = {"prometheus": prometheus.url, "victoriametrics": victoria.url}
        yield Rig(tmp, urls, {e: sqlite[e]["run"] for e in ENGINES}, sqlite, path)
    finally:
        shelly.stop()
        for coord in coords.values():
            coord.stop()
        for agent in agents:
            agent.stop()
        prometheus.stop()
        victoria.stop()


def export_engine(rig: Rig, engine: str) -> dict[str, Any]:
    """`sparkwatch export --prometheus` over the engine with the same windows and its coordinator's span."""
    run, out = rig.runs[engine], rig.tmp / f"{engine}.json"
    argv = [sys.executable, "-m", "sparkwatch", "export", "--prometheus", rig.urls[engine]]
    argv += ["--windows", str(rig.windows), "-o", str(out)]
    argv += ["--start", str(run["t_start_ns"] / 1e9), "--end", str(run["t_end_ns"] / 1e9)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    export: dict[str, Any] = json.loads(out.read_text())
    jsonschema.validate(export, run_schema())
    return export


def _nodes(export: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in export["nodes"]}


def _window_energy(export: dict[str, Any], wid: str) -> dict[str, float | None]:
    window = next(w for w in export["windows"] if w["id"] == wid)
    return {n["node"]: n["energy_j"] for n in window["nodes"]}


def _reasons(export: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    """Each window's verdict and reasons, printed; a throttle reason without its figure (the fake's SM clock
    falls with its utilisation, so every window holding idle samples is throttled: a TSDB export reads the
    same SM clock and maximum series, and its mean over the window may differ in the last digit where an
    edge sample's ms stamp puts it on the other side). A clock-uncertainty reason is left out: a SQLite
    export's clocks are the agents' probes, and on a loaded machine a round whose 8 probes all took over
    3 ms gives it on the 0.15 s window; a TSDB export has no probes (its stamps are the engine's)."""
    out = {}
    for w in export["windows"]:
        print(f"{export['source']['kind']} {w['id']}: {w['verdict']} {w['reasons']}")
        reasons = [re.sub(r" \(mean [0-9.]+ of", " (mean … of", r) for r in w["reasons"]]
        kept = [r for r in reasons if not r.startswith("clock uncertainty ")]
        # ok where the probes' reason was all that made it low_confidence
        verdict = "ok" if w["verdict"] == "low_confidence" and reasons and not kept else w["verdict"]
        reasons = kept
        # a coverage's last digit likewise (compared as a figure in _compare)
        out[w["id"]] = (verdict, [re.sub(r"coverage [0-9.]+ <", "coverage … <", r) for r in reasons])
    return out


def _signals(export: dict[str, Any]) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Per window and node: the clock event reasons seen, the throttle flags and the hottest reading."""
    out = {}
    for w in export["windows"]:
        for n in w["nodes"]:
            out[(w["id"], n["node"])] = (
                n["clock_event_reasons"],
                [f.split(" (")[0] for f in n["throttle"]],
                n["temperature_c_max"],
            )
    print(export["source"]["kind"], out)
    return out


def _check_clocks(export: dict[str, Any], sqlite: dict[str, Any]) -> None:
    """Each window's SM clock mean and its ratio to the maximum, against SQLite's: equal but for one edge
    sample that a ms stamp puts on the other side (see ``_reasons``), which moves a mean of the window's
    ``n`` samples by at most 1/n of the maximum (0.66 against 0.68 GHz once, in a 3 s window)."""
    lengths_s = {wid: b - a for wid, a, b in WINDOWS}
    ref = {(w["id"], n["node"]): n for w in sqlite["windows"] for n in w["nodes"]}
    for w in export["windows"]:
        edge = INTERVAL_S / lengths_s[w["id"]]  # one sample's share of the window
        for n in w["nodes"]:
            expected = ref[(w["id"], n["node"])]
            ratio, clock = n["sm_clock_ratio"], n["sm_clock_hz_mean"]
            if expected["sm_clock_ratio"] is None or ratio is None:
                assert (ratio, clock) == (expected["sm_clock_ratio"], expected["sm_clock_hz_mean"])
                continue
            where = (w["id"], n["node"])
            top_hz = expected["sm_clock_hz_mean"] / expected["sm_clock_ratio"]  # the GPU's maximum SM clock
            assert ratio == pytest.approx(expected["sm_clock_ratio"], abs=edge), where
            assert clock == pytest.approx(expected["sm_clock_hz_mean"], abs=edge * top_hz), where


def _figures(export: dict[str, Any], walls: bool = True) -> dict[str, dict[str, float | None]]:
    """Per node: gated mean power, GPU energy (node and its one GPU), idle power, and each window's energy;
    the same of its system domain, and (``walls``) of spark-1's wall meter."""
    out: dict[str, dict[str, float | None]] = {}
    for name, node in _nodes(export).items():
        (gpu,) = node["gpus"]
        domains = {d["domain"]: d for d in node["system"]["domains"]}
        expected = ["wall", "sys_total"] if name == WALL_NODE else ["sys_total"]  # the headline first
        assert [d["domain"] for d in node["system"]["domains"]] == expected, node["system"]
        assert node["system"]["headline_domain"] == expected[0], node["system"]
        out[name] = {
            "gated_mean_w": node["power_w"]["gated_mean"],
            "energy_j": node["energy_j"],
            "gpu_energy_j": gpu.get("energy_j"),
            "idle_power_w": node.get("idle_power_w"),
            "energy_above_idle_j": node.get("energy_above_idle_j"),
        }
        for domain in expected if walls else ["sys_total"]:
            part = "system" if domain == "sys_total" else domain
            out[name][f"{part}_gated_mean_w"] = domains[domain]["power_w"]["gated_mean"]
            out[name][f"{part}_energy_j"] = domains[domain]["energy_j"]
        for wid, _, _ in WINDOWS:
            out[name][f"{wid}_energy_j"] = _window_energy(export, wid)[name]
            for domain in expected if walls else ["sys_total"]:
                part = "system" if domain == "sys_total" else domain
                out[name][f"{wid}_{part}_energy_j"] = _window_domain_energy(export, wid, name, domain)
    return out


def _window_wall(export: dict[str, Any], wid: str) -> dict[str, Any]:
    window = next(w for w in export["windows"] if w["id"] == wid)
    entry = next(n for n in window["nodes"] if n["node"] == WALL_NODE)
    wall: dict[str, Any] = next(d for d in entry["system"] if d["domain"] == "wall")
    return wall


def _window_domain_energy(export: dict[str, Any], wid: str, node: str, domain: str) -> float | None:
    window = next(w for w in export["windows"] if w["id"] == wid)
    entry = next(n for n in window["nodes"] if n["node"] == node)
    energy: float | None = next(d for d in entry["system"] if d["domain"] == domain)["energy_j"]
    return energy


def _compare(label: str, ref: dict[str, Any], got: dict[str, Any], walls: bool = True) -> list[str]:
    """Print every figure beside the reference; the ones outside the tolerance, as lines."""
    bad = []
    want, have = _figures(ref, walls), _figures(got, walls)
    assert sorted(want) == sorted(have) == sorted(NAMES)
    compared = {"gated_mean_w", "energy_j", "gpu_energy_j", "idle_power_w", "energy_above_idle_j"}
    compared |= {f"{part}_{figure}" for part in ("system", "wall") for figure in ("gated_mean_w", "energy_j")}
    long_enough = [wid for wid, a, b in WINDOWS if b - a >= 2 * max(INTERVAL_S, METER_S)]
    compared |= {f"{wid}_{part}energy_j" for wid in long_enough for part in ("", "system_", "wall_")}
    for node in NAMES:
        for key, expected in want[node].items():
            value = have[node][key]
            diff = f"{value / expected - 1:+.5%}" if value is not None and expected else "n/a"
            print(f"{label} {node} {key}: {value} vs {expected} ({diff})")
            if key not in compared:
                continue
            if expected is None:  # not every figure needs a number: then neither side may invent one
                assert key in {"idle_power_w", "energy_above_idle_j"} and value is None, (label, node, key)
            elif value is None or value != pytest.approx(expected, rel=TOLERANCE):
                bad.append(f"{label} {node} {key}: {value} vs {expected} ({diff})")
    return bad


@pytest.mark.parametrize("engine", ENGINES)
def test_an_engine_after_remote_write_gives_its_coordinators_sqlite_figures(rig: Rig, engine: str) -> None:
    sqlite = rig.sqlite[engine]
    jsonschema.validate(sqlite, run_schema())
    export = export_engine(rig, engine)
    assert export["source"]["kind"] == engine and sqlite["source"]["kind"] == "sqlite"
    for name, node in _nodes(export).items():
        ref = _nodes(sqlite)[name]
        print(f"{engine} {name}: {node['samples']} vs sqlite {ref['samples']}, sqlite clock {ref['clock']}")
        assert node["samples"]["interval_s"] == pytest.approx(INTERVAL_S, rel=0.05)  # the full rate
        assert node["power_w"]["gated_mean"] is not None and node["energy_j"] is not None
        assert node["energy_method"] == ref["energy_method"] == "counter"
        # the page cache went out with every sample and reads back the same (its meminfo holds still)
        assert ref["memory_page_cache_bytes"]["peak"] is not None
        assert node["memory_page_cache_bytes"] == ref["memory_page_cache_bytes"]
    assert export["source"]["page_cache_series"] == "sparkwatch_memory_page_cache_bytes"
    assert _reasons(export) == _reasons(sqlite)
    assert _signals(export) == _signals(sqlite)
    _check_clocks(export, sqlite)
    wall, ref_wall = (_nodes(e)[WALL_NODE]["system"]["domains"][0] for e in (export, sqlite))
    print(f"{engine} wall: {wall['samples']} vs sqlite {ref_wall['samples']}")
    assert (
        (wall["kind"], wall["source"]) == (ref_wall["kind"], ref_wall["source"]) == ("system", "meter:shelly")
    )
    # every stored reading went out (a ms stamp may put one reading on the other side of a window's edge)
    assert abs(wall["samples"]["count"] - ref_wall["samples"]["count"]) <= 2
    scope_s = WINDOWS[2][2] - WINDOWS[0][1]  # the timed windows cover 2.5 s to 10.5 s
    assert ref_wall["samples"]["count"] >= 0.8 * scope_s / METER_S
    # the plug's outage is a gap in both, between the same readings (an engine's export bridged it)
    covered = [_window_wall(e, "steady")["coverage_ratio"] for e in (export, sqlite)]
    print(f"{engine} steady wall coverage {covered[0]} vs sqlite {covered[1]}")
    assert covered[1] < 0.9 and covered[0] == pytest.approx(covered[1], abs=0.005), covered
    bad = _compare(f"{engine}/sqlite", sqlite, export)
    assert not bad, "\n".join(bad)


def test_the_two_coordinators_sqlite_exports_agree(rig: Rig) -> None:
    """The same agents' samples stored twice: the reference both engines are held to is one figure."""
    bad = _compare(
        "sqlite(victoriametrics)/sqlite(prometheus)",
        rig.sqlite["prometheus"],
        rig.sqlite["victoriametrics"],
        walls=False,  # each coordinator polls the plug at its own moments
    )
    assert not bad, "\n".join(bad)
