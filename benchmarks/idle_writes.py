"""Disk writes of an idle coordinator: two simulated agents at 1 Hz, no run open, the coordinator's
``write_bytes`` (/proc/PID/io) over a span after a warm-up, per stored sample — beside the baseline of one
commit per sample (``Store.ingest`` of one frame a transaction, in this process, the same schema): what a
link that stored every message wrote before idle samples were held (links/stream.py ``IDLE_HOLD_S``).

    python benchmarks/idle_writes.py [--warm 10] [--span 60]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.frames import sample_frame  # noqa: E402
from helpers.processes import AgentProcess, Coordinator, free_port, wait_connected  # noqa: E402
from sparkwatch.store import Store  # noqa: E402

KIB = 1024


def written_bytes(pid: int | str = "self") -> int:
    for line in pathlib.Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    raise SystemExit("no write_bytes in /proc/PID/io")


def commit_per_sample(count: int = 300) -> float:
    """KiB written per sample when each sample is its own transaction."""
    with tempfile.TemporaryDirectory() as folder:
        store = Store(pathlib.Path(folder) / "c.db")
        frames = [sample_frame(seq, {"power_w": 50.0}) for seq in range(1, count + 1)]
        before = written_bytes()
        for frame in frames:
            store.ingest("n1", frame.boot_id, [frame])
        store.close()
        return (written_bytes() - before) / count / KIB


def idle_coordinator(warm_s: float, span_s: float) -> tuple[float, float, int]:
    """KiB per stored sample, KiB/s, samples stored in the span."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sparkwatch-bench-idle-"))
    agents = [
        AgentProcess(["--backend", "sim", "--interval", "1", "--node", name], dict(os.environ), free_port())
        for name in ("n0", "n1")
    ]
    nodes = "".join(f'[nodes.n{i}]\nurl = "ws://127.0.0.1:{a.port}"\n' for i, a in enumerate(agents))
    coordinator = Coordinator(tmp, nodes)
    try:
        for agent in agents:
            agent.wait_ready()
        coordinator.start()
        assert coordinator.proc is not None
        wait_connected(coordinator, len(agents))
        time.sleep(warm_s)
        stored = [sum(n["samples_ingested"] for n in coordinator.call("GET", "/v1/nodes")[1]["nodes"])]
        before = written_bytes(coordinator.proc.pid)
        time.sleep(span_s)
        after = written_bytes(coordinator.proc.pid)
        stored.append(sum(n["samples_ingested"] for n in coordinator.call("GET", "/v1/nodes")[1]["nodes"]))
    finally:
        coordinator.stop()
        for agent in agents:
            agent.stop()
    samples = stored[1] - stored[0]
    return (after - before) / max(samples, 1) / KIB, (after - before) / span_s / KIB, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=float, default=10.0, help="seconds after the links are up (10)")
    parser.add_argument("--span", type=float, default=60.0, help="seconds measured (default 60)")
    args = parser.parse_args()
    baseline = commit_per_sample()
    per_sample, per_s, samples = idle_coordinator(args.warm, args.span)
    print("idle coordinator, 2 sim agents at 1 Hz, no run open")
    print(f"baseline: one commit per sample (Store.ingest)   {baseline:6.1f} KiB/sample   1.00")
    print(
        f"coordinator: {samples} samples in {args.span:g} s            {per_sample:6.1f} KiB/sample"
        f"   {per_sample / baseline:.2f}x   ({per_s:.1f} KiB/s, {per_s * 86400 / KIB / KIB:.2f} GiB a day)"
    )


if __name__ == "__main__":
    main()
