"""The serving engine's /metrics end to end: a real coordinator (nodes.toml ``[engine]``) with a sim agent
scrapes a loopback server that replays the recorded vLLM page, then the recorded SGLang page, with values
scripted per scrape; runs with windows get engine blocks that match the script, and the token cross-check
notes a run whose windows report 40 % fewer tokens than the engine generated (more than its scrapes
leave open), and not one that agrees."""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import pytest

from helpers.app_thread import AppThread
from helpers.cli import sparkwatch
from helpers.engine_replay import SGLANG, VLLM, EngineReplay, capture, with_values
from helpers.processes import AgentProcess, Coordinator, free_port, wait_connected, wait_stored
from sparkwatch.core.export_schema import run_schema

SCRAPE_S = 0.25
GENERATED_PER_S = 1000.0  # the scripted engine's generation counter grows this fast
S = 1_000_000_000


@dataclass
class Script:
    """The page of each scrape by the engine in play, and the values each served page had."""

    engine: str = "vllm"
    values: list[dict[str, float]] = field(default_factory=list)

    def page(self, elapsed_s: float) -> str:
        k = len(self.values)
        if self.engine == "vllm":
            values = {
                "vllm:generation_tokens_total": GENERATED_PER_S * elapsed_s,
                "vllm:prompt_tokens_total": 400.0 * elapsed_s,
                "vllm:prefix_cache_queries_total": 400.0 * elapsed_s,
                "vllm:prefix_cache_hits_total": 100.0 * elapsed_s,
                "vllm:num_preemptions_total": float(int(elapsed_s)),
                "vllm:num_requests_running": float(1 + k % 4),
                "vllm:num_requests_waiting": float(k % 3),
                "vllm:kv_cache_usage_perc": 0.05 * (k % 10),
            }
            text = with_values(capture(VLLM), values)
        else:
            values = {
                "sglang:generation_tokens_total": 7.557572e06 + GENERATED_PER_S * elapsed_s,
                "sglang:prompt_tokens_total": 8.128902e06 + 800.0 * elapsed_s,
                "sglang:num_running_reqs": float(100 + k % 5),
                "sglang:num_queue_reqs": float(10 * (k % 2)),
                "sglang:token_usage": 0.5 + 0.01 * (k % 5),
                "sglang:cache_hit_rate": 0.1 * (k % 3),
                "sglang:gen_throughput": 480.0,
            }
            text = with_values(capture(SGLANG), values)
        self.values.append(values)
        return text


@dataclass
class Rig:
    coord: Coordinator
    agent: AgentProcess
    replay: EngineReplay
    script: Script


@pytest.fixture
def rig(tmp_path: pathlib.Path) -> Iterator[Rig]:
    script = Script()
    replay = EngineReplay(script.page)
    server = AppThread(replay.app(), free_port())
    server.start()
    assert server.ready.wait(10)
    agent = AgentProcess(
        ["--backend", "sim", "--node", "spark-1", "--interval", "0.1"], dict(os.environ), free_port()
    )
    coord = None
    try:
        agent.wait_ready()
        nodes = (
            f'[engine]\nurl = "http://127.0.0.1:{server.port}"\ninterval_s = {SCRAPE_S}\n'
            f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n'
        )
        (tmp_path / "coordinator").mkdir()
        coord = Coordinator(tmp_path / "coordinator", nodes)
        coord.start()
        wait_connected(coord, 1)
        yield Rig(coord, agent, replay, script)
    finally:
        if coord is not None:
            coord.stop()
        agent.stop()
        server.stop()


def _engine_state(rig: Rig) -> dict[str, Any]:
    status, body = rig.coord.call("GET", "/v1/nodes")
    assert status == 200
    return dict(body["engine"])


def _window(rig: Rig, first: int, last: int, name: str) -> dict[str, Any]:
    """A window from halfway before served scrape ``first`` to halfway after scrape ``last``: the window
    holds scrapes first…last and the one before it."""
    t = [stamp for stamp, _ in rig.replay.served]
    a, b = (t[first - 1] + t[first]) // 2, (t[last] + t[last + 1]) // 2
    tokens = round(GENERATED_PER_S * (b - a) / S)
    return {"id": name, "phase": "timed", "t_start_ns": a, "t_end_ns": b, "completion_tokens": tokens}


def _served_during(rig: Rig, seconds: float) -> tuple[int, int]:
    first = len(rig.replay.served)
    time.sleep(seconds)
    return first, len(rig.replay.served)


def _export(rig: Rig, windows: list[dict[str, Any]], tokens_ratio: float = 1.0) -> dict[str, Any]:
    status, run = rig.coord.call("POST", "/v1/runs", {"name": "engine", "interval_s": 0.1})
    assert status == 201
    scaled = [{**w, "completion_tokens": round(w["completion_tokens"] * tokens_ratio)} for w in windows]
    assert rig.coord.call("POST", f"/v1/runs/{run['id']}/windows", {"windows": scaled})[0] == 201
    assert rig.coord.call("POST", f"/v1/runs/{run['id']}/end")[0] == 200
    status, export = rig.coord.call("GET", f"/v1/runs/{run['id']}/export")
    assert status == 200
    jsonschema.validate(export, run_schema())  # the engine blocks and run.notes as the schema says
    return dict(export)


def _expected_gauges(rig: Rig, first: int, last: int, name: str) -> dict[str, float]:
    seen = [rig.script.values[k][name] for k in range(first - 1, last + 1)]
    return {"mean": pytest.approx(sum(seen) / len(seen), abs=1e-3), "max": max(seen)}


def test_vllm_then_sglang_pages_give_engine_blocks_and_the_token_cross_check(rig: Rig) -> None:
    deadline = time.monotonic() + 10
    while _engine_state(rig)["scrapes"] < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    state = _engine_state(rig)
    assert state["family"] == "vllm" and state["error"] is None and state["interval_s"] == SCRAPE_S
    first, end = _served_during(rig, 3.5)
    windows = [_window(rig, first + 1, first + 6, "w1"), _window(rig, first + 8, end - 3, "w2")]
    wait_stored(rig.coord, rig.agent)
    time.sleep(2 * SCRAPE_S)  # a scrape after the last window's end
    agrees = _export(rig, windows)
    differs = _export(rig, windows, tokens_ratio=0.6)

    w1 = agrees["windows"][0]["engine"]
    assert w1["family"] == "vllm"
    assert w1["running_requests"] == _expected_gauges(rig, first + 1, first + 6, "vllm:num_requests_running")
    assert w1["waiting_requests"] == _expected_gauges(rig, first + 1, first + 6, "vllm:num_requests_waiting")
    kv = _expected_gauges(rig, first + 1, first + 6, "vllm:kv_cache_usage_perc")["max"]
    assert w1["kv_cache_usage_ratio_max"] == pytest.approx(kv, abs=1e-4)
    assert w1["generation_tokens_per_s"] == pytest.approx(GENERATED_PER_S, rel=0.01)
    assert w1["prompt_tokens_per_s"] == pytest.approx(400.0, rel=0.01)
    assert w1["prefix_cache_hit_ratio"] == pytest.approx(0.25, abs=0.003)
    assert w1["sources"]["generation_tokens"] == "vllm:generation_tokens_total"
    assert w1["null_reasons"]["spec_decode_acceptance_ratio"] == "the engine reports no speculative decoding"
    scope = agrees["engine"]
    assert scope["generation_tokens"] == pytest.approx(sum(w["completion_tokens"] for w in windows), rel=0.01)
    assert scope["token_cross_check"]["agrees"] is True and "notes" not in agrees["run"]
    check = differs["engine"]["token_cross_check"]
    assert check["agrees"] is False and check["difference_ratio"] == pytest.approx(1 / 0.6 - 1, abs=0.02)
    (note,) = differs["run"]["notes"]
    assert note.startswith("engine token cross-check") and "beyond 2 %" in note

    rig.script.engine = "sglang"  # the same URL now serves SGLang
    time.sleep(4 * SCRAPE_S)
    first, end = _served_during(rig, 2.5)
    window = _window(rig, first + 1, end - 3, "s1")
    wait_stored(rig.coord, rig.agent)
    time.sleep(2 * SCRAPE_S)
    export = _export(rig, [window])
    s1 = export["windows"][0]["engine"]
    assert s1["family"] == "sglang" and _engine_state(rig)["family"] == "sglang"
    assert s1["running_requests"] == _expected_gauges(rig, first + 1, end - 3, "sglang:num_running_reqs")
    assert s1["waiting_requests"] == _expected_gauges(rig, first + 1, end - 3, "sglang:num_queue_reqs")
    hits = _expected_gauges(rig, first + 1, end - 3, "sglang:cache_hit_rate")["mean"]
    assert s1["prefix_cache_hit_ratio"] == pytest.approx(hits, abs=1e-3)
    assert s1["sources"]["prefix_cache_hit_ratio"] == "sglang:cache_hit_rate"  # no cached-tokens counter
    assert s1["generation_tokens_per_s"] == pytest.approx(GENERATED_PER_S, rel=0.01)  # the counter, not 480
    assert s1["prompt_tokens_per_s"] == pytest.approx(800.0, rel=0.01)
    assert export["engine"]["token_cross_check"]["agrees"] is True and "notes" not in export["run"]


def test_run_engine_metrics_flag_scrapes_the_engine_for_the_embedded_coordinator(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """`sparkwatch run --nodes … --engine-metrics URL -- CMD`: the flag reaches the embedded coordinator, and
    the export's scope carries the vLLM page's figures; without --nodes the flag is refused in one line."""
    replay = EngineReplay(lambda _s: with_values(capture(VLLM), {"vllm:num_requests_running": 3.0}))
    server = AppThread(replay.app(), free_port())
    server.start()
    assert server.ready.wait(10)
    try:
        agent = agent_factory("--backend", "sim", "--node", "n0")
        nodes = tmp_path / "nodes.toml"
        nodes.write_text(f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
        out = tmp_path / "run.json"
        url = f"http://127.0.0.1:{server.port}"
        result = sparkwatch(
            "run", "--nodes", str(nodes), "--engine-metrics", url, "--scope", "run", "-o", str(out),
            "--", "sleep", "3",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        engine = json.loads(out.read_text())["engine"]
        assert engine is not None and replay.served, engine
        assert engine["family"] == "vllm"
        assert engine["running_requests"] == {"mean": 3.0, "max": 3.0}
        refused = sparkwatch("run", "--engine-metrics", url, "--", "true")
        assert refused.returncode == 2 and "--engine-metrics needs --nodes" in refused.stderr
        bad = sparkwatch("run", "--nodes", str(nodes), "--engine-metrics", "ftp://x", "--", "true")
        assert bad.returncode == 2 and "argument --engine-metrics" in bad.stderr
    finally:
        server.stop()
