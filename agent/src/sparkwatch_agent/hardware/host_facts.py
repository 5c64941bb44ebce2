"""Static host facts (CPU, product, OS, kernel, time sync); the only module that imports ``psutil``.

Read when asked (at start, or at probe time), never cached across probes, so an OS or kernel upgrade
shows up in the next probe instead of lingering in a hand-written record.
"""

from __future__ import annotations

import ctypes
import os
import platform
import socket
from collections.abc import Callable
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
    time_sync: dict[str, object] | None = None
    product: str | None = None  # the DMI product name ("NVIDIA DGX Spark"), where firmware gives one

    def to_json(self) -> dict[str, object]:
        return {
            "hostname": self.hostname,
            "cpu": self.cpu,
            "cpu_count": self.cpu_count,
            "arch": self.arch,
            "os": self.os,
            "kernel": self.kernel,
            "time_sync": self.time_sync,
            "product": self.product,
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


def dmi_product(root: Path = Path("/")) -> str | None:
    text = (_read(root / "sys/class/dmi/id/product_name") or "").strip()
    return text or None


def os_name(root: Path = Path("/")) -> str:
    text = _read(root / "etc/os-release") or ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    name = fields.get("PRETTY_NAME") or fields.get("NAME") or platform.system()
    return name.strip().strip('"')


class _Timex(ctypes.Structure):
    """Linux ``struct timex`` (adjtimex(2)); ctypes lays out the padding the C compiler would."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


STA_UNSYNC = 0x0040
TIME_ERROR = 5


def _libc_adjtimex(timex: _Timex) -> int:
    try:
        return int(ctypes.CDLL(None, use_errno=True).adjtimex(ctypes.byref(timex)))
    except (OSError, AttributeError):
        return -1


def read_time_sync(
    root: Path = Path("/"), adjtimex: Callable[[_Timex], int] = _libc_adjtimex
) -> dict[str, object]:
    """Whether the kernel clock is disciplined by NTP (chrony, ntpd, timesyncd all tell the kernel), read
    with a read-only adjtimex(2); under a sandbox that forbids it (systemd ProtectClock=), timesyncd's flag
    file is the fallback, else it is unknown."""
    timex = _Timex()
    state = adjtimex(timex)
    if state >= 0:
        return {
            "source": "adjtimex",
            "synchronized": state != TIME_ERROR and not timex.status & STA_UNSYNC,
            "max_error_s": timex.maxerror / 1e6,
            "est_error_s": timex.esterror / 1e6,
        }
    if (root / "run/systemd/timesync/synchronized").exists():
        return {"source": "timesyncd", "synchronized": True, "max_error_s": None, "est_error_s": None}
    return {"source": None, "synchronized": None, "max_error_s": None, "est_error_s": None}


def read_host_facts(root: Path = Path("/")) -> HostFacts:
    return HostFacts(
        hostname=socket.gethostname(),
        cpu=cpu_model(root),
        cpu_count=psutil.cpu_count(logical=True),
        arch=platform.machine(),
        os=os_name(root),
        kernel=os.uname().release,
        time_sync=read_time_sync(root),
        product=dmi_product(root),
    )
