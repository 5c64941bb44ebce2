"""Where each polled result sits in a device's one result buffer, and the ``struct`` that decodes it."""

from __future__ import annotations

import struct

#: struct codes of the unsigned integers NVML writes, by size in bytes.
UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}


class BufferLayout:
    """Places results in the buffer and lists the unsigned integers to decode, in offset order."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self.decoded: list[tuple[int, int]] = []  # (offset, bytes)

    def mark(self) -> tuple[int, int]:
        return self.size, len(self.decoded)

    def reset(self, mark: tuple[int, int]) -> None:
        self.size, count = mark
        del self.decoded[count:]

    def place(self, nbytes: int, align: int = 8) -> int:
        offset = -(-self.size // align) * align
        if offset + nbytes > self.capacity:
            raise ValueError("result buffer too small")
        self.size = offset + nbytes
        return offset

    def decode(self, offset: int, nbytes: int) -> int:
        """Index in the unpacked tuple of the integer at ``offset``."""
        if self.decoded and offset < sum(self.decoded[-1]):
            raise ValueError("results must be decoded in offset order")
        self.decoded.append((offset, nbytes))
        return len(self.decoded) - 1

    def compile(self) -> struct.Struct:
        fmt, at = ["="], 0
        for offset, nbytes in self.decoded:
            fmt.append(f"{offset - at}x{UNSIGNED[nbytes]}")
            at = offset + nbytes
        return struct.Struct("".join(fmt))
