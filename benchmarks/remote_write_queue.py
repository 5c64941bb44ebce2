"""The memory a full remote-write queue holds (an engine down for 20 minutes: ``CAPACITY_SAMPLES`` stored
samples waiting), beside the floor no queue of whole frames can go under: the frames' JSON lines alone.

Frames: the agent's own sampler on the simulated GB10 (spbm sensors), decoded by the coordinator's wire
decoder, offered to a ``RemoteWriter`` (not started: nothing is sent) in 10-frame flushes as a 10 Hz link
does, the decoded frames then let go as the link lets them go. Measured by tracemalloc: what is still
allocated once the queue is full, less what was allocated before the frames were made.

    python benchmarks/remote_write_queue.py [--nodes 4]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import pathlib
import sys
import time
import tracemalloc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from _agent_frames import sim_frames
from sparkwatch.coordinator.remote_write.sender import CAPACITY_SAMPLES, RemoteWriter
from sparkwatch.coordinator.remote_write.spec import RemoteWriteSpec
from sparkwatch.wire import decode_lines

FLUSH = 10


async def _filled(nodes: list[tuple[str, dict[str, object], list[bytes]]]) -> tuple[RemoteWriter, int, int]:
    """A writer whose queue holds every frame; the bytes still allocated, and the lines' own."""
    writer = RemoteWriter(RemoteWriteSpec("http://127.0.0.1:9/api/v1/write"))
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    line_bytes = 0
    for name, hello, lines in nodes:
        for at in range(0, len(lines), FLUSH):
            frames, _ = decode_lines(b"\n".join(lines[at : at + FLUSH]).decode())
            line_bytes += sum(sys.getsizeof(frame.raw) for frame in frames)
            writer.offer(name, hello, frames)
            del frames  # the link lets its flush go once the store and the writer have it
    gc.collect()
    return writer, tracemalloc.get_traced_memory()[0] - before, line_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    per_node = CAPACITY_SAMPLES // args.nodes
    t0 = time.time_ns()
    nodes = []
    for i in range(args.nodes):
        hello, lines = sim_frames(f"bench-{i}", per_node, t0)
        nodes.append((f"bench-{i}", hello, lines))
    tracemalloc.start()
    writer, held, lines = asyncio.run(_filled(nodes))
    assert writer.stats.pending == per_node * args.nodes, writer.stats.pending
    count = writer.stats.pending
    print(f"a full remote-write queue: {count} stored samples of {args.nodes} simulated GB10 nodes")
    print(f"  floor (the JSON lines alone): {lines / 2**20:7.1f} MiB  ({lines / count:6.0f} B a sample)")
    print(f"  the queue holds:              {held / 2**20:7.1f} MiB  ({held / count:6.0f} B a sample,"
          f" {held / lines:.2f}x the floor)")  # fmt: skip


if __name__ == "__main__":
    main()
