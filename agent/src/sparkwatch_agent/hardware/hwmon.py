"""Optional hwmon power sensors (GB10 ``spbm``, ACPI ``power_meter``, Grace module/CPU sockets, …): read.

What is read was found by ``hwmon_discovery``, at start and again whenever the chip folders change (a
driver loaded or unloaded after the agent started: looked at every ``RESCAN_S``, before a tick's stamp).
Energy accumulators (µJ) are turned into a monotonic joule count since the channel was first read
(``energy_counter``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from sparkwatch_agent.hardware.energy_counter import MAX_WRAP_W, EnergyAccumulator
from sparkwatch_agent.hardware.hwmon_discovery import (
    ChannelSpec,
    chip_folders,
    discover_channels,
    discover_statuses,
    sensor_name,
)
from sparkwatch_agent.hardware.readings import SensorKind, SensorReading, StatusReading

log = logging.getLogger(__name__)

#: The most a power attribute may read (µW), the same bound: an ACPI power meter without a reading gives
#: 0xFFFFFFFF, which the kernel makes 4294967295000 µW (4.3 MW), and that was published as the node's draw.
MAX_POWER_UW = int(MAX_WRAP_W * 1e6)
#: How often the chip folders are listed for a driver loaded or unloaded since (one directory listing; a
#: change is read in full).
RESCAN_S = 30.0


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
    """One channel: its name, what it measures, where it lives, and its energy count since first read."""

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


@dataclass(slots=True)
class _Status:
    name: str
    source: str
    attribute: _Attribute


#: The chip folders as last listed: each folder's name and where its link points (a driver reloaded may
#: get the same ``hwmonN`` for another device).
_Chips = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class _Layout:
    """What is read: the chip folders it was found in, the channels and the status attributes."""

    chips: _Chips
    channels: tuple[Channel, ...]
    statuses: tuple[_Status, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return (*(c.sensor for c in self.channels), *(s.name for s in self.statuses))


class SensorCapture(NamedTuple):
    """One tick's raw bytes (``None``: absent or unreadable): per channel its power and energy attributes,
    and each status attribute; ``t_s``: when, on a monotonic clock (captures are decoded later, in
    batches: an accumulator needs the reading's own time); ``layout``: what hwmon read them from (what
    is read may change between a capture and its decoding)."""

    channels: tuple[tuple[bytes | None, bytes | None], ...]
    statuses: tuple[bytes | None, ...] = ()
    t_s: float = 0.0
    layout: _Layout | None = None


class HwmonSensors:
    """Power/energy channels under a hwmon class directory (``/sys/class/hwmon``, injectable), found again
    when its chip folders change (:meth:`refresh`)."""

    def __init__(
        self,
        root: Path = Path("/sys/class/hwmon"),
        now_s: Callable[[], float] = time.monotonic,
        rescan_s: float = RESCAN_S,
    ) -> None:
        self._root, self._now_s, self._rescan_s = root, now_s, rescan_s
        try:
            chips = chip_folders(root)
        except OSError as exc:
            log.warning("hwmon sensors unavailable: cannot list %s: %s", root, exc.strerror or exc)
            chips = ()
        self._layout = _Layout((), (), ())
        self._layout = self._laid_out(chips)
        self._next_scan_s = now_s() + rescan_s
        self._look_again = False

    @property
    def names(self) -> tuple[str, ...]:
        """The channels' and the status attributes' names (empty: nothing to read here now)."""
        return self._layout.names

    def refresh(self) -> None:
        """Every ``rescan_s``, list the chip folders; where they changed, find what to read again. A channel
        found as before is kept, its file open and its energy count going; one gone is closed; one new
        starts its energy count at 0. Called before a tick's stamp (reading a new chip's labels takes a
        few file reads)."""
        now = self._now_s()
        if now < self._next_scan_s:
            return
        self._next_scan_s = now + self._rescan_s
        try:
            chips = chip_folders(self._root)
        except OSError:  # as good as unchanged: what was found is still read, and fails as it will
            return
        changed = _chip_key(chips) != self._layout.chips
        if changed or self._look_again:  # once more after a change: a chip caught half-registered
            self._look_again = changed
            before = self.names
            self._layout = self._laid_out(chips)
            added = [n for n in self.names if n not in before]
            gone = [n for n in before if n not in self.names]
            if added or gone:
                said = (self._root, added or "none", gone or "none")
                log.info("hwmon chips changed under %s: added %s; gone %s", *said)

    def _laid_out(self, chips: tuple[Path, ...]) -> _Layout:
        """What ``chips`` hold. A channel or status found again (the same files, read as before) keeps its
        name, its open file and its energy count, wherever its chip sorts now (a chip added before it
        took its name, and its count began again at 0); a new one is named around those kept."""
        old = self._layout
        kept = {_files_of(ch): ch for ch in old.channels}
        found = discover_channels(chips, keep=frozenset(kept))
        again = {
            (s.power, s.energy): kept.pop((s.power, s.energy))
            for s in found
            if (ch := kept.get((s.power, s.energy))) is not None
            and (ch.kind, ch.source) == (s.kind, s.source)
        }
        taken = {ch.sensor for ch in again.values()}
        channels = []
        for spec in found:
            channel = again.get((spec.power, spec.energy))
            if channel is None and (name := _free_name(spec.sensor, spec.folder, taken)) is not None:
                channel = _opened(spec._replace(sensor=name))
                taken.add(name)
            if channel is not None:
                channels.append(channel)
        kept_status = {s.attribute.path: s for s in old.statuses}
        found_statuses = discover_statuses(chips)
        statuses = [kept_status.pop(f.path) for f in found_statuses if f.path in kept_status]
        taken = {s.name for s in statuses}
        for status in found_statuses:
            if all(s.attribute.path != status.path for s in statuses):
                name = _free_name(status.name, status.path.parent.name, taken)
                if name is not None:
                    statuses.append(_Status(name, status.source, _Attribute(status.path)))
                    taken.add(name)
        _close(old_channels=kept.values(), old_statuses=kept_status.values())
        return _Layout(_chip_key(chips), tuple(channels), tuple(statuses))

    def capture(self) -> SensorCapture:
        """Every channel's and status's attributes, unparsed (a tick only reads; ``decode`` parses later)."""
        layout = self._layout
        return SensorCapture(
            tuple(
                (
                    ch.power.capture() if ch.power is not None else None,
                    ch.energy.capture() if ch.energy is not None else None,
                )
                for ch in layout.channels
            ),
            tuple(status.attribute.capture() for status in layout.statuses),
            self._now_s(),
            layout,
        )

    def decode(
        self, captured: SensorCapture, errors: list[tuple[str, str]] | None = None
    ) -> tuple[SensorReading, ...]:
        return decode_channels((captured.layout or self._layout).channels, captured, errors)

    def decode_status(self, captured: SensorCapture) -> tuple[StatusReading, ...]:
        """The status attributes' integers; ``None`` where one could not be read or parsed."""
        statuses = (captured.layout or self._layout).statuses
        return tuple(
            StatusReading(status.name, status.source, _int(raw))
            for status, raw in zip(statuses, captured.statuses, strict=True)
        )

    def read(self) -> tuple[SensorReading, ...]:
        return self.decode(self.capture())

    def close(self) -> None:
        _close(self._layout.channels, self._layout.statuses)


def read_names(captured: SensorCapture | None) -> tuple[str, ...] | None:
    """The names of what ``captured`` was read from (None: not read by hwmon's layouts, e.g. the sim's)."""
    return captured.layout.names if captured is not None and captured.layout is not None else None


def _chip_key(chips: tuple[Path, ...]) -> _Chips:
    return tuple((chip.name, _link(chip)) for chip in chips)


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # not a link (a test's tree, a container's copy): its name says it
        return ""


def _files_of(ch: Channel) -> tuple[Path | None, Path | None]:
    return ch.power.path if ch.power is not None else None, ch.energy.path if ch.energy is not None else None


def _free_name(name: str, folder: str, taken: set[str]) -> str | None:
    """``name``, else it with its chip folder's (as discovery names the later of two), else None: left out,
    with a warning (a name a kept channel holds is not taken from it)."""
    for candidate in (name, sensor_name(f"{name}_{folder}")):
        if candidate not in taken:
            return candidate
    log.warning("hwmon: left out %s's %r: its name is taken", folder, name)
    return None


def _opened(spec: ChannelSpec) -> Channel:
    return Channel(
        spec.sensor,
        spec.kind,
        spec.source,
        _Attribute(spec.power) if spec.power is not None else None,
        _Attribute(spec.energy) if spec.energy is not None else None,
        EnergyAccumulator(),
    )


def _close(old_channels: Iterable[Channel], old_statuses: Iterable[_Status]) -> None:
    for ch in old_channels:
        for attribute in (ch.power, ch.energy):
            if attribute is not None:
                attribute.close()
    for status in old_statuses:
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
