"""`sparkwatch import` of a large harness file into a run of a real coordinator (one sim agent), beside the
floor every import pays first: the same file read and checked by its importer alone (``read_windows`` in a
fresh process), interleaved in the same run, medians. The file is `plain` CSV, every window inside the run.

    python benchmarks/import_windows.py [--windows 150000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

TOKEN = "bench-token-0123456789abcdef"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            _call(url, "GET", "/healthz")
            return
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"{url} exited") from None
            time.sleep(0.1)
    raise SystemExit(f"{url} never answered")


def _csv(path: pathlib.Path, count: int) -> None:
    t0 = time.time_ns()
    lines = ["id,phase,t_start_ns,t_end_ns,completion_tokens"]
    lines += [f"req-{i},timed,{t0 + i * 10**4},{t0 + i * 10**4 + 10**8},7" for i in range(count)]
    path.write_text("\n".join(lines) + "\n")


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:5])}: exit {done.returncode}: {done.stderr.strip()}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sparkwatch-bench-import-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    agent_port, coord_port = _port(), _port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "sparkwatch_agent", "serve", "--backend", "sim", "--node", "n0",
         "--listen", f"127.0.0.1:{agent_port}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    (tmp / "nodes.toml").write_text(f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent_port}"\n')
    (tmp / "token").write_text(TOKEN)
    (tmp / "token").chmod(0o600)
    coord = subprocess.Popen(
        [sys.executable, "-m", "sparkwatch", "coordinator", "--nodes", str(tmp / "nodes.toml"),
         "--db", str(tmp / "c.db"), "--listen", f"127.0.0.1:{coord_port}",
         "--token-file", str(tmp / "token")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{coord_port}"
    client_env = env | {"SPARKWATCH_COORDINATOR": url, "SPARKWATCH_TOKEN_FILE": str(tmp / "token")}
    imports, floors = [], []
    try:
        _wait_up(f"http://127.0.0.1:{agent_port}", agent)
        _wait_up(url, coord)
        for _ in range(args.rounds):
            run = _call(url, "POST", "/v1/runs", {"name": "import bench"})
            time.sleep(0.01)
            csv = tmp / "w.csv"
            _csv(csv, args.windows)
            floor = "import pathlib, sys; from sparkwatch.importers import read_windows as r"
            floor += f"; sum(1 for _ in r('plain', pathlib.Path({str(csv)!r})))"  # read as they go
            floors.append(_timed([sys.executable, "-c", floor], env))
            cli = [sys.executable, "-m", "sparkwatch", "import", "plain", str(csv), "--run", run["id"]]
            imports.append(_timed(cli, client_env))
            _call(url, "POST", f"/v1/runs/{run['id']}/end")
    finally:
        for proc in (coord, agent):
            proc.terminate()
            proc.wait(10)
    imp, floor_s = statistics.median(imports), statistics.median(floors)
    print(f"{args.windows} plain windows, medians of {args.rounds} rounds")
    print(f"  floor (read and check the file):   {floor_s:7.2f} s")
    print(f"  sparkwatch import into a run:      {imp:7.2f} s  ({imp / floor_s:.2f}x the floor,"
          f" {args.windows / imp:,.0f} windows/s)")  # fmt: skip


if __name__ == "__main__":
    main()
