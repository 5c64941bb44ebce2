"""`sparkwatch nodes check`: the verdict rules on their own, then the command against real agents."""

from __future__ import annotations

import http.server
import json
import pathlib
import socket
import subprocess
import sys
import threading
from typing import Any

from helpers.processes import free_port
from sparkwatch.commands.nodes_check import check_cluster, check_engine, check_node, render
from sparkwatch.links.state import LinkState
from sparkwatch.links.stream import StreamIngest
from sparkwatch.store import Store
from sparkwatch.wire import decode_lines
from sparkwatch_agent.hardware.host_facts import STA_UNSYNC, TIME_ERROR, read_time_sync


def field(supported: bool) -> dict[str, Any]:
    return {"supported": supported, "state": "supported" if supported else "unsupported"}


def node(**over: Any) -> dict[str, Any]:
    fields = {"power": True, "energy": True, "utilization": True, "memory_info": False}
    base: dict[str, Any] = {
        "node": "spark-1",
        "connected": True,
        "agent_version": "0.1.0",
        "memory_model": "unified",
        "interval_s": 1.0,
        "clock": {"offset_ns": 2_000_000, "uncertainty_ns": 300_000},
        "capabilities": {
            "gpus": [{"index": 0, "fields": {k: field(v) for k, v in fields.items()}}],
            "host_memory": {"supported": True},
        },
        "hardware": {"backend": "nvml", "host": {"time_sync": {"source": "adjtimex", "synchronized": True}}},
        "error": None,
    }
    base.update(over)
    return base


def test_a_sound_node_passes_with_its_figures() -> None:
    check = check_node(node())
    assert check.problems == [] and check.warnings == []
    assert (check.offset_s, check.uncertainty_s) == (0.002, 0.0003)
    assert check.unsupported == ["memory_info"]
    assert check.time_sync.startswith("synchronized")


def test_what_spoils_a_measurement_is_a_problem() -> None:
    no_util = node()
    no_util["capabilities"]["gpus"][0]["fields"]["utilization"] = field(False)
    assert check_node(no_util).problems == ["GPU utilisation cannot be read, so power cannot be gated on it"]
    fuzzy = check_node(node(clock={"offset_ns": 0, "uncertainty_ns": 25_000_000}))
    assert fuzzy.problems == ["clock uncertainty 25.0 ms > 10 ms"]
    blind = check_node(node(capabilities={"gpus": []}, gpu_reason="LIBRARY_NOT_FOUND: nvmlInit failed"))
    assert blind.problems == ["no GPU is being read (nvml backend: LIBRARY_NOT_FOUND: nvmlInit failed)"]
    down = check_node(node(connected=False, hardware=None, error="ClientConnectorError: refused"))
    assert not down.reachable and down.problems == ["not reachable: ClientConnectorError: refused"]


def test_what_weakens_it_is_a_warning() -> None:
    no_energy = node(hardware={"host": {"time_sync": {"source": "adjtimex", "synchronized": False}}})
    no_energy["capabilities"]["gpus"][0]["fields"]["energy"] = field(False)
    check = check_node(no_energy)
    assert check.problems == []
    assert check.warnings == [
        "no energy counter: energy is integrated from power samples (trapezoid)",
        "kernel clock not synchronized by NTP",
    ]
    mixed = check_cluster([node(), node(node="spark-2", agent_version="0.2.0")])
    assert "agent versions differ across nodes: 0.1.0, 0.2.0" in mixed[0].warnings


def test_time_sync_reads_the_kernel_and_falls_back(tmp_path: pathlib.Path) -> None:
    real = read_time_sync()
    assert real["source"] == "adjtimex" and isinstance(real["synchronized"], bool)

    def unsynced(timex: Any) -> int:
        timex.status = STA_UNSYNC
        return TIME_ERROR

    assert read_time_sync(adjtimex=unsynced)["synchronized"] is False
    (tmp_path / "run/systemd/timesync").mkdir(parents=True)
    (tmp_path / "run/systemd/timesync/synchronized").touch()
    forbidden = read_time_sync(tmp_path, adjtimex=lambda _t: -1)  # as under ProtectClock=yes
    assert forbidden == {
        "source": "timesyncd",
        "synchronized": True,
        "max_error_s": None,
        "est_error_s": None,
    }


def test_the_command_against_real_agents(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--node", "sim-1")
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.sim-1]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    cli = [sys.executable, "-m", "sparkwatch", "nodes", "check", "--nodes", str(nodes)]
    result = subprocess.run([*cli, "--wait", "10", "--json"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    (report,) = json.loads(result.stdout)["nodes"]
    assert report["reachable"] and report["memory_model"] == "unified" and report["ok"]
    assert abs(report["clock_offset_s"]) < 0.005 and report["clock_uncertainty_s"] < 0.005
    assert "memory_info" in report["unsupported"] and "power_limit" in report["unsupported"]
    nodes.write_text(nodes.read_text() + f'[nodes.gone]\nurl = "ws://127.0.0.1:{free_port()}"\n')
    result = subprocess.run([*cli, "--wait", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "PROBLEM gone: not reachable" in result.stdout and "1 of 2 node(s) ready" in result.stdout


def test_a_nodes_meter_is_shown_and_a_silent_one_is_a_problem() -> None:
    meter = {"kind": "shelly", "domain": "wall", "url": "http://plug", "polls": 12, "last_power_w": 61.5}
    good = check_cluster([node(meter={**meter, "error": None})])
    assert good[0].problems == [] and good[0].to_json()["meter"]["last_power_w"] == 61.5
    assert "meter spark-1: shelly wall 61.5 W" in render(good)
    silent = check_node(node(meter={**meter, "error": "no answer within the timeout"}))
    assert silent.problems == [
        "shelly meter at http://plug does not give a reading: no answer within the timeout"
    ]
    unpolled = check_node(node(meter={**meter, "polls": 0, "last_power_w": None, "error": None}))
    assert unpolled.warnings == [] and unpolled.problems == [  # the check waited for a first poll
        "shelly meter at http://plug has not answered yet (its first poll is still waiting)"
    ]


def test_a_meter_that_takes_connections_but_never_answers_is_a_problem(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """A BMC that accepts and then says nothing: the check waits for the meter's first poll (it fails after
    its 2 s timeout) instead of passing the node while the poll is still out."""
    agent = agent_factory("--backend", "sim", "--node", "sim-1")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody reads or writes
        port = silent.getsockname()[1]
        nodes = tmp_path / "nodes.toml"
        nodes.write_text(
            f'[nodes.sim-1]\nurl = "ws://127.0.0.1:{agent.port}"\n'
            f'[nodes.sim-1.meter]\nkind = "redfish"\nurl = "http://127.0.0.1:{port}"\ninterval_s = 0.5\n'
        )
        cli = [sys.executable, "-m", "sparkwatch", "nodes", "check", "--nodes", str(nodes), "--wait", "10"]
        result = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"PROBLEM sim-1: redfish meter at http://127.0.0.1:{port} does not give a reading: no answer within"
        " the timeout"
    ) in result.stdout


def test_the_engine_page_is_checked_with_the_nodes(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    """nodes.toml's [engine]: a page that does not answer is a problem (every window's engine block would
    be empty), one that answers shows its family; before, the check never asked it."""
    agent = agent_factory("--backend", "sim", "--node", "sim-1")
    page = (
        pathlib.Path(__file__).parents[1] / "fixtures" / "engines" / "vllm_v1_openshift_ai.txt"
    ).read_bytes()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    nodes = tmp_path / "nodes.toml"
    cli = [sys.executable, "-m", "sparkwatch", "nodes", "check", "--nodes", str(nodes), "--wait", "10"]
    try:
        for port, ok in ((server.server_port, True), (free_port(), False)):
            nodes.write_text(
                f'[nodes.sim-1]\nurl = "ws://127.0.0.1:{agent.port}"\n[engine]\nurl = "http://127.0.0.1:{port}"\n'
            )
            result = subprocess.run(cli, capture_output=True, text=True, timeout=60)
            said = result.stdout + result.stderr
            if ok:
                assert result.returncode == 0, said
                assert f"engine: vllm /metrics at http://127.0.0.1:{port}/metrics, " in result.stdout, said
            else:
                assert result.returncode == 1, said
                assert f"PROBLEM engine /metrics at http://127.0.0.1:{port}/metrics does not answer: " in said
                assert "1 of 1 node(s) ready" in result.stdout  # the nodes themselves are fine
    finally:
        server.shutdown()
    unknown = {"url": "http://e/metrics", "scrapes": 3, "failures": 0, "family": None, "error": None}
    assert check_engine(unknown) == [
        "engine /metrics at http://e/metrics answers, but with no vLLM or SGLang series (their figures will"
        " be null)"
    ]
    assert check_engine(None) == []


def test_a_far_clock_is_said_to_be_behind_or_ahead_as_it_is() -> None:
    """The offset is what the agent's clock needs added (agent + offset = coordinator): +25 200 s is an
    agent 7 h behind, which the warning read as "+25200.000 s off"."""
    behind = check_node(node(clock={"offset_ns": 25_200 * 10**9, "uncertainty_ns": 300_000}))
    ahead = check_node(node(clock={"offset_ns": -5 * 10**9, "uncertainty_ns": 300_000}))
    assert behind.warnings == ["clock 25200.000 s behind the coordinator's (corrected, but check NTP)"]
    assert ahead.warnings == ["clock 5.000 s ahead of the coordinator's (corrected, but check NTP)"]


def test_lines_the_link_skipped_are_a_warning_that_names_their_reasons(tmp_path: pathlib.Path) -> None:
    """An exec agent whose stdout also carries something else (a login banner, a wrapper's echo) had its
    junk lines counted and logged, but `nodes check` passed it in silence."""
    state = LinkState(node="spark-1", transport="ssh-exec")
    store = Store(tmp_path / "c.db")
    ingest = StreamIngest(store, state)
    _, rejected = decode_lines('Welcome to spark-1!\n{"type": "sample"}\nLast login: today\n')
    for bad in rejected:
        ingest.reject(bad)
    store.close()
    check = check_node(node(frames_rejected=state.to_json(0)["frames_rejected"]))
    assert check.problems == [] and check.warnings == [
        "lines from the agent skipped since the coordinator started: invalid 1, not_json 2 (its log quotes"
        " the first ones; not_json from an exec agent: something else writes to its stdout)"
    ]
    assert check_node(node(frames_rejected={})).warnings == []


def test_a_meter_whose_domain_is_also_an_agent_sensor_is_a_problem() -> None:
    """`domain = "dc_input"` gave the node two domains by one name, the headline pointing at either."""
    meter = {"kind": "redfish", "domain": "dc_input", "url": "http://bmc", "polls": 3, "last_power_w": 100.0}
    clash = node(meter=meter)
    clash["capabilities"]["sensors"] = ["dc_input", "sys_total"]
    assert check_node(clash).problems == [
        "the meter's domain 'dc_input' is also a sensor channel of the agent's: rename the meter's domain in"
        " nodes.toml (wall, by default)"
    ]
    clash["meter"] = {**meter, "domain": "wall"}
    assert check_node(clash).problems == []
