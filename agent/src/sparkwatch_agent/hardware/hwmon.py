"""Optional hwmon power sensors (GB10 ``spbm``, ACPI ``power_meter``, Grace module/CPU sockets, …).

Channels are discovered once by label and classified by what they measure, so a GPU rail is never shown
as system power. Energy accumulators (µJ) are turned into a monotonic joule count since agent start
(``energy_counter``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from sparkwatch_agent.hardware.energy_counter import MAX_WRAP_W, EnergyAccumulator
from sparkwatch_agent.hardware.readings import SensorKind, SensorReading, StatusReading

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
#: The most a power attribute may read (µW), the same bound: an ACPI power meter without a reading gives
#: 0xFFFFFFFF, which the kernel makes 4294967295000 µW (4.3 MW), and that was published as the node's draw.
MAX_POWER_UW = int(MAX_WRAP_W * 1e6)
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
            return _read_text(folder / "name") or _read_text(chip_dir / "name") or chip_dir.name, found
    return _read_text(chip_dir / "name") or chip_dir.name, found


class _Attribute:
    """One sysfs attribute kept open and re-read with ``pread`` (sysfs regenerates it at offset 0)."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def capture(self) -> bytes | None:
        """The attribute's bytes, or ``None`` when it cannot be read now (reopened next time)."""
        try:
            if self._fd is None:  # O_NONBLOCK: a FIFO in its place blocked the open, and the agent with it
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            return os.pread(self._fd, ATTRIBUTE_BYTES + 1, 0)  # one more: a longer value is no number
        except OSError:
            self.close()
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(slots=True)
class Channel:
    """One channel: its name, what it measures, where it lives, and its energy count since agent start."""

    sensor: str
    kind: SensorKind
    source: str  # hwmon:<chip name>
    power: _Attribute | None = None
    energy: _Attribute | None = None
    accumulator: EnergyAccumulator = field(default_factory=EnergyAccumulator)


#: The longest attribute value read: a 64-bit integer in decimal is at most 20 characters and a newline.
ATTRIBUTE_BYTES = 64


def _int(raw: bytes | None) -> int | None:
    """The attribute's integer, as sysfs writes one (``%d`` or ``%u`` and a newline): ASCII digits with an
    optional minus, nothing else (``int()`` would take ``1_000``, ``+5`` or digits of other scripts), and a
    value cut off at the read's length is none."""
    if raw is None or len(raw) > ATTRIBUTE_BYTES:
        return None
    text = raw.strip()
    digits = text[1:] if text.startswith(b"-") else text
    return int(text) if digits.isdigit() else None  # bytes.isdigit: ASCII digits only


def _count(raw: bytes | None, *, attribute: bool, most: int | None = None) -> tuple[int | None, str | None]:
    """A power (µW) or energy (µJ) attribute's value, or ``None`` with why: it could not be read
    (``attribute``: the channel has the file, so no bytes mean a failed read), is not an integer, is
    negative (no rail draws or accumulates below zero), or is above ``most``."""
    if raw is None:
        return None, "unreadable" if attribute else None
    value = _int(raw)
    if value is None:
        return None, "not_a_number"
    if value < 0:
        return None, "negative"
    return (None, "out_of_range") if most is not None and value > most else (value, None)


def _read_text(path: Path) -> str | None:
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


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; a chip folder this user cannot enter holds none (``Path.is_file`` raised
    PermissionError there, and the agent stopped with a traceback)."""
    try:
        return path.is_file()
    except OSError:
        return False


#: Status attributes a chip may have beside its channels, read as integers: spbm's PROCHOT flag and its
#: current power-limit level (``%u``; the spark_hwmon driver puts them in its hwmon directory).
STATUS_FILES = ("prochot", "pl_level")


class SensorCapture(NamedTuple):
    """One tick's raw bytes (``None``: absent or unreadable): per channel its power and energy attributes,
    and each status attribute; ``t_s``: when, on a monotonic clock (captures are decoded later, in
    batches: an accumulator needs the reading's own time)."""

    channels: tuple[tuple[bytes | None, bytes | None], ...]
    statuses: tuple[bytes | None, ...] = ()
    t_s: float = 0.0


@dataclass(slots=True)
class _Status:
    name: str
    source: str
    attribute: _Attribute


class HwmonSensors:
    """Power/energy channels under a hwmon class directory (``/sys/class/hwmon``, injectable)."""

    def __init__(
        self, root: Path = Path("/sys/class/hwmon"), now_s: Callable[[], float] = time.monotonic
    ) -> None:
        self._now_s = now_s
        self._channels = self._discover(root)
        self._statuses = self._discover_statuses(root)

    @property
    def names(self) -> tuple[str, ...]:
        """The channels' and the status attributes' names (empty: nothing to read here)."""
        return (*(c.sensor for c in self._channels), *(s.name for s in self._statuses))

    @staticmethod
    def _discover_statuses(root: Path) -> tuple[_Status, ...]:
        statuses: dict[str, _Status] = {}
        try:
            chips = sorted(root.iterdir(), key=lambda p: p.name) if root.is_dir() else []
        except OSError:
            return ()
        for chip_dir in chips:
            chip = _read_text(chip_dir / "name") or chip_dir.name
            for file in STATUS_FILES:
                if _is_file(chip_dir / file):
                    name = file if file not in statuses else sensor_name(f"{file}_{chip_dir.name}")
                    statuses[name] = _Status(name, fit(f"hwmon:{chip}"), _Attribute(chip_dir / file))
        return tuple(statuses.values())

    @staticmethod
    def _discover(root: Path) -> tuple[Channel, ...]:
        try:
            chips = sorted(root.iterdir(), key=lambda p: p.name) if root.is_dir() else []
        except OSError as exc:
            log.warning("hwmon sensors unavailable: cannot list %s: %s", root, exc.strerror or exc)
            return ()
        channels: dict[str, Channel] = {}
        beyond: list[str] = []  # past MAX_CHANNELS: said in one line (a chip of 300 channels made 172)
        for chip_dir in chips:
            chip, found = _chip_files(chip_dir)
            by_label: dict[str, tuple[Path | None, Path | None]] = {}
            # in channel order by number (power2 before power10): the later of two of one label is renamed
            for (kind, number), files in sorted(
                found.items(), key=lambda item: (item[0][0], int(item[0][1]))
            ):
                label_path = files.get("label") or files.get("oem_info")
                label = (_read_text(label_path) if label_path else None) or f"{chip}_{kind}{number}"
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
            for label, (power, energy) in by_label.items():
                if power is None and energy is None:
                    continue
                name = sensor_name(label)
                if name in channels:
                    name = sensor_name(f"{name}_{chip_dir.name}")
                if name in channels:
                    log.warning(
                        "hwmon: left out %s's channel %r: its name %r is taken", chip_dir, label, name
                    )
                    continue
                if len(channels) == MAX_CHANNELS:
                    beyond.append(f"{chip_dir.name}'s {label!r}")
                    continue
                channels[name] = Channel(
                    name,
                    classify(label, chip),
                    fit(f"hwmon:{chip}"),
                    _Attribute(power) if power is not None else None,
                    _Attribute(energy) if energy is not None else None,
                    EnergyAccumulator(),
                )
        if beyond:
            shown = ", ".join(beyond[:5]) + (", …" if len(beyond) > 5 else "")
            log.warning("hwmon: left out %d channels past the %d read: %s", len(beyond), MAX_CHANNELS, shown)
        return tuple(channels.values())

    def capture(self) -> SensorCapture:
        """Every channel's and status's attributes, unparsed (a tick only reads; ``decode`` parses later)."""
        return SensorCapture(
            tuple(
                (
                    ch.power.capture() if ch.power is not None else None,
                    ch.energy.capture() if ch.energy is not None else None,
                )
                for ch in self._channels
            ),
            tuple(status.attribute.capture() for status in self._statuses),
            self._now_s(),
        )

    def decode(
        self, captured: SensorCapture, errors: list[tuple[str, str]] | None = None
    ) -> tuple[SensorReading, ...]:
        return decode_channels(self._channels, captured, errors)

    def decode_status(self, captured: SensorCapture) -> tuple[StatusReading, ...]:
        """The status attributes' integers; ``None`` where one could not be read or parsed."""
        return tuple(
            StatusReading(status.name, status.source, _int(raw))
            for status, raw in zip(self._statuses, captured.statuses, strict=True)
        )

    def read(self) -> tuple[SensorReading, ...]:
        return self.decode(self.capture())

    def close(self) -> None:
        for ch in self._channels:
            for attribute in (ch.power, ch.energy):
                if attribute is not None:
                    attribute.close()
        for status in self._statuses:
            status.attribute.close()


def decode_channels(
    channels: tuple[Channel, ...], captured: SensorCapture, errors: list[tuple[str, str]] | None = None
) -> tuple[SensorReading, ...]:
    """Readings of one capture. Energy accumulates across calls, so captures go in in order. A value that
    could not be had is ``None``, with (``sensor_power:NAME`` or ``sensor_energy:NAME``, reason) added to
    ``errors`` for the read-error counters."""
    found: list[tuple[str, str]] = [] if errors is None else errors
    out = []
    for ch, (power_raw, energy_raw) in zip(channels, captured.channels, strict=True):
        power_uw, power_why = _count(power_raw, attribute=ch.power is not None, most=MAX_POWER_UW)
        raw_uj, energy_why = _count(energy_raw, attribute=ch.energy is not None)
        if power_why is not None:  # field names made only for an error: this runs every tick
            found.append((f"sensor_power:{ch.sensor}", power_why))
        if energy_why is not None:
            found.append((f"sensor_energy:{ch.sensor}", energy_why))
        out.append(
            SensorReading(
                sensor=ch.sensor,
                kind=ch.kind,
                power_w=power_uw / 1e6 if power_uw is not None else None,
                energy_j=ch.accumulator.update(raw_uj, captured.t_s) if raw_uj is not None else None,
                source=ch.source,
            )
        )
    return tuple(out)
