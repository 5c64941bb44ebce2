"""`run`'s Ctrl-C while the wrapped command is being started: the command runs by then, so the signal must
reach it, or `run` waits out the whole benchmark (CI saw a Ctrl-C sit through a 60 s command)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from typing import Any

import pytest

from sparkwatch.commands.interrupts import Interrupts, signal_group
from sparkwatch.commands.wrapped import run_wrapped


async def _wrapped_with_ctrl_c_during_start(monkeypatch: pytest.MonkeyPatch) -> tuple[int | None, str]:
    real_start = asyncio.create_subprocess_exec

    async def started_then_interrupted(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await real_start(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # handled on the loop before run_wrapped holds the process
        await asyncio.sleep(0.2)
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", started_then_interrupted)
    out = io.StringIO()
    interrupts = Interrupts(out, exit_now=lambda code: pytest.fail(f"quit at once with {code}"))
    interrupts.install()
    try:
        async with asyncio.timeout(15):
            code = await run_wrapped(["sleep", "30"], None, interrupts, io.StringIO())
    finally:
        interrupts.remove()
    assert interrupts.requested.is_set()
    return code, out.getvalue()


def test_a_ctrl_c_while_the_command_starts_reaches_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    code, said = asyncio.run(_wrapped_with_ctrl_c_during_start(monkeypatch))
    assert code == 130  # sleep died of the SIGINT relayed to its group
    assert time.monotonic() - t0 < 10
    assert "sparkwatch: SIGINT: waiting for" in said


async def _started_after_two_signals() -> tuple[int | None, list[int]]:
    quit_with: list[int] = []
    interrupts = Interrupts(io.StringIO(), exit_now=quit_with.append)
    interrupts._on_signal(signal.SIGINT)  # both while the command is being started: no process yet
    interrupts._on_signal(signal.SIGINT)
    await asyncio.sleep(0.1)  # the second's quitting runs (here it only records its exit code)
    # a command that ignores SIGINT, as a benchmark that traps it may
    proc = await asyncio.create_subprocess_exec("sh", "-c", "trap '' INT; sleep 30", process_group=0)
    try:
        interrupts.command_started(proc)
        async with asyncio.timeout(10):
            code = await proc.wait()
    finally:
        signal_group(proc, signal.SIGKILL)  # never left running by a failing test
        await proc.wait()
    return code, quit_with


def test_a_second_signal_while_the_command_starts_kills_it() -> None:
    """The second signal quits at once and must never leave the benchmark running; with no process to kill
    yet, the command started after it and only the first (a SIGINT it may ignore) reached it."""
    code, quit_with = asyncio.run(_started_after_two_signals())
    assert code == -signal.SIGKILL
    assert quit_with == [130]
