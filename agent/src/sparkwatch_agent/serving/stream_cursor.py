"""What a stream reader gets next: frames from the ring, a gap frame where it fell behind, and a new hello
exactly where the inventory changed (the samples after a GPU re-open follow the hello announcing it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sample import encode_frame
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.shared.protocol import FRAME_ERROR, FRAME_GAP


def frames_after(ring: SampleRing, last_seq: int, limit: int) -> tuple[list[bytes], int]:
    """The next frames a reader that has seen ``last_seq`` should get, a gap frame first if it fell
    behind the ring; returns them with the new last seq. An empty list means it is up to date."""
    piece = ring.after(last_seq, limit)
    lines: list[bytes] = []
    if piece.missing:
        gap = {"type": FRAME_GAP, "after": last_seq, "missing": piece.missing, "next_seq": piece.first_seq}
        lines.append(encode_frame(gap))
        last_seq += piece.missing
    if piece.frames and piece.last_seq is not None:
        lines.extend(piece.frames)
        last_seq = piece.last_seq
    return lines, last_seq


def beyond_newest(after_seq: int, newest_seq: int, boot_id: str) -> dict[str, Any] | None:
    """The error frame for a reader that claims to have seen a seq this boot has not produced yet, else
    ``None``. Such a reader is confused (a new boot starts again at seq 1 and its hello says so), and no
    answer but a refusal keeps its data whole: waiting for the seqs to catch up is silence, then never
    sends the samples up to ``after_seq`` that it wrongly believes it has; starting at the newest sends
    seqs it believes it has, which it would drop as duplicates. So nothing is sent or skipped, and the
    ring keeps every sample for a request with a seq the reader really has."""
    if after_seq <= newest_seq:
        return None
    return {
        "type": FRAME_ERROR,
        "error": "after_beyond_newest",
        "reason": f"after={after_seq} is beyond the newest seq {newest_seq} of boot {boot_id}; "
        f"ask again with after <= {newest_seq} (0 replays the ring)",
        "after": after_seq,
        "last_seq": newest_seq,
        "boot_id": boot_id,
    }


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
