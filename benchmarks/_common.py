"""Helpers shared by the benchmarks: build the fake NVML library, summarise timings."""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import socket
import statistics
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


def fake_nvml_dir() -> pathlib.Path:
    """Compile tests/doubles/fake_nvml into a temp dir (the same library the tests use) and return the dir."""
    sys.path.insert(0, str(ROOT / "tests"))
    from doubles.fake_nvml import build_fake_nvml

    out = pathlib.Path(tempfile.mkdtemp(prefix="sparkwatch-bench-nvml-"))
    build_fake_nvml(out)
    return out


def load_fake_nvml_gb10() -> None:
    """Compile the fake libnvidia-ml.so.1 and load it into this process (GB10 profile, no control file),
    so the real nvidia-ml-py finds it."""
    ctypes.CDLL(str(fake_nvml_dir() / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)
    os.environ["FAKE_NVML_PROFILE"] = "gb10"
    os.environ.pop("FAKE_NVML_CONTROL", None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def median(values: list[float]) -> float:
    return statistics.median(values)


def old_row(node: str, raw: str) -> tuple[Any, ...]:
    """A schema-1 ``samples`` row (the first GPU in the row, the frame kept): what ingest.py's baseline
    inserts and store_size.py measures."""
    d = json.loads(raw)
    g = d["gpus"][0]
    return (
        node,
        d["boot_id"],
        d["seq"],
        d["t_wall_ns"],
        d["t_mono_ns"],
        d["interval_s"],
        d["memory"]["used_bytes"],
        g["uuid"],
        g["power_w"],
        g["energy_j"],
        g["util_ratio"],
        raw,
    )


def bench_cache(name: str) -> pathlib.Path:
    """The folder under the temp dir where a benchmark keeps the stores it builds once (``--rebuild``)."""
    cache = pathlib.Path(tempfile.gettempdir()) / name
    cache.mkdir(exist_ok=True)
    return cache
