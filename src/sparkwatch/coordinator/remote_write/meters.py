"""The wall meters' readings as series: the coordinator polls them itself (meters/poller.py), so a fleet
that measures from its engine alone would otherwise have the GPU rail and the agent's hwmon domains but
not the whole node's draw at the wall.

A reading is stamped as the store has it, on the coordinator's clock (the middle of its request), and sent
as ``sparkwatch_meter_power_watts{node, domain, source}`` (W), with the poll interval it was taken at
(``sparkwatch_meter_interval_seconds``: an export reads a gap against it, as the store's does, not against
the spacing of the readings that came back) and, when the meter has its own counter,
``sparkwatch_meter_energy_joules_total`` (J). A failed poll sends no value: the gap stays a gap (its reason
is in the coordinator's store, not in the engine), and the meter's series are marked stale from just after
their last reading, as Prometheus marks a target it cannot scrape. ``node`` is the agent's own name for the
node (what its samples' series carry, ``Coordinator.agent_name``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sparkwatch.coordinator.remote_write.series import Key, key
from sparkwatch.meters.names import METER_ENERGY, METER_FAILED_POLLS, METER_INTERVAL, METER_POWER
from sparkwatch.meters.poller import MeterSink
from sparkwatch.store.meters import MeterReading


def meter_series(node: str, reading: MeterReading, failed_polls: int = 0) -> list[tuple[Key, float]]:
    """The series of one reading and their values: its interval and the meter's failed polls so far with a
    power or energy value, and none for a value the meter did not give."""
    values = ((METER_POWER, reading.power_w), (METER_ENERGY, reading.energy_j))
    out = [
        (key(metric, node=node, domain=reading.domain, source=reading.source), float(value))
        for metric, value in values
        if value is not None
    ]
    if out:
        labels = {"node": node, "domain": reading.domain, "source": reading.source}
        out.append((key(METER_INTERVAL, **labels), reading.interval_s))
        out.append((key(METER_FAILED_POLLS, **labels), float(failed_polls)))
    return out


class MeterOffer(Protocol):
    """The remote writer's side that takes a stored reading (sender.RemoteWriter)."""

    def offer_meter(self, node: str, reading: MeterReading, failed_polls: int = 0) -> None: ...

    def offer_end(self, node: str, domain: str | None = None) -> None: ...


class WrittenMeter:
    """A meter poller's sink that stores each reading, then hands it to the remote writer (which never
    blocks); errors are stored only."""

    def __init__(self, store: MeterSink, writer: MeterOffer, named: Callable[[str], str]) -> None:
        """``named``: the ``node`` label of a node's series, from its nodes.toml name."""
        self._store = store
        self._writer = writer
        self._named = named
        self._failed: dict[tuple[str, str], int] = {}  # each meter's failed polls since the start

    def add_meter_reading(self, node: str, reading: MeterReading) -> bool:
        stored = self._store.add_meter_reading(node, reading)
        if stored:  # what the store ignored is not sent either: the engine holds what SQLite does
            self._writer.offer_meter(self._named(node), reading, self._failed.get((node, reading.domain), 0))
        return stored

    def add_meter_error(self, node: str, domain: str, t_ns: int, error: str, source: str) -> None:
        """Stored; and the meter's series are marked stale in the engine, which would otherwise answer the
        last reading for its lookback (5 min) while the meter says nothing."""
        try:
            self._store.add_meter_error(node, domain, t_ns, error, source)
        finally:  # a store that cannot take the error (a full disk) still leaves no stale reading there
            self._failed[node, domain] = self._failed.get((node, domain), 0) + 1
            self._writer.offer_end(self._named(node), domain)
