"""What the sampler reads through: a tick calls ``capture`` (raw bytes only, on the deadline) and the
batch settling calls ``decode`` later, warm (see ``sampler``)."""

from __future__ import annotations

from typing import Protocol

from sparkwatch_agent.hardware.hwmon import SensorCapture
from sparkwatch_agent.hardware.readings import HostMemory, SensorReading, StatusReading


class MemoryReader(Protocol):
    def capture(self) -> bytes: ...

    def decode(self, raw: bytes) -> HostMemory: ...

    def close(self) -> None: ...


class SensorReader(Protocol):
    @property
    def names(self) -> tuple[str, ...]: ...

    def refresh(self) -> None:
        """Find what to read again where it may have changed (before a tick's stamp)."""

    def capture(self) -> SensorCapture: ...

    def decode(
        self, captured: SensorCapture, errors: list[tuple[str, str]] | None = None
    ) -> tuple[SensorReading, ...]: ...

    def decode_status(self, captured: SensorCapture) -> tuple[StatusReading, ...]: ...

    def close(self) -> None: ...
