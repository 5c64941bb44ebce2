"""ruff and mypy --strict over both distributions, as part of the one test command."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "agent", "src", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(330)  # cold, 35 s on an idle 2-core machine; the run's own limit below is 300 s
def test_mypy_strict_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_what_the_operations_guide_makes_in_the_clone_is_ignored_by_git() -> None:
    """docs/operations.md builds a wheelhouse and writes token files in the clone: none may be committed."""
    made = ["wheelhouse/sparkwatch_agent-0.1.0-py3-none-any.whl", "agent.token", "coordinator.token"]
    guide = (ROOT / "docs" / "operations.md").read_text()
    assert "pip wheel -w wheelhouse" in guide and "> agent.token" in guide
    ignored = subprocess.run(["git", "check-ignore", *made], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == made
