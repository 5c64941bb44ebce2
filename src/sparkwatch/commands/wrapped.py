"""The benchmark command `sparkwatch run` wraps: started in a process group of its own, its stderr passed
through to the user as it comes while JSON status lines are stamped on arrival, and never left running.

CMD gets its own process group so that a Ctrl-C reaches it once, relayed by :class:`Interrupts`, and so
that quitting at once can kill CMD with everything it started. A process outside the terminal's
foreground group that reads the terminal would be stopped (SIGTTIN), so CMD's stdin is ``/dev/null``
when ours is a terminal; a benchmark runs unattended.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

import orjson

from sparkwatch.commands.interrupts import Interrupts, shell_exit_code, signal_group
from sparkwatch.defaults import ENV_COORDINATOR, ENV_RUN_ID, ENV_TOKEN_FILE

log = logging.getLogger(__name__)

#: After CMD exits, how long its stderr may still be read (a background child can hold the pipe open).
TEE_DRAIN_S = 2.0
#: A longer stderr "line" is a progress bar redrawn with \r, not a status line.
MAX_STATUS_LINE_BYTES = 1 << 20


def command_env(run_id: str, coordinator: str | None, token_file: Path | None) -> dict[str, str]:
    """CMD's environment: ours, and the run it is measured in; on a standing ``coordinator`` also where that
    is (and the --token-file given, absolute: CMD may change its directory), so that a benchmark can post
    its own marks (`sparkwatch runs mark "$SPARKWATCH_RUN_ID" NAME begin`). An embedded coordinator (None)
    is not named, nor its token handed over (embedded.py); a standing one's from our environment would
    not hold this run, so it is taken out."""
    env = {**os.environ, ENV_RUN_ID: run_id}
    if coordinator is None:
        return {k: v for k, v in env.items() if k not in (ENV_COORDINATOR, ENV_TOKEN_FILE)}
    env[ENV_COORDINATOR] = coordinator
    if token_file is not None:
        env[ENV_TOKEN_FILE] = str(token_file.absolute())
    return env


async def run_wrapped(
    command: Sequence[str],
    capture: TextIO | None,
    interrupts: Interrupts,
    stderr: TextIO,
    stdout_to_stderr: bool = False,
    *,
    env: Mapping[str, str] | None = None,
    now_ns: Callable[[], int] = time.time_ns,
) -> int | None:
    """Run CMD (in ``env``, else ours) to its end; its exit code (128 + N when signal N ended it, 127 when it
    could not start; None when a Ctrl-C came first and it was never started). ``stdout_to_stderr``: CMD's
    stdout goes to our stderr, so that ours carries nothing but ``--json``'s one object. ``now_ns`` stamps
    the status lines captured."""
    if interrupts.requested.is_set():
        stderr.write("sparkwatch: interrupted before the command started\n")
        return None
    # CMD's stderr goes to a pipe of our own, not asyncio's: asyncio's Process.wait() also waits for its
    # pipes to close, which a background child of CMD holding stderr would put off indefinitely
    read_fd, write_fd = os.pipe() if capture is not None else (-1, -1)
    stdin = subprocess.DEVNULL if sys.stdin is not None and sys.stdin.isatty() else None
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=stdin,
            stdout=sys.stderr.fileno() if stdout_to_stderr else None,
            stderr=write_fd if capture else None,
            process_group=0,
            env=env,
        )
    except OSError as exc:
        if capture is not None:
            os.close(read_fd)
        stderr.write(f"sparkwatch: cannot start {command[0]}: {exc.strerror or exc}\n")
        return 127
    finally:
        if capture is not None:
            os.close(write_fd)
    interrupts.command_started(proc)
    tee, pipe = await _start_tee(read_fd, capture, now_ns) if capture is not None else (None, None)
    try:
        code = await proc.wait()
        if tee is not None:
            try:
                async with asyncio.timeout(TEE_DRAIN_S):
                    await asyncio.shield(tee)
            except TimeoutError:
                log.warning("the command's stderr is still open (a background process?); capture stopped")
    finally:
        if tee is not None and not tee.done():
            tee.cancel()
            await asyncio.gather(tee, return_exceptions=True)
        if pipe is not None:
            pipe.close()
        await _stop(proc)
    return shell_exit_code(code)


async def _start_tee(
    read_fd: int, capture: TextIO, now_ns: Callable[[], int]
) -> tuple[asyncio.Task[None], asyncio.ReadTransport]:
    """CMD's stderr read from ``read_fd`` on the event loop, passed through and captured."""
    reader = asyncio.StreamReader()
    pipe, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    return asyncio.create_task(_tee_status(reader, capture, now_ns)), pipe


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """We are failing while CMD runs: never leave it (nor its group) running. What a CMD that ended by
    itself left in the background is its own business."""
    if proc.returncode is not None:
        return
    signal_group(proc, signal.SIGTERM)
    try:
        async with asyncio.timeout(5):
            await proc.wait()
    except TimeoutError:
        signal_group(proc, signal.SIGKILL)


async def _tee_status(stream: asyncio.StreamReader, capture: TextIO, now_ns: Callable[[], int]) -> None:
    """Pass CMD's stderr through as it comes (progress bars without newlines included) and stamp every
    JSON-object line on arrival into the lmx-status capture."""
    pending = b""
    t_arrival = now_ns()
    while chunk := await stream.read(65536):
        t_arrival = now_ns()
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            _capture_line(line, t_arrival, capture)
        if len(pending) > MAX_STATUS_LINE_BYTES:
            pending = b""  # a progress bar redrawn with \r, not a status line
    _capture_line(pending, t_arrival, capture)


def _capture_line(line: bytes, t_arrival_ns: int, capture: TextIO) -> None:
    if not line.lstrip().startswith(b"{"):
        return
    try:
        status = orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    if isinstance(status, dict):
        capture.write(json.dumps({"t_arrival_ns": t_arrival_ns, "status": status}) + "\n")
