"""Retry and polling schedules, injected so tests can run them instantly."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable


async def every(
    interval_s: float, monotonic: Callable[[], float], work: Callable[[], Awaitable[object]]
) -> None:
    """``work`` every ``interval_s`` on an absolute schedule on ``monotonic``: one that overruns skips the
    ticks it missed, never bunches them. Runs until cancelled."""
    deadline = monotonic()
    while True:
        await work()
        deadline += interval_s
        now = monotonic()
        deadline = max(deadline, now)
        await asyncio.sleep(deadline - now)


class ExponentialBackoff:
    """initial, initial·factor, … capped at ``maximum`` seconds; ``reset()`` after a success.

    With ``jitter`` > 0 each delay is shortened by a random fraction of up to ``jitter`` of it, so clients
    that failed together (nodes behind one switch, agents of one restarted coordinator) do not retry in
    step. ``rand`` returns numbers in [0, 1); each backoff has its own generator unless one is given.
    """

    def __init__(
        self,
        initial_s: float = 1.0,
        factor: float = 2.0,
        maximum_s: float = 60.0,
        jitter: float = 0.0,
        rand: Callable[[], float] | None = None,
    ) -> None:
        if initial_s <= 0 or factor < 1 or maximum_s < initial_s:
            raise ValueError("backoff needs initial > 0, factor >= 1 and maximum >= initial")
        if not 0 <= jitter < 1:
            raise ValueError("backoff jitter must be within [0, 1)")
        self._initial = initial_s
        self._factor = factor
        self._maximum = maximum_s
        self._jitter = jitter
        self._rand = rand or random.Random().random
        self._next = initial_s

    def next_delay_s(self) -> float:
        delay = self._next
        self._next = min(self._maximum, self._next * self._factor)
        return delay * (1.0 - self._jitter * self._rand()) if self._jitter else delay

    def reset(self) -> None:
        self._next = self._initial
