"""`runs mark … end` dates its window back by its process's age, read from /proc/self/stat."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

from sparkwatch.commands.process_age import process_age_ns

S = 1_000_000_000


def test_the_age_is_read_past_a_command_name_with_spaces_and_parentheses(tmp_path: pathlib.Path) -> None:
    fields = ["S", *["0"] * 18, "12345", *["0"] * 30]  # starttime (the 22nd field): 123.45 s after boot
    stat = tmp_path / "stat"
    stat.write_text(f"4242 (a (b) c) {' '.join(fields)}\n")
    # started in the tick 123.45-123.46 s after boot: at most 1.54 s ago (an age is never overstated)
    assert process_age_ns(stat, lambda: 125 * S, ticks_per_s=100) == 154 * S // 100
    assert process_age_ns(stat, lambda: 123 * S, ticks_per_s=100) is None  # "started" later: not trusted
    stat.write_text("4242 (short) S 1 2\n")
    assert process_age_ns(stat, lambda: 125 * S, ticks_per_s=100) is None
    assert process_age_ns(tmp_path / "absent", lambda: 125 * S, ticks_per_s=100) is None


def test_a_fresh_process_is_as_old_as_its_start_up() -> None:
    """The real /proc and CLOCK_BOOTTIME: a child that sleeps 0.3 s after it starts is at least that old."""
    probe = (
        "import time; time.sleep(0.3)\n"
        "from sparkwatch.commands.process_age import process_age_ns\nprint(process_age_ns())"
    )
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    took_ns = (time.monotonic() - t0) * S
    assert done.returncode == 0, done.stderr
    age_ns = int(done.stdout)
    assert 0.29 * S <= age_ns <= took_ns  # to a clock tick (10 ms), never more than it was
