"""What the coordinator knows about one node's link, for /v1/nodes and its own /metrics, and the errors a
link can meet. A link moves between a few states; each change is logged once, not each retry."""

from __future__ import annotations

import enum
import logging
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sparkwatch.core.clock import ClockOffset
from sparkwatch.wire import SampleFrame

log = logging.getLogger(__name__)
_DIGITS = re.compile(r"\d+")


class LinkStatus(enum.Enum):
    CONNECTING = "connecting"  # not streamed yet
    STREAMING = "streaming"
    DOWN = "down"  # lost or refused; redialled with backoff
    UNAUTHORIZED = "unauthorized"  # the agent refused our token; redialled slowly
    # another sparkwatch service (a coordinator) answers at the node's address; redialled slowly
    MISADDRESSED = "misaddressed"
    STOPPED = "stopped"  # the coordinator is shutting down


class LinkError(Exception):
    """The agent answered, but not in a way we can use (not an agent, a broken stream, …)."""


class Misconfigured(LinkError):
    """A mistake in nodes.toml or a token file that retrying soon cannot fix: the link says which (its
    ``status``), redials slowly, and a command waiting on the node stops waiting."""

    status: ClassVar[LinkStatus] = LinkStatus.DOWN


class Unauthorized(Misconfigured):
    """The agent refused our token."""

    status: ClassVar[LinkStatus] = LinkStatus.UNAUTHORIZED


class Misaddressed(Misconfigured):
    """Another sparkwatch service (a coordinator) answers at the node's address, not an agent."""

    status: ClassVar[LinkStatus] = LinkStatus.MISADDRESSED


_LEVELS = {
    LinkStatus.CONNECTING: logging.INFO,
    LinkStatus.STREAMING: logging.INFO,
    LinkStatus.DOWN: logging.WARNING,
    LinkStatus.UNAUTHORIZED: logging.ERROR,
    LinkStatus.MISADDRESSED: logging.ERROR,
    LinkStatus.STOPPED: logging.DEBUG,  # every link stops with its coordinator: nothing to tell
}


@dataclass(slots=True)
class LinkState:
    """Mutable, written only by the node's link task, read by API handlers on the same event loop."""

    node: str
    transport: str
    status: LinkStatus = LinkStatus.CONNECTING
    error: str | None = None
    boot_id: str | None = None
    last_seq: int = 0
    last_sample_wall_ns: int | None = None
    offset: ClockOffset | None = None
    offset_boot: str | None = None  # the agent boot ``offset`` was measured on
    hello: dict[str, Any] | None = None
    samples_ingested: int = 0
    reconnects: int = 0
    lease_interval_s: float | None = None
    latest: dict[str, Any] | None = None  # the newest sample in brief, for live displays
    frames_rejected: dict[str, int] = field(default_factory=dict)  # by reason (links/stream.py)

    @property
    def connected(self) -> bool:
        return self.status is LinkStatus.STREAMING

    def enter(self, status: LinkStatus, error: str | None = None, retry_s: float | None = None) -> None:
        """Move to ``status`` (with why, for the failed ones). A change of status, or of why, is logged
        once; the same status for the same reason again (a redial that failed like the last, its numbers
        aside: a port, a seq) only at debug level. A redial that fails otherwise (the host is back, with a
        changed host key) is news."""
        changed = status is not self.status or _gist(error) != _gist(self.error)
        self.status, self.error = status, error
        text = f"node {self.node}: link {status.value} ({self.transport})"
        if error is not None:
            text += f": {error}"
        if retry_s is not None:
            text += f"; retrying in {retry_s:.1f} s"
        log.log(_LEVELS[status] if changed else logging.DEBUG, "%s", text)

    def warn(self, text: str) -> None:
        """A fact of the link a person should see (an agent that calls itself by another name), logged as
        its transitions are: a command that says what it found of each node itself quiets them together."""
        log.warning("%s", text)

    def clocked(self, boot: str, offset: ClockOffset) -> None:
        """The link's newest clock estimate, and the agent boot it was measured on."""
        self.offset, self.offset_boot = offset, boot

    def offset_for(self, boot: str | None) -> ClockOffset | None:
        """The newest estimate when it was measured on ``boot``: what stamps that boot's samples for
        remote write (another boot's, or a host's before it rebooted, would not)."""
        return self.offset if boot is not None and boot == self.offset_boot else None

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
            "status": self.status.value,
            "boot_id": self.boot_id,
            "last_seq": self.last_seq,
            "lag_s": self.lag_s(now_ns),
            "clock": self.offset.to_json() if self.offset else None,
            "memory_model": hello.get("memory_model"),
            "capabilities": hello.get("capabilities"),
            "agent_version": hello.get("agent_version"),
            "agent_node": hello.get("node"),  # what the agent calls itself
            "hardware": hello.get("hardware"),
            "gpu_reason": hello.get("gpu_reason"),  # why no GPU was read when the agent said hello
            "interval_s": hello.get("interval_s"),
            "lease_interval_s": self.lease_interval_s,
            "samples_ingested": self.samples_ingested,
            "reconnects": self.reconnects,
            "error": self.error,
            "latest": self.latest,
            "frames_rejected": dict(self.frames_rejected),
        }


def latest_summary(sample: SampleFrame) -> dict[str, Any]:
    """The newest sample in brief, for live displays: power summed over the node's GPUs (None if any is
    unknown), the highest utilisation, memory used."""
    powers = [g.power_w for g in sample.gpus]
    utils = [g.util_ratio for g in sample.gpus if g.util_ratio is not None]
    known = [p for p in powers if p is not None]
    return {
        "t_wall_ns": sample.t_wall_ns,
        "interval_s": sample.interval_s,
        "power_w": sum(known) if powers and len(known) == len(powers) else None,
        "util_ratio": max(utils) if utils else None,
        "memory_used_bytes": sample.mem_used_bytes,
    }


def _gist(error: str | None) -> str | None:
    """A reason without its numbers (a tunnel's local port, a seq that grows): what makes two the same."""
    return None if error is None else _DIGITS.sub("#", error)
