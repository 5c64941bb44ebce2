"""Static host facts (CPU, RAM, OS, kernel) — the second module allowed to import ``psutil``.

Read when asked (at start, or at probe time), never cached across probes, so an OS or kernel upgrade
shows up in the next probe instead of lingering in a hand-written record.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True, slots=True)
class HostFacts:
    hostname: str
    cpu: str
    cpu_count: int | None
    arch: str
    os: str
    kernel: str

    def to_json(self) -> dict[str, object]:
        return {
            "hostname": self.hostname,
            "cpu": self.cpu,
            "cpu_count": self.cpu_count,
            "arch": self.arch,
            "os": self.os,
            "kernel": self.kernel,
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def cpu_model(root: Path = Path("/")) -> str:
    """x86 names its CPU in /proc/cpuinfo; Arm boards (GB10 too) often only in the device tree."""
    cpuinfo = _read(root / "proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware") and value.strip():
            return value.strip()
    model = _read(root / "sys/firmware/devicetree/base/model")
    if model and model.strip("\x00\n "):
        return model.strip("\x00\n ")
    return platform.machine() or "unknown"


def os_name(root: Path = Path("/")) -> str:
    text = _read(root / "etc/os-release") or ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    name = fields.get("PRETTY_NAME") or fields.get("NAME") or platform.system()
    return name.strip().strip('"')


def read_host_facts(root: Path = Path("/")) -> HostFacts:
    return HostFacts(
        hostname=socket.gethostname(),
        cpu=cpu_model(root),
        cpu_count=psutil.cpu_count(logical=True),
        arch=platform.machine(),
        os=os_name(root),
        kernel=os.uname().release,
    )
