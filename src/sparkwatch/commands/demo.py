"""`sparkwatch demo`: the whole measurement on a simulated N-node GB10 cluster, in one process.

N simulated agents, a coordinator on a temporary SQLite file, a simulated OpenAI-compatible model and the
proxy, all on loopback ports; the model drives every simulated GPU busy while it generates (TP-style: all
nodes at once, each at its own utilisation), 1 warm-up and 3 timed streaming requests go through the
proxy, and the run's export is written and summarised next to what the simulation knows to be true.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from sparkwatch.client import CoordinatorClient
from sparkwatch.commands.embedded import embedded_coordinator
from sparkwatch.commands.interrupts import INTERRUPTED_EXIT_CODE, Interrupts
from sparkwatch.commands.outcome import print_outcome
from sparkwatch.commands.quality import exit_code, judge
from sparkwatch.commands.report_cmd import series_for, write_report_beside
from sparkwatch.commands.sim_drive import COLD_UTIL, MODEL_BYTES_PER_NODE, node_util, warm_util
from sparkwatch.commands.sim_model import SimModel, SimModelSpec, running_sim_model
from sparkwatch.defaults import DEFAULT_INTERVAL_S, DEMO_EXPORT
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.outputs import write_export_or_spare
from sparkwatch.proxy.proxy import ProxyConfig
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sinks import RunPoster
from sparkwatch_agent.assemble import SimGb10, assemble, running_agent
from sparkwatch_agent.config import build_config
from sparkwatch_agent.shared.units import one_decimal

log = logging.getLogger(__name__)


class DemoError(Exception):
    """The demo could not complete its measurement (it says why, in one line)."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    nodes: int = 4
    max_tokens: int = 256
    tokens_per_s: float = 76.0
    warmup: int = 1
    timed: int = 3
    output: Path = Path(DEMO_EXPORT)
    strict: bool = False
    json_out: bool = False
    report: bool = True  # the series block in the export, and EXPORT.report.html beside it
    stderr: TextIO = sys.stderr


@dataclass(frozen=True, slots=True)
class SimAgent:
    name: str
    url: str
    sim: SimGb10


@contextlib.asynccontextmanager
async def sim_agents(count: int) -> AsyncIterator[list[SimAgent]]:
    """`count` simulated GB10 agents (the real agent code, sim backend) on loopback ports."""
    async with contextlib.AsyncExitStack() as stack:
        agents: list[SimAgent] = []
        for i in range(count):
            name = f"spark-{i + 1}"
            # the last of several nodes has no system sensor (a Spark without the spbm driver)
            sensors = count == 1 or i < count - 1
            config = {"node": name, "backend": "sim", "interval": 1.0, "sim_sensors": sensors}
            parts = assemble(build_config(config, {}))
            url = await stack.enter_async_context(running_agent(parts))
            assert parts.sim is not None
            agents.append(SimAgent(name, url.replace("http://", "ws://", 1), parts.sim))
        yield agents


async def _requests(proxy_url: str, opts: DemoOptions, run_id: str) -> None:
    async with aiohttp.ClientSession() as session:
        for i in range(opts.warmup + opts.timed):
            nonce = secrets.token_hex(8)  # a unique prefix: no prefix cache can make a timed request cheap
            body = {
                "model": "sparkwatch-sim-model",
                "messages": [
                    {"role": "user", "content": f"[{run_id} #{i} {nonce}] Describe how power is measured."}
                ],
                "max_tokens": opts.max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with session.post(f"{proxy_url}/v1/chat/completions", json=body) as resp:
                resp.raise_for_status()
                async for _chunk in resp.content.iter_any():
                    pass
            phase = "warm-up" if i < opts.warmup else "timed"
            opts.stderr.write(f"sparkwatch demo: request {i + 1} ({phase}) done\n")
            await asyncio.sleep(0.5)  # idle between requests: visible in the samples, outside every window


def truth(agents: Sequence[SimAgent]) -> list[float]:
    """The GPU power each simulated node draws while a timed request runs."""
    return [a.sim.spec.resident_idle_w + a.sim.spec.busy_slope_w * warm_util(i) for i, a in enumerate(agents)]


def system_truth(agents: Sequence[SimAgent]) -> list[float]:
    """What each simulated node's dc_input reads while a timed request runs (its headline domain)."""
    return [
        (a.sim.spec.sys_base_w + gpu_w + a.sim.spec.sys_cpu_busy_w * warm_util(i)) * a.sim.spec.dc_input_ratio
        for i, (a, gpu_w) in enumerate(zip(agents, truth(agents), strict=True))
    ]


async def run_demo(opts: DemoOptions) -> int:
    """The demo's exit code: 0, 130 after a Ctrl-C (the run still exported), 3 under ``strict`` when the
    measurement is not sound."""
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="sparkwatch-demo-"))  # removed even when a second Ctrl-C quits
    interrupts = Interrupts(opts.stderr, on_force=lambda: _forget(tmp))
    interrupts.install()
    try:  # the handlers stay until the export is written: put back earlier, a late signal lost it
        try:
            async with sim_agents(opts.nodes) as agents:
                for agent in agents:
                    agent.sim.set_load(util_ratio=0.0, model_bytes=MODEL_BYTES_PER_NODE)
                specs = [NodeSpec(name=a.name, url=a.url) for a in agents]
                model = SimModel(SimModelSpec(tokens_per_s=opts.tokens_per_s), on_load=_load_driver(agents))
                coordinator = embedded_coordinator(specs, tmp / "demo.db", kept=False)
                async with coordinator as client, running_sim_model(model) as model_url:
                    export, behind = await _measure(client, model_url, opts, interrupts)
        finally:
            await _forget(tmp)
        return _outcome(opts, export, behind, agents, interrupts=interrupts, t0=t0)
    finally:
        interrupts.remove()


def _outcome(
    opts: DemoOptions,
    export: dict[str, Any],
    behind: list[str],
    agents: Sequence[Any],
    *,
    interrupts: Interrupts,
    t0: float,
) -> int:
    """The export written, the table and the truth beside it printed (not after a stop: the truth is of
    whole timed requests, which a stopped demo did not all make); the exit code."""
    written = write_export_or_spare(opts.output, export, "sparkwatch-demo.json", opts.stderr)
    quality = judge(export, behind, scope_flag=False)  # the demo has no --scope to suggest
    interrupted = interrupts.requested.is_set()
    code = INTERRUPTED_EXIT_CODE if interrupted else exit_code(0, quality, opts.strict)
    print_outcome(
        export, quality, output=written, exit_code=code, interrupted=interrupted, json_out=opts.json_out,
        stdout=sys.stdout, stderr=opts.stderr, notes=[] if interrupted else _truth_notes(agents, export),
    )  # fmt: skip
    opts.stderr.write(f"sparkwatch demo: export written to {written} in {time.monotonic() - t0:.1f} s\n")
    if opts.report:
        write_report_beside(export, written, opts.stderr, said_as="sparkwatch demo")
    return code


async def _forget(tmp: Path) -> None:
    """The demo's database is simulated data: nothing to keep."""
    shutil.rmtree(tmp, ignore_errors=True)


def _truth_notes(agents: Sequence[SimAgent], export: dict[str, Any]) -> list[str]:
    """What the simulation knows to be true, to hold the table against."""
    expected = ", ".join(f"{a.name} {one_decimal(w)} W" for a, w in zip(agents, truth(agents), strict=True))
    system = ", ".join(
        f"{node['node']} {one_decimal(w)} W" if node.get("system") else f"{node['node']} no sensor"
        for node, w in zip(export["nodes"], system_truth(agents), strict=True)
    )
    return [
        f"\nsimulation truth while generating (timed requests): {expected}",
        f"system (dc_input) truth while generating: {system}",
        f"the warm-up request ran at {COLD_UTIL:.0%} utilisation on every node and is excluded",
        *_short_requests(export),
    ]


#: Requests shorter than this many sampling intervals are said to read below the truth.
SHORT_INTERVALS = 20


def _short_requests(export: dict[str, Any]) -> list[str]:
    """Why the figures read below the truth with short requests (`--max-tokens 32`: 3-4 % below): the
    sampling interval at each end of a window holds the load switching on or off, and its power is the
    interval's average."""
    interval_s = float(export["method"]["interval_s"])
    lengths_s = [(w["t_end_ns"] - w["t_start_ns"]) / 1e9 for w in export["windows"] if w["phase"] == "timed"]
    shortest_s = min(lengths_s, default=0.0)
    if interval_s <= 0 or not 0 < shortest_s < SHORT_INTERVALS * interval_s:
        return []
    return [
        f"the timed requests took {shortest_s:.2f} s, {shortest_s / interval_s:.0f} sampling intervals of"
        f" {interval_s:g} s: the interval at each end holds the load switching on or off, so the measured"
        " power reads below the truth (the shorter the requests, the further)"
    ]


async def _measure(
    client: CoordinatorClient, model_url: str, opts: DemoOptions, interrupts: Interrupts
) -> tuple[dict[str, Any], list[str]]:
    """One run: its requests through the proxy (until they end or a Ctrl-C), every window stored, the
    nodes caught up; its export and the nodes that never caught up."""
    run = await client.create_run(f"demo: {opts.nodes}x simulated GB10", interval_s=DEFAULT_INTERVAL_S)
    opts.stderr.write(f"sparkwatch demo: {opts.nodes} simulated GB10 nodes, run {run['id']}\n")
    await client.wait_caught_up(time.time_ns(), timeout_s=10.0, interval_s=DEFAULT_INTERVAL_S)
    poster = RunPoster(client, run["id"], batch_delay_s=0.05)
    poster.start()
    config = ProxyConfig(model_url, warmup=opts.warmup)
    async with running_proxy("127.0.0.1", 0, config, poster, client) as proxy_url:
        try:
            await interrupts.unless_requested(_requests(proxy_url, opts, run["id"]))
        except aiohttp.ClientError as exc:
            raise DemoError(f"a request through the proxy failed: {exc}") from None
    lost = await poster.close()
    if lost:
        raise DemoError(f"{len(lost)} window(s) were not stored: {lost[0].id} first")
    ended = await client.end_run(run["id"])
    # caught up to the end's stamp: to a moment before it, the export could miss the last interval
    behind = await client.wait_caught_up(ended["t_end_ns"] or time.time_ns(), timeout_s=10.0)
    return await client.export(run["id"], series_for(opts.report)), behind


def _load_driver(agents: Sequence[SimAgent]) -> Callable[[str], None]:
    def on_load(level: str) -> None:
        for i, agent in enumerate(agents):
            agent.sim.set_load(util_ratio=node_util(level, i))

    return on_load
