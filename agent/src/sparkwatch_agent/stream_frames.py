"""What a stream reader gets next: frames from the ring, a gap frame where it fell behind, and a new hello
exactly where the inventory changed (the samples after a GPU re-open follow the hello announcing it)."""

from __future__ import annotations

from collections.abc import Callable

from sparkwatch_agent.sample import frames_after
from sparkwatch_agent.sampler import Sampler
from sparkwatch_agent.snapshot import Snapshot


class StreamCursor:
    """One reader's position: the last seq it was sent and the inventory its last hello described."""

    def __init__(self, after_seq: int, inventory_rev: int) -> None:
        self.last_seq = after_seq
        self.inventory_rev = inventory_rev

    def next_lines(self, sampler: Sampler, limit: int, hello: Callable[[Snapshot], bytes]) -> list[bytes]:
        """The next lines to send (empty when up to date)."""
        snap = sampler.snapshot
        lines: list[bytes] = []
        until: int | None = None
        if snap.inventory_rev != self.inventory_rev:
            if self.last_seq >= snap.inventory_seq - 1:
                self.inventory_rev = snap.inventory_rev
                lines.append(hello(snap))
            else:
                until = snap.inventory_seq - 1  # first the frames of the old inventory
        if until is not None:
            limit = min(limit, until - self.last_seq)
        more, self.last_seq = frames_after(sampler.ring, self.last_seq, limit)
        lines.extend(more)
        return lines
