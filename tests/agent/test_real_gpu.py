"""On a machine with a real NVIDIA GPU: probe it through the real driver and save a capture.

Skipped where NVML cannot initialise. NVML is tried in a clean subprocess, because this test session
may have loaded the fake libnvidia-ml.so.1 by soname.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML") and k != "LD_LIBRARY_PATH"}


def nvml_available() -> bool:
    check = subprocess.run(
        [sys.executable, "-c", "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())"],
        capture_output=True,
        text=True,
        env=CLEAN_ENV,
        timeout=60,
    )
    return check.returncode == 0 and check.stdout.strip().isdigit() and int(check.stdout) > 0


@pytest.mark.gpu
def test_real_nvml_probe_writes_a_capture() -> None:
    if not nvml_available():
        pytest.skip("NVML cannot initialise on this machine (no NVIDIA GPU/driver)")
    result = subprocess.run(
        [sys.executable, "-m", "sparkwatch_agent", "probe"],
        capture_output=True,
        text=True,
        env=CLEAN_ENV,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout)
    assert probe["gpu_ok"] is True and probe["backend"] == "nvml"
    gpus = probe["capabilities"]["gpus"]
    assert gpus and set(gpus[0]["fields"]) >= {"power", "energy", "utilization", "temperature"}
    sample = probe["sample"]["gpus"][0]
    for field, key in (("power", "power_w"), ("utilization", "util_ratio"), ("temperature", "temperature_c")):
        if gpus[0]["fields"][field]["supported"]:
            assert sample[key] is not None, field
        else:
            assert sample[key] is None, field
    name = re.sub(r"[^a-z0-9]+", "-", probe["hardware"]["gpus"][0]["name"].lower()).strip("-")
    out_dir = pathlib.Path(os.environ.get("SPARKWATCH_CAPTURE_DIR", ROOT / "tests" / "fixtures" / "captures"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(probe, indent=2) + "\n")
