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

from sparkwatch.commands.interrupts import Interrupts
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
