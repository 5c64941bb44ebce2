"""Ingest from 64 agents over loopback WebSockets into SQLite, next to the raw SQLite insert rate.

A server process (pinned to CPU 1) plays 64 agents: each answers /v1/time and replays, on /v1/stream, a ring
of real GB10 sample frames made by the agent's own sampler (sim backend). The coordinator side — 64
``WsLink``s and the ``Store`` — runs in this process pinned to CPU 0, so "one core" is literal. The baseline
inserts the same rows into the same schema with ``executemany`` and no network, JSON or links.

    python benchmarks/ingest.py [--agents 64] [--frames 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import pathlib
import socket
import sqlite3
import tempfile
import time

import aiohttp
from aiohttp import web

from _common import old_row
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.ws_link import WsLink
from sparkwatch.store import Store
from sparkwatch.store.schema import MIGRATIONS
from sparkwatch_agent.assemble import assemble
from sparkwatch_agent.config import build_config
from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.sampling.sample import encode_frame
from sparkwatch_agent.serving.hello import hello_frame


def make_frames(count: int) -> tuple[bytes, list[bytes]]:
    node = assemble(build_config({"node": "bench", "backend": "sim", "ring_size": count + 10}, {}))
    sampler = node.sampler
    frames = []
    for _ in range(count):
        sampler.tick()
    piece = sampler.ring.after(0, count)
    frames = list(piece.frames)
    hello = encode_frame(hello_frame(sampler.snapshot, read_host_facts()))
    sampler.stop()
    return hello, frames


def serve_agents(
    port: int, agents: int, frames_per_agent: int, ready: multiprocessing.synchronize.Event
) -> None:
    os.sched_setaffinity(0, {1 % os.cpu_count()})  # type: ignore[operator]
    hello, frames = make_frames(frames_per_agent)
    boot = json.loads(hello)["boot_id"]

    async def time_probe(_r: web.Request) -> web.Response:
        return web.json_response(
            {"t_wall_ns": time.time_ns(), "t_mono_ns": time.monotonic_ns(), "boot_id": boot}
        )

    async def stream(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(hello.decode())
        after = int(request.query.get("after", "0"))
        for i in range(after, len(frames), 500):
            await ws.send_str(b"\n".join(frames[i : i + 500]).decode())
        async for _msg in ws:
            pass
        return ws

    app = web.Application()
    for i in range(agents):
        app.router.add_get(f"/a{i}/v1/time", time_probe)
        app.router.add_get(f"/a{i}/v1/stream", stream)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def raw_insert_rate(frames: list[bytes], total: int) -> float:
    """Rows/s of plain executemany into the row-per-sample table every issue measured against (schema 1's
    ``samples``, raw frame included, 16 KiB pages, WAL; parsing done beforehand, untimed)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = sqlite3.connect(pathlib.Path(tmp) / "raw.db", isolation_level=None)
        db.execute("PRAGMA page_size=16384")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA wal_autocheckpoint=2048")
        db.executescript(MIGRATIONS[0])
        rows = []
        for n in range(total // len(frames) + 1):
            for raw in frames:
                if len(rows) >= total:
                    break
                rows.append(old_row(f"n{n}", raw.decode()))
        t0 = time.perf_counter()
        for i in range(0, len(rows), 500):
            db.execute("BEGIN")
            db.executemany(
                "INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows[i : i + 500]
            )
            db.execute("COMMIT")
        elapsed = time.perf_counter() - t0
        db.close()
    return len(rows) / elapsed


async def ingest(port: int, agents: int, frames_per_agent: int, db_path: pathlib.Path) -> float:
    store = Store(db_path)
    total = agents * frames_per_agent
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        links = [
            WsLink(
                NodeSpec(name=f"n{i}", url="ws://unused"),
                store,
                session,
                holder="bench",
                desired_interval=lambda: None,
                base_url=f"http://127.0.0.1:{port}/a{i}",
                probes=3,
                probe_every_s=3600,
            )
            for i in range(agents)
        ]
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(link.run()) for link in links]
        while sum(link.state.samples_ingested for link in links) < total:
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - t0
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert store.count_samples() == total, "samples lost"
    store.close()
    return total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--frames", type=int, default=5000)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    server = multiprocessing.Process(
        target=serve_agents, args=(port, args.agents, args.frames, ready), daemon=True
    )
    server.start()
    ready.wait(120)
    os.sched_setaffinity(0, {0})
    total = args.agents * args.frames
    _, frames = make_frames(min(args.frames, 2000))
    raw = raw_insert_rate(frames, total)
    with tempfile.TemporaryDirectory() as tmp:
        rate = asyncio.run(ingest(port, args.agents, args.frames, pathlib.Path(tmp) / "ingest.db"))
    server.terminate()
    print(f"{args.agents} agents x {args.frames} GB10 frames = {total:,} samples; coordinator on one core")
    print(f"baseline raw SQLite executemany (row per sample, batches of 500): {raw:10,.0f} rows/s")
    print(f"coordinator: WebSocket links -> JSON -> Store.ingest       : {rate:10,.0f} samples/s", end="")
    print(f"   ratio {rate / raw:.2f}x")


if __name__ == "__main__":
    main()
