"""Host memory from /proc/meminfo, read directly.

psutil changed what ``used`` means in 7.1.0; on unified-memory machines the figure everyone compares is
MemTotal − MemAvailable, so we compute exactly that from the kernel's own numbers.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from sparkwatch_agent.hardware.readings import HostMemory

log = logging.getLogger(__name__)

#: Line prefixes we need (newline-anchored, so "Cached:" never matches "SwapCached:").
_KEYS = (
    (b"\nMemTotal:", "total"),
    (b"\nMemFree:", "free"),
    (b"\nMemAvailable:", "available"),
    (b"\nCached:", "cached"),
    (b"\nSReclaimable:", "sreclaimable"),
    (b"\nSwapTotal:", "swap_total"),
    (b"\nSwapFree:", "swap_free"),
)


def _values(text: bytes) -> dict[str, int]:
    """Find each wanted key directly (seven C-level searches beat splitting ~55 lines every tick); a
    value that is not a non-negative integer (kB, or a bare count) is left out."""
    text = b"\n" + text
    found: dict[str, int] = {}
    for key, name in _KEYS:
        start = text.find(key)
        if start < 0:
            continue
        start += len(key)
        end = text.find(b"\n", start)
        field = text[start:end] if end >= 0 else text[start:]
        kilo = field.endswith(b" kB")
        try:
            value = int(field[:-3] if kilo else field)  # int() skips the padding spaces itself
        except ValueError:
            continue
        value = value * 1024 if kilo else value
        if 0 <= value < MAX_BYTES:  # past int64 no frame can carry it: unknown, not the sample refused
            found[name] = value
    return found


#: The most bytes a count may be (a frame's integers are int64; a 26-digit MemTotal is no machine's).
MAX_BYTES = 2**63


def _less(whole: int | None, part: int | None) -> int | None:
    """``whole - part``, when both are known and ``part`` is not more than ``whole``: a MemAvailable above
    MemTotal (a container's meminfo view out of step) leaves used memory unknown, never negative."""
    return whole - part if whole is not None and part is not None and part <= whole else None


def _sum(a: int | None, b: int | None) -> int | None:
    return a + b if a is not None and b is not None and a + b < MAX_BYTES else None


def parse_meminfo(text: bytes) -> HostMemory:
    """Parse /proc/meminfo content (values in kB) into byte counts; missing keys stay ``None``."""
    found = _values(text)
    total = found.get("total")
    available = found.get("available")
    cached = found.get("cached")
    sreclaimable = found.get("sreclaimable")
    swap_total = found.get("swap_total")
    swap_free = found.get("swap_free")
    return HostMemory(
        total_bytes=total,
        available_bytes=available,
        used_bytes=_less(total, available),
        free_bytes=found.get("free"),
        page_cache_bytes=_sum(cached, sreclaimable),
        swap_used_bytes=_less(swap_total, swap_free),
    )


def memory_of(
    decode: Callable[[bytes], HostMemory], raw: bytes | OSError, errors: list[tuple[str, str]]
) -> tuple[HostMemory | None, str | None]:
    """One capture's memory and why it is unknown (``None``: it is known), the read error added to
    ``errors`` (field ``host_memory``): a file that could not be read, or one without the numbers that
    used memory is taken from (a MemTotal or MemAvailable that is not a number)."""
    if isinstance(raw, OSError):
        errors.append(("host_memory", type(raw).__name__))
        return None, f"{type(raw).__name__}: {raw.strerror or raw}"
    memory = decode(raw)
    if memory.used_bytes is not None:
        return memory, None
    errors.append(("host_memory", "unparsable"))
    total, available = memory.total_bytes, memory.available_bytes
    if total is not None and available is not None:
        return memory, f"meminfo's MemAvailable ({available} B) is more than its MemTotal ({total} B)"
    missing = " and ".join(
        name for name, v in (("MemTotal", total), ("MemAvailable", available)) if v is None
    )
    return memory, f"meminfo has no {missing} number to take used memory from"


class MeminfoReader:
    """Re-reads one open meminfo file under /proc with ``pread`` each call (procfs regenerates it at offset
    0), which saves an open and a close per tick; any other file (a container's view, a test's fixture) is
    opened at each read, so one replaced or removed is seen at the next tick, not read stale for ever.

    A tick only captures the bytes; they are parsed later, in a batch (see ``Sampler``). A file that cannot
    be read, or is no meminfo file, raises ``OSError`` every tick (each sample says why its memory is null)
    but is logged once, when it starts, not per sample: a line a second says nothing new."""

    def __init__(self, path: Path = Path("/proc/meminfo")) -> None:
        self._path = path
        self._fd: int | None = None
        self._failing = False
        self._kept_open = path.is_absolute() and path.parts[:2] == ("/", "proc")

    def capture(self) -> bytes:
        try:
            if self._fd is None:
                # O_NONBLOCK: a FIFO named as meminfo blocked the open until a writer came, and the
                # sampler with it (the agent never listened); now its pread fails (ESPIPE), said once
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            raw = os.pread(self._fd, 16384, 0)
            if not self._kept_open:
                self.close()
            if b"MemTotal:" not in raw:  # a fast C search; an empty or wrong file is not "all unknown"
                raise OSError(errno.EINVAL, "no MemTotal line, not a meminfo file")
        except OSError as exc:
            self.close()  # reopen next time: the file may have been replaced
            if not self._failing:
                self._failing = True
                log.warning(
                    "cannot read host memory from %s: %s; memory fields are null until it can be read",
                    self._path,
                    exc.strerror or exc,
                )
            raise
        if self._failing:
            self._failing = False
            log.info("host memory is readable again from %s", self._path)
        return raw

    @staticmethod
    def decode(raw: bytes) -> HostMemory:
        return parse_meminfo(raw)

    def read(self) -> HostMemory:
        return parse_meminfo(self.capture())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
