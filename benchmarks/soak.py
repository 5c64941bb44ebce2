"""Soak: many sim agents at 100 Hz into one coordinator for minutes, through a cut link and a kill -9.

``--agents`` real ``sparkwatch-agent serve --backend sim --interval 0.01`` processes stream through a TCP
relay in this process to one real coordinator process. After a warm-up the relay cuts every link for
``--cut-s`` seconds; inside the cut the coordinator is killed with SIGKILL and started again. Printed: the
restarted coordinator's RSS from the end of its warm-up (the baseline, measured in the same run) to the end
(flat is the goal), its event-loop lag p50/p99 from its own histogram over the same span, and the samples
stored against the seqs the agents made (0 lost is the goal: every seq from 1 to the last, no gap).

    python benchmarks/soak.py [--agents 16] [--minutes 10] [--cut-s 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import re
import sqlite3
import sys
import tempfile
import threading
import time
import urllib.request

from _common import free_port

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from helpers.processes import AgentProcess, Coordinator, wait_connected


class Relay:
    """Loopback TCP relays, one per agent, in a thread of their own; ``cut()`` closes every connection
    and refuses new ones until ``restore()``."""

    def __init__(self, targets: list[int]) -> None:
        self.targets = targets
        self.ports = [free_port() for _ in targets]
        self._open = True
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            for port, target in zip(self.ports, self.targets, strict=True):
                await asyncio.start_server(lambda r, w, t=target: self._pipe(r, w, t), "127.0.0.1", port)
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: int) -> None:
        if not self._open:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        self._writers -= {writer, up_writer}

    def cut(self) -> None:
        def close_all() -> None:
            self._open = False
            for w in list(self._writers):
                w.close()

        self._loop.call_soon_threadsafe(close_all)

    def restore(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self, "_open", True)


def rss_mib(pid: int) -> float:
    text = pathlib.Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


def lag_buckets(coord: Coordinator) -> dict[float, float]:
    with urllib.request.urlopen(coord.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    found = re.findall(
        r'^sparkwatch_coordinator_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', text, re.M
    )
    return {float(le): float(n) for le, n in found}


def quantile(buckets: dict[float, float], q: float) -> float:
    ordered = sorted(buckets.items())
    total = ordered[-1][1] if ordered else 0.0
    return next((le for le, n in ordered if total and n >= q * total), float("nan"))


def losses(db_path: pathlib.Path) -> list[tuple[str, int, int, int, int]]:
    """(node, first seq, last seq, stored, gaps recorded) per node and boot."""
    with sqlite3.connect(db_path, timeout=30) as db:
        rows = db.execute(
            "SELECT node, MIN(seq), MAX(seq), COUNT(*) FROM samples GROUP BY node, boot_id"
        ).fetchall()
        gaps = dict(db.execute("SELECT node, COUNT(*) FROM gaps GROUP BY node").fetchall())
    return [(n, lo, hi, count, int(gaps.get(n, 0))) for n, lo, hi, count in sorted(rows)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--cut-s", type=float, default=30.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sparkwatch-soak-"))
    env = dict(os.environ)
    agents = [
        AgentProcess(["--backend", "sim", "--node", f"n{i:02d}", "--interval", "0.01"], env, free_port())
        for i in range(args.agents)
    ]
    for agent in agents:
        agent.wait_ready()
    relay = Relay([a.port for a in agents])
    nodes = "".join(f'[nodes.n{i:02d}]\nurl = "ws://127.0.0.1:{p}"\n' for i, p in enumerate(relay.ports))
    coord = Coordinator(tmp, nodes)
    coord.start()
    assert coord.proc is not None
    rss: list[tuple[float, float]] = []
    t0 = time.monotonic()
    try:
        wait_connected(coord, args.agents, timeout_s=60)
        time.sleep(args.warmup_s)
        relay.cut()  # every link down; inside the cut the coordinator dies and comes back
        time.sleep(args.cut_s / 3)
        coord.kill9()
        coord.start()
        time.sleep(args.cut_s * 2 / 3)
        relay.restore()
        print(
            f"cut {args.cut_s:g} s with a kill -9 inside, restored at {time.monotonic() - t0:.0f} s",
            flush=True,
        )
        time.sleep(args.warmup_s)  # the new process catches up from the agents' rings and warms up
        lag0, warm_rss = lag_buckets(coord), rss_mib(coord.proc.pid)
        print(f"baseline at {time.monotonic() - t0:.0f} s: RSS {warm_rss:.1f} MiB", flush=True)
        while (now := time.monotonic()) < t0 + args.minutes * 60:
            rss.append((now - t0, rss_mib(coord.proc.pid)))
            time.sleep(5)
        wait_connected(coord, args.agents, timeout_s=120)
        time.sleep(5)  # the last batches land
        lag1 = lag_buckets(coord)
        end_rss = rss_mib(coord.proc.pid)
    finally:
        coord.stop()
        for agent in agents:
            agent.stop()
    delta = {le: lag1[le] - lag0.get(le, 0.0) for le in lag1}
    per_node = losses(coord.db)
    lost = sum(hi - lo + 1 - count for _, lo, hi, count, _ in per_node)
    gaps = sum(g for *_, g in per_node)
    first_seq_not_1 = [n for n, lo, *_ in per_node if lo != 1]
    result = {
        "command": " ".join(["python benchmarks/soak.py", *sys.argv[1:]]),
        "agents": args.agents,
        "minutes": args.minutes,
        "rss_mib_after_warmup": round(warm_rss, 1),
        "rss_mib_at_end": round(end_rss, 1),
        "rss_mib_max_after_warmup": round(max(m for _, m in rss), 1) if rss else None,
        "rss_mib_series": " ".join(f"{t:.0f}s:{m:.1f}" for t, m in rss[:: max(1, len(rss) // 20)]),
        "loop_lag_p50_le_s": quantile(delta, 0.5),
        "loop_lag_p99_le_s": quantile(delta, 0.99),
        "loop_lag_observations": delta.get(float("inf"), 0.0),
        "samples_stored": sum(c for *_, c, _ in per_node),
        "samples_lost": lost,
        "gaps_recorded": gaps,
        "nodes_not_from_seq_1": first_seq_not_1,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
