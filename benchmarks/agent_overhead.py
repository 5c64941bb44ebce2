"""CPU and memory of the serving agent at 10 Hz and 100 Hz, next to the floor measured in the same run.

The agent runs the real nvidia-ml-py against the fake GB10 libnvidia-ml.so.1, streams to one WebSocket
client (as to a coordinator during a run) and is scraped every 15 s (as by Prometheus). CPU is
CPU time of all threads (schedstat) over the window; RSS is VmRSS at its end. A last figure fills a ring of
36 000 samples (one hour at 10 Hz) in-process and reports the memory it takes. The floor process has the
same imports and does only the bare reads at the same rate (see FLOOR).

    python benchmarks/agent_overhead.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import urllib.request

import aiohttp

from _common import fake_nvml_dir, free_port


def cpu_s(pid: int) -> float:
    """CPU seconds of all threads, from /proc/PID/task/*/schedstat (ns resolution; /proc/PID/stat counts
    10 ms ticks, too coarse for a process that uses a few ms a second)."""
    total_ns = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        except FileNotFoundError:
            continue  # a thread that ended between listdir and open
    return total_ns / 1e9


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def consume(url: str, seconds: float) -> int:
    frames = 0
    end = time.monotonic() + seconds
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/v1/stream") as ws:
        next_scrape = time.monotonic()
        while (left := end - time.monotonic()) > 0:
            if time.monotonic() >= next_scrape:
                async with session.get(f"{url}/metrics") as r:
                    await r.read()
                next_scrape += 15
            try:
                msg = await ws.receive(timeout=min(left, 1.0))
            except TimeoutError:
                continue
            frames += msg.data.count("\n") + 1
    return frames


#: The floor at the same rate: same imports, the same NVML calls and one /proc/meminfo read per tick in a
#: bare absolute-deadline loop, nothing else (no sample objects, no JSON, no HTTP, no stream). It waits
#: with time.sleep, the cheapest wake-up measured here (the sampler's lock wait costs ~20 µs more).
FLOOR = """
import time
import aiohttp, prometheus_client, psutil, sparkwatch_agent.serving.serve
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
fd = open('/proc/meminfo', 'rb')
interval = INTERVAL
deadline = time.monotonic()
while True:
    pynvml.nvmlDeviceGetPowerUsage(h)
    pynvml.nvmlDeviceGetFieldValues(h, [(186, 0)])[0].value.uiVal
    pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    pynvml.nvmlDeviceGetUtilizationRates(h).gpu
    pynvml.nvmlDeviceGetTemperature(h, 0)
    pynvml.nvmlDeviceGetClockInfo(h, 1)
    sum(p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    fd.seek(0)
    fd.read()
    deadline += interval
    time.sleep(max(0.0, deadline - time.monotonic()))
"""


def measure(interval: float, seconds: float, env: dict[str, str]) -> None:
    port = free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparkwatch_agent",
            "serve",
            "--node",
            "bench",
            "--interval",
            str(interval),
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
        ],
        env=env,
    )
    floor = subprocess.Popen([sys.executable, "-c", FLOOR.replace("INTERVAL", str(interval))], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{url}/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(3)  # warm-up
        a0, i0, t0 = cpu_s(agent.pid), cpu_s(floor.pid), time.monotonic()
        frames = asyncio.run(consume(url, seconds))
        wall = time.monotonic() - t0
        a1, i1 = cpu_s(agent.pid), cpu_s(floor.pid)
        agent_cpu = (a1 - a0) / wall * 100
        floor_cpu = (i1 - i0) / wall * 100
        print(
            f"{1 / interval:5.0f} Hz {wall:5.1f} s  agent CPU {agent_cpu:5.2f} % of a core,"
            f" RSS {rss_mib(agent.pid):5.1f} MiB"
            f"  | floor (bare reads, same rate) CPU {floor_cpu:4.2f} %, RSS {rss_mib(floor.pid):5.1f} MiB"
            f"  | ratio {agent_cpu / floor_cpu if floor_cpu else float('inf'):.2f}x"
            f"  | frames streamed {frames} ({frames / wall:.1f}/s)"
        )
    finally:
        for p in (agent, floor):
            p.terminate()
            p.wait(5)


def ring_memory(env: dict[str, str]) -> None:
    code = """
import ctypes, os, time
from sparkwatch_agent.config import build_config
from sparkwatch_agent.assemble import assemble
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
node = assemble(build_config({'node': 'bench', 'interval': 0.1}, {}))
node.sampler.tick()
before = rss()
for _ in range(35999):
    node.sampler.tick()
after = rss()
print(f"ring of {len(node.sampler.ring)} GB10 samples (1 h at 10 Hz): +{after - before:.1f} MiB,"
      f" process RSS {after:.1f} MiB,"
      f" {(after - before) * 2**20 / len(node.sampler.ring):.0f} B/sample")
"""
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir()), "FAKE_NVML_PROFILE": "gb10"}
    env.pop("FAKE_NVML_CONTROL", None)
    for interval in (0.1, 0.01):
        measure(interval, args.seconds, env)
    ring_memory(env)


if __name__ == "__main__":
    main()
