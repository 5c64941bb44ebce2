"""`runs mark … end` dates its window's end back by how long it has run, from before its imports: its
start-up (0.45-0.6 s) came after the step it closes had ended."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Any

import pytest

from sparkwatch.client import CoordinatorError
from sparkwatch.commands import runs

S = 1_000_000_000


def test_a_process_a_shell_execs_into_counts_from_its_exec_not_the_shells_fork() -> None:
    """bash runs a `-c` list's last command in its own process (exec, no fork): the kernel's start time of
    the process was the shell's, 1 s and the steps before it earlier, which dated a mark's end past its
    begin (a 400, the window lost) or, clamped, a minute short."""
    probe = "import time, sparkwatch; print(time.monotonic_ns() - sparkwatch.STARTED_MONO_NS)"
    shell = f"sleep 1; exec {sys.executable} -c '{probe}'"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout) < 0.5 * S  # its own imports' time, not the second before the exec


class OldCoordinator:
    """A coordinator from before ``age_ns``: its strict body refuses the key (400), takes the end without."""

    def __init__(self) -> None:
        self.asked: list[int | None] = []

    async def mark(
        self, run_id: str, name: str, event: str, phase: str | None, age_ns: int | None = None
    ) -> Any:
        self.asked.append(age_ns)
        if age_ns is not None:
            said = 'POST …/marks: HTTP 400: {"loc": "age_ns", "msg": "Extra inputs are not permitted"}'
            raise CoordinatorError(said, 400, "invalid_body")
        return {"name": name, "t_start_ns": 0, "t_end_ns": 2 * S}


async def test_an_end_a_coordinator_without_age_ns_refuses_is_sent_again_without_it(
    capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as a `runs mark` process 0.3 s old (this test's process has run for minutes: clamped to 60 s)
    monkeypatch.setattr(runs, "STARTED_MONO_NS", time.monotonic_ns() - 3 * S // 10)
    old = OldCoordinator()
    args = argparse.Namespace(run_id="r", name="m", event="end", phase=None)
    assert await runs._mark(old, args) == 0  # type: ignore[arg-type]
    assert old.asked[0] is not None and 0.3 * S <= old.asked[0] < 10 * S and old.asked[1:] == [None]
    assert "mark m ended: a window of 2.000 s in run r" in capsys.readouterr().out
