"""A short run scraped every 1 s by a real Prometheus, its agent idle at its default 1 s around it: the
deployment fleets.md describes, and what a new user's trial read as `coverage 0.000`. The idle scrapes
before and after the run (at the agent's own 1 s by their spacing) outvoted the run's, which were then
judged against the 0.1 s the agent sampled the run at: every one a gap, on one node soon after the run and
on both two minutes later, as the read's idle tail grew."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.request

import pytest

from helpers.processes import AgentProcess, free_port, sim_load
from helpers.prometheus import PROMETHEUS, Prometheus

#: Scrapes of the idle agent before the run: more than the run's own, as in the trial (a read's lead is
#: 15 s before the first window, and an engine has months before it).
IDLE_LEAD_S = 14.0
RUN_S = 8.0
S = 1_000_000_000


def _lease(agent: AgentProcess, interval_s: float | None) -> None:
    """Take (or with None release) an interval lease on the agent, as a coordinator's run does."""
    if interval_s is None:
        req = urllib.request.Request(f"{agent.url}/v1/interval?holder=test", method="DELETE")
    else:
        body = json.dumps({"holder": "test", "interval_s": interval_s}).encode()
        req = urllib.request.Request(
            f"{agent.url}/v1/interval", data=body, method="PUT", headers={"Content-Type": "application/json"}
        )
    urllib.request.urlopen(req, timeout=5).read()


def _scraped_up_to(prom: Prometheus, t_s: float, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        newest = prom.query("timestamp(sparkwatch_gpu_power_watts)")
        if newest and float(newest[0]["value"][1]) > t_s:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape past {t_s}")


def test_a_short_runs_scrapes_are_not_gaps_when_the_idle_agent_matched_the_scrape_rate(
    tmp_path: pathlib.Path,
) -> None:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail("prometheus missing: install the Debian package prometheus (.ci/run does)")
    agent = AgentProcess(["--backend", "sim", "--node", "spark-1"], dict(os.environ), free_port())  # 1 s idle
    prom: Prometheus | None = None
    try:
        agent.wait_ready()
        config = tmp_path / "scrape.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n"
            f"  - job_name: agents\n    static_configs:\n      - targets: ['127.0.0.1:{agent.port}']\n"
        )
        prom = Prometheus(config, tmp_path / "prom", tmp_path / "prometheus.log")
        prom.wait_ready()
        _scraped_up_to(prom, time.time() + IDLE_LEAD_S, timeout_s=IDLE_LEAD_S + 10)
        _lease(agent, 0.1)
        sim_load(agent, 0.8)
        t0 = time.time_ns()
        time.sleep(RUN_S)
        t1 = time.time_ns()
        sim_load(agent, 0.0)
        _lease(agent, None)
        _scraped_up_to(prom, time.time() + 3.0)
        windows = tmp_path / "windows.json"
        window = {"id": "run", "phase": "timed", "t_start_ns": t0 + S, "t_end_ns": t1 - S}
        windows.write_text(json.dumps({"windows": [window]}))
        out = tmp_path / "export.json"
        argv = ["export", "--prometheus", prom.url, "--windows", str(windows), "-o", str(out)]
        argv += ["--start", str(t0 / S), "--end", str(t1 / S)]
        done = subprocess.run(
            [sys.executable, "-m", "sparkwatch", *argv], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        export = json.loads(out.read_text())
    finally:
        if prom is not None:
            prom.stop()
        agent.stop()
    (node,) = export["nodes"]
    assert node["samples"]["interval_s"] == pytest.approx(1.0, abs=0.1), node["samples"]  # the scrapes'
    assert node["samples"]["coverage_ratio"] > 0.95, node  # was 0.000: every scrape a gap against 0.1 s
    assert node["power_w"]["gated_mean"] is not None and node["energy_j"] > 0, node
    (judged,) = export["windows"]
    assert judged["verdict"] != "incomplete", judged
