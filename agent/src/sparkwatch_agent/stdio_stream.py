"""`sparkwatch-agent stream --stdio`: the stream's frames as JSON lines on stdout, for SSH exec mode.

The sampler runs in this process; a writer drains the ring, so a slow pipe delays writing, never
sampling. Interval leases arrive as JSON lines on stdin: ``{"type":"interval","holder":…,
"interval_s":…,"ttl_s":…}`` or ``{"type":"release","holder":…}``.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from typing import BinaryIO, TextIO

from sparkwatch_agent.config import AgentConfig
from sparkwatch_agent.hello import hello_frame
from sparkwatch_agent.host_facts import read_host_facts
from sparkwatch_agent.interval_lease import DEFAULT_TTL_S
from sparkwatch_agent.node import build_node
from sparkwatch_agent.sample import encode_frame, frames_after
from sparkwatch_agent.sampler import Sampler

log = logging.getLogger(__name__)


def _apply_command(sampler: Sampler, line: str) -> None:
    try:
        cmd = json.loads(line)
        if not isinstance(cmd, dict):
            raise ValueError("command must be a JSON object")
        kind = cmd.get("type")
        holder = str(cmd.get("holder") or "stdio")
        if kind == "interval":
            sampler.leases.grant(
                holder, float(cmd["interval_s"]), float(cmd.get("ttl_s", DEFAULT_TTL_S)), time.monotonic_ns()
            )
        elif kind == "release":
            sampler.leases.release(holder)
        else:
            raise ValueError(f"unknown command type {kind!r}")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignored stdin command %r: %s", line[:200], exc)
        return
    sampler.wake()


def _read_commands(sampler: Sampler, stdin: TextIO) -> None:
    for line in stdin:
        if line.strip():
            _apply_command(sampler, line)


def run_stdio(config: AgentConfig, stdout: BinaryIO | None = None, stdin: TextIO | None = None) -> int:
    out = stdout or sys.stdout.buffer
    new_sample = threading.Event()
    stop = threading.Event()
    node = build_node(config, on_sample=lambda _s: new_sample.set())
    sampler = node.sampler
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=_read_commands, args=(sampler, stdin or sys.stdin), daemon=True).start()
    host = read_host_facts()
    sampler.start()
    last, rev = 0, -1
    try:
        while not stop.is_set():
            new_sample.wait(0.5)
            new_sample.clear()
            snap = sampler.snapshot
            if snap.sample is None:
                continue
            lines: list[bytes] = []
            if snap.inventory_rev != rev:
                rev = snap.inventory_rev
                lines.append(
                    encode_frame(hello_frame(snap, host, tuple(s.sensor for s in snap.sample.sensors)))
                )
            while True:
                more, last = frames_after(sampler.ring, last, 500)
                if not more:
                    break
                lines.extend(more)
            if lines:
                out.write(b"\n".join(lines) + b"\n")
                out.flush()
    except BrokenPipeError:
        pass  # the reader went away (SSH channel closed): that is our signal to stop
    finally:
        sampler.stop(timeout_s=1.0)
    return 0
