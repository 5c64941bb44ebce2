"""Remote write of stored samples into a real VictoriaMetrics on loopback, next to the coordinator's ingest
of the same samples, measured in the same run.

Frames: the agent's own sampler on the simulated GB10 (with its spbm sensors) at an injected 10 Hz clock,
``--nodes`` nodes × ``--frames`` each. Baseline: the coordinator's ingest path for those frames
(``StreamIngest.feed`` + ``flush``: the wire decoder and ``Store.ingest`` into SQLite, 10 frames per flush as
a 10 Hz link does), CPU seconds per sample. Remote write: the same frames offered to a ``RemoteWriter`` in
the same 10-frame flushes, sent to ``/api/v1/write`` of a real ``victoria-metrics`` (pinned to CPU 1; this
process to CPU 0): wall-clock throughput until every sample is acknowledged, and this process's CPU seconds
per sample (the event loop and the writer's encoding thread together); and the encoding alone (frames →
series → protobuf → snappy, no network). Medians of ``--repeats`` runs.

    python benchmarks/remote_write.py [--nodes 16] [--frames 3000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import orjson

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _agent_frames import sim_frames
from _common import free_port, median
from sparkwatch.coordinator.remote_write.batch import Entry, group
from sparkwatch.coordinator.remote_write.proto import Messages
from sparkwatch.coordinator.remote_write.sender import RemoteWriter
from sparkwatch.coordinator.remote_write.spec import RemoteWriteSpec
from sparkwatch.links.state import LinkState
from sparkwatch.links.stream import StreamIngest
from sparkwatch.store import Store
from sparkwatch.wire import SampleFrame, decode_lines

FLUSH = 10  # frames per link flush at 10 Hz (a link flushes about once a second)
S = 1_000_000_000

Node = tuple[str, dict[str, Any], list[bytes]]


def make_nodes(count: int, frames: int) -> list[Node]:
    t0 = time.time_ns() - 2 * 3600 * S  # in the past, inside the engine's retention
    out = []
    for i in range(count):
        hello, lines = sim_frames(f"bench-{i}", frames, t0)
        out.append((f"bench-{i}", hello, lines))
    return out


def ingest_cpu_per_sample(nodes: list[Node]) -> float:
    """CPU seconds per sample of the coordinator's ingest path (decode + store), no network."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(pathlib.Path(tmp) / "bench.db")
        ingests = []
        for name, hello, _ in nodes:
            ingest = StreamIngest(store, LinkState(node=name, transport="bench"))
            ingest.feed(orjson_line(hello))
            ingests.append(ingest)
        total = 0
        t0 = time.process_time()
        for ingest, (_, _, lines) in zip(ingests, nodes, strict=True):
            for at in range(0, len(lines), FLUSH):
                ingest.feed(b"\n".join(lines[at : at + FLUSH]).decode())
                ingest.flush()
            total += len(lines)
        cpu = time.process_time() - t0
        assert store.count_samples() == total
        store.close()
    return cpu / total


def orjson_line(obj: dict[str, Any]) -> str:
    return orjson.dumps(obj).decode()


def decoded(nodes: list[Node]) -> list[tuple[str, dict[str, Any], list[SampleFrame]]]:
    out = []
    for name, hello, lines in nodes:
        frames, rejected = decode_lines(b"\n".join(lines).decode())
        assert not rejected
        out.append((name, hello, [f for f in frames if isinstance(f, SampleFrame)]))
    return out


def encode_cpu_per_sample(
    nodes: list[tuple[str, dict[str, Any], list[SampleFrame]]], batch: int
) -> tuple[float, int]:
    """CPU seconds per sample of the encoding alone, and the series samples per stored sample."""
    messages = Messages()
    entries = [Entry(n, h, f[at : at + FLUSH]) for n, h, f in nodes for at in range(0, len(f), FLUSH)]
    total = sum(len(e.frames) for e in entries)
    per = batch // FLUSH
    points = 0
    t0 = time.process_time()
    for at in range(0, len(entries), per):
        grouped, _ = group(entries[at : at + per])
        messages.encode(grouped)
        points += sum(len(t) for t, _ in grouped.values())
    return (time.process_time() - t0) / total, points // total


async def remote_write(
    url: str, nodes: list[tuple[str, dict[str, Any], list[SampleFrame]]]
) -> tuple[float, float]:
    """Samples/s until all are acknowledged, and this process's CPU seconds per sample."""
    total = sum(len(f) for _, _, f in nodes)
    writer = RemoteWriter(RemoteWriteSpec(url), capacity=total, batch_wait_s=0.05)
    writer.start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    for at in range(0, max(len(f) for _, _, f in nodes), FLUSH):
        for name, hello, frames in nodes:
            writer.offer(name, hello, frames[at : at + FLUSH])
    while writer.stats.sent < total:
        assert not writer.stats.dropped, writer.stats.dropped
        await asyncio.sleep(0.005)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await writer.stop()
    return total / elapsed, cpu / total


def start_victoria(data: pathlib.Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    binary = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
    proc = subprocess.Popen(
        [binary, f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.sched_setaffinity(proc.pid, {1 % (os.cpu_count() or 1)})
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).read()
            return proc, f"{url}/api/v1/write"
        except OSError:
            time.sleep(0.1)
    raise SystemExit("victoria-metrics did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    nodes = make_nodes(args.nodes, args.frames)
    frames = decoded(nodes)
    total = args.nodes * args.frames
    ingest_cpu, encode_cpu, rates, write_cpu = [], [], [], []
    points = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            ingest_cpu.append(ingest_cpu_per_sample(nodes))
            cpu, points = encode_cpu_per_sample(frames, 500)
            encode_cpu.append(cpu)
            proc, url = start_victoria(pathlib.Path(tmp) / f"vm{r}")  # a fresh engine: no duplicates
            try:
                rate, cpu = asyncio.run(remote_write(url, frames))
            finally:
                proc.terminate()
                proc.wait(10)
            rates.append(rate)
            write_cpu.append(cpu)
    us = 1e6
    print(f"{args.nodes} nodes x {args.frames} GB10 sim frames = {total:,} samples ({points} series each);")
    print(f"medians of {args.repeats} runs, this process on CPU 0, victoria-metrics on CPU 1")
    print(f"baseline ingest (decode + Store.ingest, 10/flush): {median(ingest_cpu) * us:7.1f} us CPU/sample")
    print(
        f"remote write encode only (series+protobuf+snappy): {median(encode_cpu) * us:7.1f} us CPU/sample",
        end="",
    )
    print(f"   ratio {median(encode_cpu) / median(ingest_cpu):.2f}x ingest")
    print(
        f"remote write to victoria-metrics, end to end     : {median(write_cpu) * us:7.1f} us CPU/sample",
        end="",
    )
    print(f"   ratio {median(write_cpu) / median(ingest_cpu):.2f}x ingest")
    print(f"remote write throughput                          : {median(rates):9,.0f} samples/s", end="")
    print(f" ({median(rates) * points:,.0f} series samples/s)")


if __name__ == "__main__":
    main()
