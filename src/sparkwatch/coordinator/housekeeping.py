"""Keeping the coordinator's database small while it runs (store/retention.py says what goes): a retention
pass every ``RETENTION_EVERY_S``, and a deleted run's samples dropped once its rows are purged.

Each step is one short transaction on the window thread's connection, so a pass over months of data never
holds the write lock long (the links, meters and marks write between steps) or stalls the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

from sparkwatch.defaults import RETENTION_EVERY_S
from sparkwatch.store import Damaged, Store, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")

InWindowThread = Callable[[Callable[[Store], T]], Awaitable[T]]


class Housekeeping:
    def __init__(
        self,
        in_window_thread: InWindowThread[object],
        retain_idle_s: float | None,
        every_s: float = RETENTION_EVERY_S,
    ) -> None:
        """``retain_idle_s`` None: keep idle samples for ever (deleted runs' samples still go)."""
        self._in_thread = in_window_thread
        self.retain_idle_s = retain_idle_s
        self._every_s = every_s
        self.passes = 0  # completed retention passes (for /metrics and tests)

    async def run(self) -> None:
        """A pass at start (a coordinator restarted after a week catches up at once), then one per period."""
        if self.retain_idle_s is None:
            return
        retain_ns = int(self.retain_idle_s * 1e9)
        while True:
            try:
                dropped = await self._steps(lambda store: store.retention_steps(retain_ns))
                if dropped:
                    log.info("retention: dropped %d sample blocks no run covers", dropped)
            except Damaged as exc:  # no span to trust: drop nothing rather than a misread run's samples
                log.warning("retention waits, dropping nothing: %s (mend the row, or delete the run)", exc)
            except StoreError as exc:
                log.warning("retention pass cut short (%s); the next one goes on", exc)
            except Exception:  # a bug must not end retention for good: said once per pass, with its trace
                log.exception("retention pass failed; the next one tries again")
            self.passes += 1
            await asyncio.sleep(self._every_s)

    async def drop_run_samples(self, run_id: str, span: tuple[int, int] | None) -> None:
        """After a deleted run's rows are gone: its samples no other run covers, then the free pages."""
        if span is None:
            return
        dropped = await self._steps(lambda store: store.drop_run_samples(span))
        log.info("run %s: %d sample blocks dropped with it", run_id, dropped)

    async def _steps(self, make: Callable[[Store], Iterator[int]]) -> int:
        """Advance the step iterator ``make`` builds, one step per turn of the window thread."""
        steps = await self._in_thread(make)
        assert isinstance(steps, Iterator)
        total = 0
        while (step := await self._in_thread(lambda _store: next(steps, None))) is not None:
            assert isinstance(step, int)
            total += step
        return total
