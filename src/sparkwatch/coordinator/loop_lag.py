"""How late the coordinator's event loop runs: the wait every link, every API call and every heartbeat
shares whenever some piece of work holds the loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client.core import HistogramMetricFamily

#: Upper bounds of the histogram's buckets, in seconds.
BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopLag:
    """A timer that asks to wake every ``every_s``; each wake-up later than asked is one observation (like
    Node's ``monitorEventLoopDelay``: a stall of 3 s is one observation of about 3 s, not 60)."""

    def __init__(self, every_s: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self._every_s = every_s
        self._clock = clock
        self._counts = [0] * (len(BUCKETS_S) + 1)
        self._sum_s = 0.0

    def observe(self, lag_s: float) -> None:
        lag_s = max(0.0, lag_s)
        index = next((i for i, bound in enumerate(BUCKETS_S) if lag_s <= bound), len(BUCKETS_S))
        self._counts[index] += 1
        self._sum_s += lag_s

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            asked = self._clock()
            await asyncio.sleep(self._every_s)
            self.observe(self._clock() - asked - self._every_s)

    def family(self) -> HistogramMetricFamily:
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, BUCKETS_S), "+Inf"), self._counts, strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        return HistogramMetricFamily(
            "sparkwatch_coordinator_event_loop_lag_seconds",
            "How much later than asked a 50 ms timer on the coordinator's event loop fired.",
            buckets=buckets,
            sum_value=self._sum_s,
        )
