"""The proxy's windows on the coordinator's clock.

A proxy may run on another host than the coordinator, whose wall clock may be off or step. Like a node's
samples, its windows are stamped with its own monotonic clock and mapped through a line fitted to round
trips to the coordinator's ``/v1/time`` (core.clock), so neither an offset nor a step of the proxy's wall
clock moves a window. Without a first round trip there is nothing to map with: starting fails, with the
reason, rather than stamping on a clock nobody checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from sparkwatch.client import CoordinatorClient, CoordinatorError
from sparkwatch.core.clock import MonoFit, OffsetRound, TimeProbe, estimate_offset, fit_monotonic
from sparkwatch.core.windows import COORDINATOR_CLOCK

log = logging.getLogger(__name__)

PROBES = 8
PROBE_EVERY_S = 10.0
#: Rounds the line is fitted to (ten minutes at one round every 10 s).
ROUNDS_KEPT = 60


class WallClock:
    """The proxy host's own wall clock, for windows nobody joins to samples (printed, not posted)."""

    label = "proxy_wall"
    uncertainty_ns: int | None = None

    def __init__(self, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.now_ns = wall_ns


class ProxyClock:
    """``now_ns()`` is coordinator time, from the proxy's monotonic clock and the fitted line."""

    label = COORDINATOR_CLOCK

    def __init__(
        self,
        client: CoordinatorClient,
        mono_ns: Callable[[], int] = time.monotonic_ns,
        every_s: float = PROBE_EVERY_S,
    ) -> None:
        self._client = client
        self._mono = mono_ns
        self._every_s = every_s
        self._rounds: deque[OffsetRound] = deque(maxlen=ROUNDS_KEPT)
        self._fit: MonoFit | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def uncertainty_ns(self) -> int | None:
        return self._fit.uncertainty_ns if self._fit is not None else None

    def now_ns(self) -> int:
        if self._fit is None:
            raise RuntimeError("ProxyClock.start() was not awaited")
        return self._fit.at(self._mono())

    async def start(self) -> None:
        """One round now (a CoordinatorError when the coordinator cannot be asked), then every 10 s."""
        await self._round()
        self._task = asyncio.create_task(self._loop(), name="sparkwatch-proxy-clock")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _round(self) -> None:
        probes = []
        for _ in range(PROBES):
            sent = self._mono()
            reply = await self._client.time()
            # roles reversed from a node's probe: our monotonic clock brackets the coordinator's wall time
            probes.append(TimeProbe(sent, reply.t_wall_ns, self._mono()))
        estimate = estimate_offset(probes)
        mono_offset = -estimate.offset_ns  # coordinator wall − our monotonic
        self._rounds.append(OffsetRound(self._mono() + mono_offset, 0, estimate.uncertainty_ns, mono_offset))
        self._fit = fit_monotonic(self._rounds)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            try:
                await self._round()
            except CoordinatorError as exc:  # the last line still holds; say so once a round
                log.warning("proxy clock: no round trip to the coordinator this time: %s", exc)
