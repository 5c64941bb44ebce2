"""`sparkwatch-agent stream --stdio`: the stream's frames as JSON lines on stdout, for SSH exec mode.

The sampler runs in this process; a writer drains the ring, so a slow pipe delays writing, never
sampling. Commands arrive as JSON lines on stdin: interval leases ``{"type":"interval","holder":…,
"interval_s":…,"ttl_s":…}`` / ``{"type":"release","holder":…}``, and clock probes ``{"type":"time","id":…}``,
answered with a ``time`` frame (agent wall and monotonic ns) ahead of any samples.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
from typing import BinaryIO

from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.sampling.clocks import read_pair
from sparkwatch_agent.sampling.leases import holder_of, lease_asked
from sparkwatch_agent.sampling.sample import encode_frame
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.serving.hello import hello_frame
from sparkwatch_agent.serving.stream_cursor import StreamCursor
from sparkwatch_agent.shared.lifecycle import STOP_SIGNALS, StopPolicy
from sparkwatch_agent.shared.protocol import FRAME_TIME
from sparkwatch_agent.shared.std_streams import EX_IOERR, drop_output
from sparkwatch_agent.shared.strict_text import loads_json

log = logging.getLogger(__name__)
#: What an interval command may hold.
STDIO_LEASE_KEYS = frozenset({"type", "holder", "interval_s", "ttl_s"})


def _apply_command(
    sampler: Sampler, line: str, replies: queue.SimpleQueue[bytes], wake: threading.Event
) -> None:
    try:
        cmd = loads_json(line, unique_keys=True)
        if not isinstance(cmd, dict):
            raise ValueError("command must be a JSON object")
        kind = cmd.get("type")
        if kind == "interval":  # read as PUT /v1/interval reads its body; the holder "stdio" unless named
            holder, interval_s, ttl_s = lease_asked(cmd, STDIO_LEASE_KEYS, holder="stdio")
            sampler.leases.grant(holder, interval_s, ttl_s, time.monotonic_ns())
        elif kind == "release":
            sampler.leases.release(holder_of(cmd, holder="stdio"))
        elif kind == FRAME_TIME:  # a clock probe: stamped on arrival, answered ahead of any samples
            t_wall_ns, t_mono_ns = read_pair(time.time_ns, time.monotonic_ns)
            reply = {
                "type": FRAME_TIME,
                "id": cmd.get("id"),
                "t_wall_ns": t_wall_ns,
                "t_mono_ns": t_mono_ns,
                "boot_id": sampler.boot_id,
            }
            replies.put(encode_frame(reply))
            wake.set()
            return
        else:
            raise ValueError(f"unknown command type {kind!r}")
    except Exception as exc:  # any bad line is ignored: the reader thread must survive it
        log.warning("ignored stdin command %r: %s", line[:200], exc)
        return
    sampler.wake()


#: The longest command line read; a longer one is dropped whole (its tail was once applied as a command).
MAX_COMMAND_BYTES = 65536


def _read_commands(
    sampler: Sampler, stdin_fd: int, replies: queue.SimpleQueue[bytes], wake: threading.Event
) -> None:
    """Read command lines from the raw descriptor: a daemon thread blocked inside a buffered reader would
    abort the interpreter at exit (it holds the buffer's lock)."""
    pending, overlong = b"", False  # overlong: inside a line past MAX_COMMAND_BYTES, dropped to its end
    while True:
        try:
            chunk = os.read(stdin_fd, 65536)
        except OSError:
            return  # no usable stdin: the stream still runs, just without commands
        if not chunk:
            return
        *lines, pending = (pending + chunk).split(b"\n")
        if overlong and lines:  # the first is the end of the line too long: not a command, nor its tail
            lines, overlong = lines[1:], False
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").strip() if len(raw) <= MAX_COMMAND_BYTES else ""
            if line:
                _apply_command(sampler, line, replies, wake)
            elif raw.strip():  # whole in this read, or ended in it: too long all the same
                _said_too_long()
        if len(pending) > MAX_COMMAND_BYTES:  # not held: it would grow without end
            if not overlong:
                _said_too_long()
            pending, overlong = b"", True


def _said_too_long() -> None:
    log.warning("ignored a stdin line over %d bytes: no command is that long", MAX_COMMAND_BYTES)


class _Unwritable(Exception):
    """stdout took no more of the stream (a full disk); the message is the OS's reason."""


def run_stdio(sampler: Sampler, stdout: BinaryIO | None = None, stdin_fd: int | None = None) -> int:
    """Run ``sampler`` (not started) and write its stream until stdout closes or a signal stops it."""
    out = stdout or sys.stdout.buffer
    wake = threading.Event()  # set after every capture (the sampler's tick hook) and by stdin commands
    stop = threading.Event()
    # Frames go out right after their tick, as a reader of a live stream expects: this writer wakes per
    # capture and settles it (the WebSocket stream instead polls once a second).
    sampler.set_tick_hook(wake.set)

    def first_stop(_why: str) -> None:
        stop.set()
        wake.set()

    StopPolicy(first_stop).install_plain(STOP_SIGNALS)
    fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
    replies: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    threading.Thread(target=_read_commands, args=(sampler, fd, replies, wake), daemon=True).start()

    def hello(snap: Snapshot) -> bytes:
        return encode_frame(hello_frame(snap, read_host_facts()))

    cursor = StreamCursor(0, -1)  # -1: no hello sent yet

    def write_pending() -> None:
        lines: list[bytes] = []
        while not replies.empty():
            lines.append(replies.get())
        if sampler.snapshot.sample is not None:
            while more := cursor.next_lines(sampler, 500, hello):
                lines.extend(more)
        if lines:
            try:
                out.write(b"\n".join(lines) + b"\n")
                out.flush()
            except BrokenPipeError:
                raise
            except OSError as exc:  # only the writes: a read error elsewhere is no full disk
                raise _Unwritable(exc.strerror or str(exc)) from exc

    sampler.start()
    try:
        while not stop.is_set():
            wake.wait(0.5)
            wake.clear()
            write_pending()
        sampler.stop(timeout_s=1.0)
        write_pending()  # what was captured before the stop still goes out
    except BrokenPipeError:
        pass  # the reader went away (SSH channel closed): that is our signal to stop
    except _Unwritable as exc:  # `> /dev/full`: one line, not a traceback
        with contextlib.suppress(OSError, ValueError):  # an injected stream may have no descriptor
            drop_output(out.fileno())
        log.error("cannot write the stream to stdout: %s; stopping", exc)
        return EX_IOERR
    finally:
        sampler.stop(timeout_s=1.0)
    return 0
