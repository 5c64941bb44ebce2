"""Which hwmon power channels and status attributes a machine has, and what each measures.

Found by label and classified, so a GPU rail is never shown as system power; named within the frame's
limits. What is found here is only where to read: ``hwmon`` opens and reads it, and asks again when the
chip folders change (a driver loaded after the agent started).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path
from typing import NamedTuple

from sparkwatch_agent.hardware.readings import SensorKind

log = logging.getLogger(__name__)

_CHANNEL = re.compile(r"^(power|energy)(\d+)_(input|average|label|oem_info)$")
_SYSTEM_LABELS = frozenset({"sys_total", "dc_input", "sys", "system", "total", "psu", "input"})
#: Label stems of GPU parts: one spbm fork names the GPU module's accumulator ``gpm`` and the graphics
#: clusters' rails ``gpc_in``/``gpc_out`` (edisonchan/spark_hwmon), the other calls the accumulator ``gpu``.
_GPU_PARTS = frozenset({"gpm", "gpc"})
#: spbm power channels that are no one part's draw: the firmware's power-limit controllers (``pl1``,
#: ``syspl1``, …: a limit or the average that controller holds, by fork and version) and the budgets it
#: gives each part (``budget_gpu``, ``budget_cpu_p``, …).
_NOT_A_DRAW = re.compile(r"^(budget_\w+|(sys)?pl\d)$")
#: The frame's limits (agent.md): a sensor's name and source of 1–64 characters, at most 128 channels. A
#: coordinator refuses a frame beyond them, so the agent keeps to them whatever the driver's labels are.
MAX_TEXT_CHARS = 64
#: A name or label file's most bytes read: sysfs serves an attribute as one page (64 KiB on some arm64).
TEXT_BYTES = 65536
MAX_CHANNELS = 128


def classify(label: str, chip: str) -> SensorKind:
    """Decide what a channel measures from its label and its hwmon chip name. An ACPI ``power_meter`` is
    the whole system unless its label names a part: Grace's meters are ACPI power meters too, one per
    socket and part (``power1_oem_info``: Module, Grace, CPU or SysIO Power Socket N), and a Grace socket
    (CPU and memory) was taken for the node's whole draw."""
    low = label.lower()
    if low.startswith("module power"):
        return "module"
    if low.startswith(("grace power", "cpu power")):
        return "cpu"
    if low.startswith("sysio power"):
        return "other"
    if chip == "power_meter" or low in _SYSTEM_LABELS:
        return "system"
    if ("gpu" in low and "cpu" in low) or _NOT_A_DRAW.match(low):
        return "other"  # spbm's ``cpu_gpu`` (the two together), or a limit or budget: no part's draw
    if "gpu" in low or low.split("_")[0] in _GPU_PARTS or chip in {"amdgpu", "nouveau"}:
        return "gpu"
    if "cpu" in low or low.startswith("grace"):
        return "cpu"
    return "other"


def sensor_name(label: str) -> str:
    """A label as a Prometheus-friendly value: ``Module Power Socket 0`` → ``module_power_socket_0``."""
    return fit(re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_") or "unnamed")


def fit(text: str) -> str:
    """``text`` within MAX_TEXT_CHARS: a longer one keeps its start and ends in 8 hex digits of its hash,
    so two long labels that share their first 55 characters stay apart, and the same label always maps
    to the same name."""
    if len(text) <= MAX_TEXT_CHARS:
        return text
    tail = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{text[: MAX_TEXT_CHARS - 9]}~{tail}"


def _chip_files(chip_dir: Path) -> tuple[str, dict[tuple[str, str], dict[str, Path]]]:
    """A hwmon directory's chip name and its channel files by (power|energy, number). A driver registered
    the old way (``hwmon_device_register``: the ACPI power meter of older kernels, Grace's among them) keeps
    its name and attributes in the parent device, ``hwmonN/device/``: read from there when the hwmon
    directory has no channel of its own."""
    found: dict[tuple[str, str], dict[str, Path]] = {}
    for folder in (chip_dir, chip_dir / "device"):
        try:
            entries = sorted(folder.iterdir(), key=lambda p: p.name) if folder.is_dir() else []
        except OSError:
            continue
        for entry in entries:
            m = _CHANNEL.match(entry.name)
            if m:
                found.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = entry
        if found:
            return read_text(folder / "name") or read_text(chip_dir / "name") or chip_dir.name, found
    return read_text(chip_dir / "name") or chip_dir.name, found


def read_text(path: Path) -> str | None:
    """A name or label file's text (sysfs gives at most a page); bytes that are not UTF-8 are replaced, not
    a crash at start. Opened without blocking: a FIFO in its place hung the agent's start."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            raw = os.read(fd, TEXT_BYTES)
        finally:
            os.close(fd)
    except OSError:
        return None
    return raw.decode("utf-8", "replace").strip()


def is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a chip folder this user cannot enter holds none (``Path.is_file`` raised
    PermissionError there, and the agent stopped with a traceback)."""
    try:
        return path.is_file()
    except OSError:
        return False


#: Status attributes a chip may have beside its channels, read as integers: spbm's PROCHOT flag and its
#: current power-limit level (``%u``; the spark_hwmon driver puts them in its hwmon directory).
STATUS_FILES = ("prochot", "pl_level")


class ChannelSpec(NamedTuple):
    """A channel found: its name, what it measures, its chip (``hwmon:<chip name>``), its files and its chip
    folder's name (``hwmon3``: what a name taken twice is told apart by)."""

    sensor: str
    kind: SensorKind
    source: str
    power: Path | None
    energy: Path | None
    folder: str


class StatusSpec(NamedTuple):
    """A status attribute found: its name, its chip and its file."""

    name: str
    source: str
    path: Path


def chip_folders(root: Path) -> tuple[Path, ...]:
    """The chip folders under ``root`` by name (none where ``root`` is not a folder); OSError when it
    cannot be listed."""
    return tuple(sorted(root.iterdir(), key=lambda p: p.name)) if root.is_dir() else ()


def discover_statuses(chips: tuple[Path, ...]) -> tuple[StatusSpec, ...]:
    statuses: dict[str, StatusSpec] = {}
    for chip_dir in chips:
        chip = read_text(chip_dir / "name") or chip_dir.name
        for file in STATUS_FILES:
            if is_file(chip_dir / file):
                name = file if file not in statuses else sensor_name(f"{file}_{chip_dir.name}")
                statuses[name] = StatusSpec(name, fit(f"hwmon:{chip}"), chip_dir / file)
    return tuple(statuses.values())


def discover_channels(
    chips: tuple[Path, ...], keep: frozenset[tuple[Path | None, Path | None]] = frozenset()
) -> tuple[ChannelSpec, ...]:
    """Every chip's channels in chip order, named apart (a name taken twice gets its chip folder's name)
    and at most MAX_CHANNELS: those read already (``keep``, by their power and energy files) first, so a
    chip that comes and sorts before them does not push them past the limit."""
    found = _named_channels(chips)
    kept = sum((s.power, s.energy) in keep for s in found)
    room = max(0, MAX_CHANNELS - kept)
    chosen, beyond = [], []  # past MAX_CHANNELS: said in one line (a chip of 300 channels made 172)
    for spec in found:
        if (spec.power, spec.energy) in keep:
            chosen.append(spec)
        elif room:
            chosen.append(spec)
            room -= 1
        else:
            beyond.append(f"{spec.folder}'s {spec.sensor!r}")
    if beyond:
        shown = ", ".join(beyond[:5]) + (", …" if len(beyond) > 5 else "")
        log.warning("hwmon: left out %d channels past the %d read: %s", len(beyond), MAX_CHANNELS, shown)
    return tuple(chosen)


def _named_channels(chips: tuple[Path, ...]) -> list[ChannelSpec]:
    """Every chip's channels in chip order, named apart, however many."""
    channels: dict[str, ChannelSpec] = {}
    for chip_dir in chips:
        chip, by_label = _chip_channels(chip_dir)
        for label, (power, energy) in by_label.items():
            if power is None and energy is None:
                continue
            name = sensor_name(label)
            if name in channels:
                name = sensor_name(f"{name}_{chip_dir.name}")
            if name in channels:
                log.warning("hwmon: left out %s's channel %r: its name %r is taken", chip_dir, label, name)
                continue
            source = fit(f"hwmon:{chip}")
            channels[name] = ChannelSpec(name, classify(label, chip), source, power, energy, chip_dir.name)
    return list(channels.values())


def _chip_channels(chip_dir: Path) -> tuple[str, dict[str, tuple[Path | None, Path | None]]]:
    """A chip's name and its (power, energy) files by label."""
    chip, found = _chip_files(chip_dir)
    by_label: dict[str, tuple[Path | None, Path | None]] = {}
    # in channel order by number (power2 before power10): the later of two of one label is renamed
    for (kind, number), files in sorted(found.items(), key=lambda item: (item[0][0], int(item[0][1]))):
        label_path = files.get("label") or files.get("oem_info")
        label = (read_text(label_path) if label_path else None) or f"{chip}_{kind}{number}"
        if kind == "energy":
            label = label.removesuffix("_energy")
        power, energy = by_label.get(label, (None, None))
        if (power if kind == "power" else energy) is not None:  # two channels of one label: each
            kept = f"{label}_{kind}{number}"  # its own, the later under its file's name
            said = (chip_dir, kind, label, kind, number, kept)
            log.warning("hwmon: %s has two %s channels labelled %r: %s%s is %r", *said)
            label, power, energy = kept, None, None
        if kind == "power":
            power = files.get("input") or files.get("average") or power
        else:
            energy = files.get("input") or energy
        by_label[label] = (power, energy)
    return chip, by_label
