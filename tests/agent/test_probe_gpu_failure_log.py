"""A GPU that fails to open is logged by both paths, but only the running agent promises a retry: the one-shot
`sparkwatch-agent probe` exits after its one sample, so "retrying in 1.0 s" there would be untrue."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

from doubles.fake_nvml import write_control

WARNING_START = "WARNING sparkwatch_agent.sampling.gpu_session: GPU open failed (DRIVER_NOT_LOADED"


def failing_nvml(fake_nvml_dir: pathlib.Path, tmp_path: pathlib.Path) -> dict[str, str]:
    control = tmp_path / "nvml.control"
    write_control(control, init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED from nvmlInit
    return {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_CONTROL": str(control)}


def test_probe_logs_the_gpu_failure_without_promising_a_retry(
    fake_nvml_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY_SOCKET", "JOURNAL"))}
    result = subprocess.run(
        [sys.executable, "-m", "sparkwatch_agent", "probe"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env | failing_nvml(fake_nvml_dir, tmp_path),
    )
    assert result.returncode == 1, result.stderr
    (warning,) = [line for line in result.stderr.splitlines() if "GPU open failed" in line]
    assert warning.startswith(WARNING_START) and warning.endswith(")"), warning
    assert "retry" not in result.stderr


def test_the_running_agent_still_says_when_it_retries(
    agent_factory: Any, fake_nvml_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    agent = agent_factory("--interval", "0.1", env=failing_nvml(fake_nvml_dir, tmp_path))
    stderr = agent.stop()
    warnings = [line for line in stderr.splitlines() if "GPU open failed" in line]
    assert warnings and warnings[0].startswith(WARNING_START), stderr
    assert warnings[0].endswith("; retrying in 1.0 s"), warnings
