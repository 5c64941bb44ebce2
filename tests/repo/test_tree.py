"""The tree stays a source tree: build artefacts never show up in git status."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "path",
    [
        "build/lib/sparkwatch/cli.py",  # what `pip install .` leaves behind
        "agent/build/lib/sparkwatch_agent/cli.py",
        "dist/sparkwatch-0.1.0.tar.gz",
        "src/sparkwatch.egg-info/PKG-INFO",
        "agent/src/sparkwatch_agent.egg-info/PKG-INFO",
        "src/sparkwatch/__pycache__/cli.cpython-311.pyc",
        ".venv/bin/python",
    ],
)
def test_build_artefacts_are_ignored(path: str) -> None:
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, capture_output=True, timeout=30
    )
    assert result.returncode == 0, f"{path} would show in git status"


def test_sources_are_not_ignored() -> None:
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "src/sparkwatch/cli.py"], cwd=ROOT, timeout=30
    )
    assert result.returncode == 1


SOURCES = [*(ROOT / "src").rglob("*.py"), *(ROOT / "agent" / "src").rglob("*.py")]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_modules_and_functions_stay_small() -> None:
    """A module does one thing its name says (about 300-400 lines at most); a long function is split into
    named helpers."""
    import ast

    too_long = []
    for path in SOURCES:
        text = path.read_text()
        rel = path.relative_to(ROOT)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{rel}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{rel}:{node.lineno} {node.name}(): {length} lines")
    assert SOURCES and too_long == []
