"""How long the coordinator's event loop stalls while windows are posted and a large run is exported.

A real coordinator process collects from two sim agents (10 Hz). A prober thread in this process asks its
``/healthz`` every 20 ms and records each answer's latency: while the loop is stalled, that latency grows
by the stall. The baseline is the same prober against the same coordinator doing nothing else, measured in
the same run. Workloads: 100 000 windows posted in ten batches of 10 000 (what ``sparkwatch import``
sends), one POST of 100 000 windows, and the export of a run holding ``--export-windows`` windows. Where
the coordinator exports ``sparkwatch_coordinator_event_loop_lag_seconds`` (its own measurement), its
quantiles over each phase are printed too.

    python benchmarks/loop_lag.py [--export-windows 500000]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import free_port, median, percentile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from helpers.processes import AgentProcess, Coordinator, wait_connected

BATCH = 10_000


class Prober:
    """GET /healthz every ``every_s`` in a thread; latencies in ms, each with its start time."""

    def __init__(self, url: str, every_s: float = 0.02) -> None:
        self._url = url + "/healthz"
        self._every_s = every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self._url, timeout=60) as r:
                    r.read()
            except OSError:
                pass
            self.samples.append((start, (time.monotonic() - start) * 1000))
            self._stop.wait(max(0.0, self._every_s - (time.monotonic() - start)))

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t0: float, t1: float) -> list[float]:
        return [ms for start, ms in self.samples if t0 <= start <= t1]


def windows(prefix: str, count: int, t0_ns: int) -> list[dict[str, Any]]:
    step = 10_000_000
    return [
        {
            "id": f"{prefix}-{i:07d}",
            "phase": "timed",
            "t_start_ns": t0_ns + i * step // 4,
            "t_end_ns": t0_ns + i * step // 4 + step,
            "prompt_tokens": 100,
            "completion_tokens": 50,
        }
        for i in range(count)
    ]


def encoded(batch: list[dict[str, Any]]) -> bytes:
    return json.dumps({"windows": batch}).encode()


def lag_histogram(coord: Coordinator) -> dict[float, float] | None:
    """The coordinator's own loop-lag histogram (cumulative bucket counts), if it has one."""
    with urllib.request.urlopen(coord.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    buckets = re.findall(
        r'^sparkwatch_coordinator_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', text, re.M
    )
    return {float(le): float(n) for le, n in buckets} or None


def quantile_from(before: dict[float, float], after: dict[float, float], q: float) -> float:
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1]
    for le, n in counts:
        if total and n >= q * total:
            return le
    return float("nan")


def poster(coord: Coordinator) -> Callable[[str, Any], tuple[int, Any]]:
    """POST JSON with the coordinator's token and a timeout long enough for the largest batch; a body given
    as bytes is sent as it is (encode before a phase starts: encoding 25 MB holds this process's GIL, and
    the prober's thread with it)."""
    token = coord.token.read_text()

    def post(path: str, body: Any) -> tuple[int, Any]:
        request = urllib.request.Request(
            coord.url + path,
            data=body if isinstance(body, bytes) else json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=600) as r:
            return r.status, json.loads(r.read())

    return post


@contextmanager
def phase(name: str, prober: Prober, coord: Coordinator, rows: list[str]) -> Iterator[None]:
    hist0 = lag_histogram(coord)
    t0 = time.monotonic()
    yield
    t1 = time.monotonic()
    hist1 = lag_histogram(coord)
    lat = prober.between(t0, t1)
    own = ""
    if hist0 is not None and hist1 is not None:
        own = f"  own gauge p99 <= {quantile_from(hist0, hist1, 0.99) * 1000:g} ms"
    rows.append(
        f"{name:<34} {t1 - t0:7.1f} s  probes {len(lat):5d}  /healthz ms: median {median(lat):7.1f}"
        f"  p99 {percentile(lat, 99):8.1f}  max {max(lat):8.1f}{own}"
    )
    print(rows[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export-windows", type=int, default=500_000)
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sparkwatch-looplag-"))
    env = dict(os.environ)
    agents = [AgentProcess(["--backend", "sim", "--node", f"n{i}"], env, free_port()) for i in (1, 2)]
    for agent in agents:
        agent.wait_ready()
    coord = Coordinator(
        tmp, "".join(f'[nodes.n{i}]\nurl = "ws://127.0.0.1:{a.port}"\n' for i, a in enumerate(agents, 1))
    )
    coord.start()
    rows: list[str] = []
    try:
        wait_connected(coord, 2)
        post = poster(coord)
        _, run = post("/v1/runs", {"name": "loop-lag"})
        t0_ns = run["t_start_ns"]
        with Prober(coord.url) as prober:
            with phase("idle (baseline)", prober, coord, rows):
                time.sleep(10)
            batches = [encoded(windows(f"a{b}", BATCH, t0_ns)) for b in range(10)]
            with phase("100k windows, 10 POSTs of 10k", prober, coord, rows):
                for body in batches:
                    assert post(f"/v1/runs/{run['id']}/windows", body)[0] == 201
            body = encoded(windows("b", 100_000, t0_ns))
            with phase("100k windows, one POST", prober, coord, rows):
                assert post(f"/v1/runs/{run['id']}/windows", body)[0] == 201
            more = args.export_windows - 200_000
            for b in range(0, more, 100_000):
                post(
                    f"/v1/runs/{run['id']}/windows",
                    {"windows": windows(f"c{b}", min(100_000, more - b), t0_ns)},
                )
            post(f"/v1/runs/{run['id']}/end", {})
            with phase(f"export of {args.export_windows // 1000}k windows", prober, coord, rows):
                request = urllib.request.Request(
                    f"{coord.url}/v1/runs/{run['id']}/export",
                    headers={"Authorization": f"Bearer {coord.token.read_text()}"},
                )
                with urllib.request.urlopen(request, timeout=600) as r:
                    size = len(r.read())
            print(f"export size {size / 1e6:.1f} MB", flush=True)
    finally:
        coord.stop()
        for agent in agents:
            agent.stop()
    print(json.dumps({"command": "python benchmarks/loop_lag.py", "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
