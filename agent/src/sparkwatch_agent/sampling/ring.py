"""Bounded, seq-indexed ring of encoded sample frames, shared by the sampler thread and stream readers.

Frames are kept in blocks: the newest block as plain bytes (what live readers ask for), older ones
zlib-compressed together. Consecutive frames share almost all of their keys, so a closed block shrinks
about tenfold; an hour at 10 Hz then costs a few MiB instead of ~26 MiB. Replaying an old block costs one
decompression, which only a reconnecting reader pays.

Given an ``encode`` function, the ring also takes samples not yet encoded: each is encoded when a reader
first asks for it or when its block closes, in a batch. At 10 Hz one cold encode per tick cost about as
much as the meminfo read beside it; a batch of warm ones costs a fraction of that.
"""

from __future__ import annotations

import bisect
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_BLOCK_FRAMES = 128


@dataclass(frozen=True, slots=True)
class RingSlice:
    """Frames after some seq, plus what was lost before them (``missing`` > 0 means a gap)."""

    frames: tuple[bytes, ...]
    first_seq: int | None
    last_seq: int | None
    missing: int


class SampleRing:
    """Keeps at least the newest ``capacity`` frames (at most one block more), oldest dropped first.

    Seqs are consecutive, so a frame is found by arithmetic plus a bisect over block starts. Dropped frames
    are counted in ``dropped``; a reader that fell behind them learns how many it missed.
    """

    def __init__(
        self,
        capacity: int,
        block_frames: int = DEFAULT_BLOCK_FRAMES,
        encode: Callable[[Any], bytes] | None = None,
    ) -> None:
        if capacity < 1 or block_frames < 1:
            raise ValueError("ring capacity and block size must be at least 1")
        self._capacity = capacity
        self._block_frames = min(block_frames, capacity)
        self._block_starts: list[int] = []  # first seq of each closed block, ascending
        self._blocks: list[bytes] = []  # zlib of the block's frames joined by b"\n"
        self._head: list[Any] = []  # the open block: frames, or items ``encode`` turns into frames
        self._encode = encode
        self._head_start = 1
        self._first_seq = 1  # seq of the oldest retained frame
        self._next_seq = 1  # seq the next frame will get
        self._lock = threading.Lock()
        self.dropped = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def encodes_later(self) -> bool:
        """Whether :meth:`append` may be given unencoded items."""
        return self._encode is not None

    @property
    def last_seq(self) -> int:
        """Seq of the newest frame (0 when empty)."""
        return self._next_seq - 1

    def __len__(self) -> int:
        return self._next_seq - self._first_seq

    def append(self, seq: int, frame: Any) -> None:
        """``frame``: encoded bytes, or (with ``encode``) an item to encode later."""
        with self._lock:
            if seq != self._next_seq:
                raise ValueError(f"seq {seq} does not follow {self._next_seq - 1}")
            self._head.append(frame)
            self._next_seq = seq + 1
            if len(self._head) >= self._block_frames:
                self._blocks.append(zlib.compress(b"\n".join(self._encoded_head(0, len(self._head))), 1))
                self._block_starts.append(self._head_start)
                self._head = []
                self._head_start = self._next_seq
            self._trim()

    def _encoded_head(self, lo: int, hi: int) -> list[bytes]:
        """Head frames [lo, hi) as bytes, encoding (once, in place) what was appended unencoded."""
        head = self._head
        if self._encode is not None:
            for k in range(lo, hi):
                if not isinstance(head[k], bytes):
                    head[k] = self._encode(head[k])
        return head[lo:hi]

    def _trim(self) -> None:
        """Drop whole oldest blocks while what remains still holds ``capacity`` frames."""
        while self._block_starts:
            oldest_end = self._block_starts[1] if len(self._block_starts) > 1 else self._head_start
            if self._next_seq - oldest_end < self._capacity:
                return
            self.dropped += oldest_end - self._first_seq
            self._first_seq = oldest_end
            del self._blocks[0], self._block_starts[0]

    def after(self, seq: int, limit: int) -> RingSlice:
        """Up to ``limit`` frames with seq > ``seq``, oldest first."""
        with self._lock:
            start = max(seq + 1, self._first_seq)
            missing = start - (seq + 1) if seq + 1 < self._first_seq and seq < self._next_seq else 0
            end = min(self._next_seq, start + max(0, limit))
            if start >= end:
                return RingSlice((), None, None, missing)
            wanted: list[tuple[int, bytes]] = []  # compressed blocks overlapping [start, end)
            i = (
                bisect.bisect_right(self._block_starts, start) - 1
                if start < self._head_start
                else len(self._blocks)
            )
            while 0 <= i < len(self._blocks) and self._block_starts[i] < end:
                wanted.append((self._block_starts[i], self._blocks[i]))
                i += 1
            head = self._encoded_head(max(0, start - self._head_start), max(0, end - self._head_start))
        frames: list[bytes] = []
        for block_start, block in wanted:  # decompress outside the lock: the sampler never waits on it
            lines = zlib.decompress(block).split(b"\n")
            frames.extend(lines[max(0, start - block_start) : end - block_start])
        frames.extend(head)
        return RingSlice(tuple(frames), start, end - 1, missing)
