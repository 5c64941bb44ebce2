"""What a meter poller stores, kept in lists (the store's two meter calls)."""

from __future__ import annotations

from sparkwatch.store.meters import MeterReading


class Sink:
    def __init__(self) -> None:
        self.readings: list[MeterReading] = []
        self.errors: list[tuple[str, int, str]] = []
        self.error_sources: list[str] = []

    def add_meter_reading(self, node: str, reading: MeterReading) -> bool:
        self.readings.append(reading)
        return True

    def add_meter_error(self, node: str, domain: str, t_ns: int, error: str, source: str) -> None:
        self.errors.append((domain, t_ns, error))
        self.error_sources.append(source)
