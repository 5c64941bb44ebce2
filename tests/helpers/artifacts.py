"""Where a test leaves what a person should be able to look at afterwards (screenshots of the report):
``test-artifacts/`` at the repository root (git ignores it), or the folder ``$SPARKWATCH_TEST_ARTIFACTS``
names, so CI can keep them. A pytest plugin: tests/conftest.py loads it for every test folder."""

from __future__ import annotations

import os
import pathlib
import re
import shutil

import pytest

ENV_ARTIFACTS = "SPARKWATCH_TEST_ARTIFACTS"
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def artifacts_root() -> pathlib.Path:
    """``$SPARKWATCH_TEST_ARTIFACTS`` when set (relative to the working directory), else test-artifacts/."""
    named = os.environ.get(ENV_ARTIFACTS)
    return pathlib.Path(named).resolve() if named else REPO_ROOT / "test-artifacts"


@pytest.fixture
def artifacts_dir(request: pytest.FixtureRequest) -> pathlib.Path:
    """This test's own folder, ``<root>/<test module>/<test name>``, emptied first: what it holds after a run
    is that run's, never an older screenshot passing for a new one."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_") or "test"
    module = pathlib.Path(str(request.node.path)).stem
    folder = artifacts_root() / module / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder
