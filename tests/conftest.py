"""Shared fixtures: the fake NVML library (compiled once per session) and helpers to run real agents."""

from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from doubles.fake_nvml import build_fake_nvml
from helpers.processes import AgentProcess, free_port

#: test-artifacts/ (screenshots) for any test folder: the fixture ``artifacts_dir``.
pytest_plugins = ("helpers.artifacts",)

# No per-example deadline for any property test (Hypothesis's default is 200 ms): on a loaded 2-core CI
# machine running two workers beside real agents, one example stalled by the scheduler is no defect.
settings.register_profile("sparkwatch", deadline=None)
settings.load_profile("sparkwatch")


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Directory holding the fake libnvidia-ml.so.1, compiled by gcc for this session."""
    out = tmp_path_factory.mktemp("fake_nvml")
    build_fake_nvml(out)
    return out


@pytest.fixture(scope="session")
def fake_nvml_loaded(fake_nvml_dir: pathlib.Path) -> pathlib.Path:
    """Load the fake into this process by soname, so the real pynvml's CDLL("libnvidia-ml.so.1") finds it."""
    so = fake_nvml_dir / "libnvidia-ml.so.1"
    ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
    return so


@pytest.fixture
def nvml_profile(
    fake_nvml_loaded: pathlib.Path, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> Iterator[Any]:
    """Select a fake profile in-process; yields a setter ``(profile, control_path|None)``."""

    def select(profile: str, control: pathlib.Path | None = None) -> None:
        monkeypatch.setenv("FAKE_NVML_PROFILE", profile)
        if control is not None:
            monkeypatch.setenv("FAKE_NVML_CONTROL", str(control))
        else:
            monkeypatch.delenv("FAKE_NVML_CONTROL", raising=False)

    yield select


@pytest.fixture
def clock_files() -> Iterator[pathlib.Path]:
    """A folder for libfaketime's control files, in memory (/dev/shm) where there is one: a faked process
    reads its control file on every clock call, and on the disk those reads stalled up to 37 ms (one
    call, under a 1.5 GB write; 0.3 ms from /dev/shm under the same write), and a 20 Hz sampler with them,
    while the suite's other tests wrote (gaps of 130-300 ms in the clock tests' stores)."""
    shm = pathlib.Path("/dev/shm")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="sw-faketime-", dir=shm if shm.is_dir() else None))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def agent_factory() -> Iterator[Any]:
    """Start real agent processes; all are stopped at teardown."""
    started: list[AgentProcess] = []

    def start(
        *args: str, env: dict[str, str] | None = None, ready: bool = True, port: int | None = None
    ) -> AgentProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY_SOCKET"))}
        full_env.update(env or {})
        agent = AgentProcess(list(args), full_env, port or free_port())
        started.append(agent)
        if ready:
            agent.wait_ready()
        return agent

    yield start
    for agent in started:
        agent.stop()


@pytest.fixture
def sim_model() -> Iterator[str]:
    """A real `sparkwatch sim-model` process at 200 tokens/s; its base URL."""
    port = free_port()
    cli = [sys.executable, "-m", "sparkwatch", "sim-model", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen([*cli, "--tokens-per-s", "200"], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError("sim-model did not start") from None
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(5)
