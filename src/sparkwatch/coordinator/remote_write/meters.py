"""The wall meters' readings as series: the coordinator polls them itself (meters/poller.py), so a fleet
that measures from its engine alone would otherwise have the GPU rail and the agent's hwmon domains but
not the whole node's draw at the wall.

A reading is stamped as the store has it, on the coordinator's clock (the middle of its request), and sent
as ``sparkwatch_meter_power_watts{node, domain, source}`` (W) and, when the meter has its own counter,
``sparkwatch_meter_energy_joules_total`` (J). A failed poll sends nothing: the gap stays a gap (its reason
is in the coordinator's store, not in the engine). ``node`` is the agent's own name for the node (what
its samples' series carry) once its link has seen a hello, else the coordinator's name for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sparkwatch.coordinator.remote_write.series import Key, key
from sparkwatch.store.meters import MeterReading

METER_POWER = "sparkwatch_meter_power_watts"
METER_ENERGY = "sparkwatch_meter_energy_joules_total"


def meter_series(node: str, reading: MeterReading) -> list[tuple[Key, float]]:
    """The series of one reading and their values (none for an unknown value)."""
    out = []
    for metric, value in ((METER_POWER, reading.power_w), (METER_ENERGY, reading.energy_j)):
        if value is not None:
            out.append((key(metric, node=node, domain=reading.domain, source=reading.source), float(value)))
    return out


class MeterStore(Protocol):
    def add_meter_reading(self, node: str, reading: MeterReading) -> None: ...

    def add_meter_error(self, node: str, domain: str, t_ns: int, error: str) -> None: ...


class MeterOffer(Protocol):
    def offer_meter(self, node: str, reading: MeterReading) -> None: ...


class WrittenMeter:
    """A meter poller's sink that stores each reading, then hands it to the remote writer (which never
    blocks); errors are stored only."""

    def __init__(
        self, store: MeterStore, writer: MeterOffer, hello: Callable[[], Mapping[str, Any] | None]
    ) -> None:
        self._store = store
        self._writer = writer
        self._hello = hello  # the node's link's latest hello

    def add_meter_reading(self, node: str, reading: MeterReading) -> None:
        self._store.add_meter_reading(node, reading)
        named = (self._hello() or {}).get("node")
        self._writer.offer_meter(named if isinstance(named, str) and named else node, reading)

    def add_meter_error(self, node: str, domain: str, t_ns: int, error: str) -> None:
        self._store.add_meter_error(node, domain, t_ns, error)
