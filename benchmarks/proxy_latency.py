"""Added latency per streamed chunk: through `sparkwatch proxy` vs straight to the upstream, same run.

An upstream process streams SSE chunks (chat-completion deltas) at a steady rate, each carrying the
monotonic time it was written; the client (this process) notes when each arrives. Streams alternate
direct / proxied so both see the same machine noise. Figures: per-chunk delivery latency p50 and p99 for
each path, and the proxy's added latency (proxied minus direct at the same percentile). The proxy runs as
the real CLI process (`sparkwatch proxy`, windows printed to /dev/null).

    python benchmarks/proxy_latency.py [--streams 20] [--chunks 500] [--rate 200] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request

import aiohttp
import numpy as np

from _common import free_port

UPSTREAM = """
import asyncio, json, sys, time
from aiohttp import web
CHUNKS, RATE = int(sys.argv[2]), float(sys.argv[3])
async def handle(request):
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    start = time.monotonic()
    for i in range(CHUNKS):
        event = {"t": time.monotonic_ns(), "choices": [{"index": 0, "delta": {"content": " tok"}}]}
        await resp.write(b"data: " + json.dumps(event).encode() + b"\\n\\n")
        delay = start + (i + 1) / RATE - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    await resp.write(b"data: [DONE]\\n\\n")
    return resp
app = web.Application()
app.router.add_post("/v1/chat/completions", handle)
app.router.add_get("/v1/models", lambda r: web.json_response({"data": []}))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def proxy_cpu_s(pid: int) -> float:
    """CPU seconds of all the process's threads (schedstat, ns resolution)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def wait_up(url: str) -> None:
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


async def stream(session: aiohttp.ClientSession, url: str) -> list[int]:
    """Delivery latency (ns) of every event of one streamed request."""
    latencies: list[int] = []
    body = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    buffer = b""
    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
        async for chunk in resp.content.iter_any():
            now = time.monotonic_ns()
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                payload = event.removeprefix(b"data: ")
                if payload != b"[DONE]":
                    latencies.append(now - json.loads(payload)["t"])
    return latencies


async def measure(direct: str, proxied: str, streams: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per path, one array of latencies (ms) per stream; the paths alternate stream by stream."""
    by_path: dict[str, list[np.ndarray]] = {"direct": [], "proxied": []}
    async with aiohttp.ClientSession() as session:
        await stream(session, direct)  # warm both paths' connections
        await stream(session, proxied)
        for _ in range(streams):
            by_path["direct"].append(np.array(await stream(session, direct)) / 1e6)
            by_path["proxied"].append(np.array(await stream(session, proxied)) / 1e6)
    return by_path["direct"], by_path["proxied"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=500)
    parser.add_argument("--rate", type=float, default=200.0, help="chunks per second per stream")
    parser.add_argument("--pin", action="store_true", help="proxy on CPU 1, upstream and client on CPU 0")
    args = parser.parse_args()
    pin = args.pin and len(os.sched_getaffinity(0)) >= 2
    if pin:  # the proxy gets a core of its own, as on a serving host; upstream and client share CPU 0
        os.sched_setaffinity(0, {0})
    up_port, proxy_port = free_port(), free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(up_port), str(args.chunks), str(args.rate)]
    )
    proxy = subprocess.Popen(
        [
            sys.executable, "-m", "sparkwatch", "--log-level", "warning", "proxy",
            "--listen", f"127.0.0.1:{proxy_port}", "--upstream", f"http://127.0.0.1:{up_port}",
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    if pin:
        os.sched_setaffinity(proxy.pid, {1})
    direct, proxied = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{proxy_port}"
    try:
        wait_up(direct)
        wait_up(proxied)
        cpu0 = proxy_cpu_s(proxy.pid)
        d_streams, p_streams = asyncio.run(measure(direct, proxied, args.streams))
        proxy_cpu = proxy_cpu_s(proxy.pid) - cpu0
    finally:
        for proc in (proxy, upstream):
            proc.terminate()
            proc.wait(5)
    d, p = np.concatenate(d_streams), np.concatenate(p_streams)
    # a stream pair (direct, then proxied) saw nearly the same machine; the median over pairs of the p99
    # difference is robust to one pair that a neighbour's burst of work happened to hit
    pair_p99 = [
        np.percentile(b, 99) - np.percentile(a, 99) for a, b in zip(d_streams, p_streams, strict=True)
    ]
    d50, d99 = np.percentile(d, [50, 99])
    p50, p99 = np.percentile(p, [50, 99])
    print(
        f"{len(d)} chunks per path, {args.streams} streams x {args.chunks} chunks at {args.rate:g}/s,"
        f" {'proxy pinned to CPU 1, upstream and client to CPU 0' if pin else 'not pinned'}"
    )
    print(f"direct  (baseline) latency p50 {d50:.3f} ms  p99 {d99:.3f} ms")
    print(f"proxied            latency p50 {p50:.3f} ms  p99 {p99:.3f} ms")
    print(f"added by the proxy          p50 {p50 - d50:.3f} ms  p99 {p99 - d99:.3f} ms  (goal p99 <= 1 ms)")
    chunks = sum(len(x) for x in p_streams)
    print(f"proxy process CPU: {proxy_cpu * 1e6 / chunks:.1f} us per proxied chunk (all threads)")
    print(f"added p99, median over {len(pair_p99)} stream pairs: {np.median(pair_p99):.3f} ms")


if __name__ == "__main__":
    main()
