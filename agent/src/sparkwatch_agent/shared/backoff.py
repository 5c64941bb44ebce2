"""Retry schedules, injected so tests can run them instantly."""

from __future__ import annotations


class ExponentialBackoff:
    """initial, initial·factor, … capped at ``maximum`` seconds; ``reset()`` after a success."""

    def __init__(self, initial_s: float = 1.0, factor: float = 2.0, maximum_s: float = 60.0) -> None:
        if initial_s <= 0 or factor < 1 or maximum_s < initial_s:
            raise ValueError("backoff needs initial > 0, factor >= 1 and maximum >= initial")
        self._initial = initial_s
        self._factor = factor
        self._maximum = maximum_s
        self._next = initial_s

    def next_delay_s(self) -> float:
        delay = self._next
        self._next = min(self._maximum, self._next * self._factor)
        return delay

    def reset(self) -> None:
        self._next = self._initial
