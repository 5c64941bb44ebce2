"""Bounded, seq-indexed ring of encoded sample frames, shared by the sampler thread and stream readers."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RingSlice:
    """Frames after some seq, plus what was lost before them (``missing`` > 0 means a gap)."""

    frames: tuple[bytes, ...]
    first_seq: int | None
    last_seq: int | None
    missing: int


class SampleRing:
    """Fixed-capacity circular buffer; seqs are consecutive, so a lookup by seq is O(1).

    The oldest frame is overwritten first and counted in ``dropped``; readers that fall behind it learn
    how many frames they missed instead of silently skipping them.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("ring capacity must be at least 1")
        self._capacity = capacity
        self._slots: list[bytes | None] = [None] * capacity
        self._first_seq = 1  # seq of the oldest retained frame
        self._next_seq = 1  # seq the next frame will get
        self._lock = threading.Lock()
        self.dropped = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def last_seq(self) -> int:
        """Seq of the newest frame (0 when empty)."""
        return self._next_seq - 1

    def __len__(self) -> int:
        return self._next_seq - self._first_seq

    def append(self, seq: int, frame: bytes) -> None:
        with self._lock:
            if seq != self._next_seq:
                raise ValueError(f"seq {seq} does not follow {self._next_seq - 1}")
            self._slots[seq % self._capacity] = frame
            self._next_seq = seq + 1
            if self._next_seq - self._first_seq > self._capacity:
                self._first_seq += 1
                self.dropped += 1

    def after(self, seq: int, limit: int) -> RingSlice:
        """Up to ``limit`` frames with seq > ``seq``, oldest first."""
        with self._lock:
            start = max(seq + 1, self._first_seq)
            missing = start - (seq + 1) if seq + 1 < self._first_seq and seq < self._next_seq else 0
            end = min(self._next_seq, start + limit)
            if start >= end:
                return RingSlice((), None, None, missing)
            cap = self._capacity
            frames = tuple(self._slots[s % cap] or b"" for s in range(start, end))
            return RingSlice(frames, start, end - 1, missing)
