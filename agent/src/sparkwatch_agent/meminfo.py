"""Host memory from /proc/meminfo, read directly.

psutil changed what ``used`` means in 7.1.0; on unified-memory machines the figure everyone compares is
MemTotal − MemAvailable, so we compute exactly that from the kernel's own numbers.
"""

from __future__ import annotations

from pathlib import Path

from sparkwatch_agent.readings import HostMemory

_KEYS = {
    b"MemTotal": "total",
    b"MemFree": "free",
    b"MemAvailable": "available",
    b"Cached": "cached",
    b"SReclaimable": "sreclaimable",
    b"SwapTotal": "swap_total",
    b"SwapFree": "swap_free",
}


def parse_meminfo(text: bytes) -> HostMemory:
    """Parse /proc/meminfo content (values in kB) into byte counts; missing keys stay ``None``."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(b":")
        name = _KEYS.get(key)
        if name is None or not sep:
            continue
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        unit = parts[1] if len(parts) > 1 else b"kB"
        found[name] = value * 1024 if unit == b"kB" else value
    total = found.get("total")
    available = found.get("available")
    cached = found.get("cached")
    sreclaimable = found.get("sreclaimable")
    swap_total = found.get("swap_total")
    swap_free = found.get("swap_free")
    return HostMemory(
        total_bytes=total,
        available_bytes=available,
        used_bytes=total - available if total is not None and available is not None else None,
        free_bytes=found.get("free"),
        page_cache_bytes=cached + sreclaimable if cached is not None and sreclaimable is not None else None,
        swap_used_bytes=swap_total - swap_free if swap_total is not None and swap_free is not None else None,
    )


class MeminfoReader:
    """Reads a meminfo file each call; the path is injectable so tests can hand it a fixture."""

    def __init__(self, path: Path = Path("/proc/meminfo")) -> None:
        self._path = path

    def read(self) -> HostMemory:
        with open(self._path, "rb") as f:
            return parse_meminfo(f.read())
