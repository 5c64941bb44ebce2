"""What the coordinator knows about one node's link, for /v1/nodes and its own /metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkwatch.core.clock import ClockOffset


@dataclass(slots=True)
class LinkState:
    """Mutable, written only by the node's link task, read by API handlers on the same event loop."""

    node: str
    transport: str
    connected: bool = False
    boot_id: str | None = None
    last_seq: int = 0
    last_sample_wall_ns: int | None = None
    offset: ClockOffset | None = None
    hello: dict[str, Any] | None = None
    error: str | None = None
    samples_ingested: int = 0
    reconnects: int = 0
    lease_interval_s: float | None = None
    latest: dict[str, Any] | None = None  # the newest sample in brief, for live displays

    def lag_s(self, now_ns: int) -> float | None:
        """How far behind the agent's newest sample our newest stored one is (clock-corrected)."""
        if self.last_sample_wall_ns is None or self.offset is None:
            return None
        return max(0.0, (now_ns - (self.last_sample_wall_ns + self.offset.offset_ns)) / 1e9)

    def to_json(self, now_ns: int) -> dict[str, Any]:
        hello = self.hello or {}
        return {
            "node": self.node,
            "transport": self.transport,
            "connected": self.connected,
            "boot_id": self.boot_id,
            "last_seq": self.last_seq,
            "lag_s": self.lag_s(now_ns),
            "clock": self.offset.to_json() if self.offset else None,
            "memory_model": hello.get("memory_model"),
            "capabilities": hello.get("capabilities"),
            "agent_version": hello.get("agent_version"),
            "hardware": hello.get("hardware"),
            "interval_s": hello.get("interval_s"),
            "lease_interval_s": self.lease_interval_s,
            "samples_ingested": self.samples_ingested,
            "reconnects": self.reconnects,
            "error": self.error,
            "latest": self.latest,
        }


def latest_summary(sample: dict[str, Any]) -> dict[str, Any]:
    """Power summed over the node's GPUs (None if any is unknown), the highest utilisation, memory used."""
    gpus = [g for g in sample.get("gpus") or () if isinstance(g, dict)]
    powers = [g.get("power_w") for g in gpus]
    utils = [u for u in (g.get("util_ratio") for g in gpus) if isinstance(u, int | float)]
    memory = sample.get("memory") or {}
    return {
        "t_wall_ns": sample.get("t_wall_ns"),
        "interval_s": sample.get("interval_s"),
        "power_w": sum(powers) if powers and all(isinstance(p, int | float) for p in powers) else None,
        "util_ratio": max(utils) if utils else None,
        "memory_used_bytes": memory.get("used_bytes") if isinstance(memory, dict) else None,
    }
