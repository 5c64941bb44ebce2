"""Keeping the coordinator's database small while it runs (store/retention.py says what goes): a retention
pass every ``RETENTION_EVERY_S``, and a deleted run's samples dropped once its rows are purged.

Each step is one short transaction on the window thread's connection, so a pass over months of data never
holds the write lock long (the links, meters and marks write between steps) or stalls the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar, cast

from sparkwatch.defaults import RETENTION_EVERY_S
from sparkwatch.store import Corrupt, Damaged, Store, StoreError, corrupt_or_none

log = logging.getLogger(__name__)
T = TypeVar("T")

InWindowThread = Callable[[Callable[[Store], T]], Awaitable[T]]


class Housekeeping:
    def __init__(
        self,
        in_window_thread: InWindowThread[object],
        retain_idle_s: float | None,
        every_s: float = RETENTION_EVERY_S,
        store_path: Path | None = None,
    ) -> None:
        """``retain_idle_s`` None: keep idle samples for ever (deleted runs' samples still go);
        ``store_path``: the file named when it is found damaged."""
        self._in_thread = in_window_thread
        self.store_path = store_path
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
            except Exception as exc:  # a bug must not end retention for good: said once per pass
                self._said(exc)
            self.passes += 1
            await asyncio.sleep(self._every_s)

    def _said(self, exc: Exception) -> None:
        """A pass that failed, in one line where the store said why (a bug's with its trace)."""
        if (corrupt := corrupt_or_none(exc, self.store_path)) is not None:
            log.error("retention waits, dropping nothing: %s", corrupt)
        elif isinstance(exc, Damaged):  # no span to trust: drop nothing rather than a misread run's samples
            log.warning("retention waits, dropping nothing: %s (mend the row, or delete the run)", exc)
        elif isinstance(exc, StoreError):
            log.warning("retention pass cut short (%s); the next one goes on", exc)
        else:
            log.exception("retention pass failed; the next one tries again")

    async def purge_run(self, run_id: str) -> None:
        """A deleted run's rows, then its samples no other run covers and the free pages: one short
        transaction per turn of the window thread, so batches and imports queued meanwhile go in between,
        and a stop or crash part-way leaves a run nobody sees, finished at the next start (its row goes
        last, after its samples)."""
        try:
            span = await self._deleted_span(run_id)
            while not await self._in_thread(lambda store: store.purge_step(run_id)):
                pass
            if span is not None:
                dropped = await self._steps(lambda store: store.drop_run_samples(span))
                log.info("run %s: %d sample blocks dropped with it", run_id, dropped)
            await self._in_thread(lambda store: store.forget_run(run_id))
        except Exception as exc:  # a task of its own: said here, in one line where the store said why
            if (corrupt := corrupt_or_none(exc, self.store_path)) is None and not isinstance(exc, StoreError):
                raise
            level = logging.WARNING if corrupt is None else logging.ERROR  # as retention says damage
            log.log(
                level,
                "run %s: its rows are not all removed yet (%s); the next start goes on",
                run_id,
                corrupt or exc,
            )

    async def _deleted_span(self, run_id: str) -> tuple[int, int] | None:
        """The deleted run's span, for its samples; a row damaged outside sparkwatch has none to trust, so
        its rows still go and its samples are left to idle retention (not dropped by a guessed span)."""
        try:
            span = await self._in_thread(lambda store: store.deleted_run_span(run_id))
        except Damaged as exc:
            if isinstance(exc, Corrupt):
                raise
            log.warning("run %s: %s; its samples are left to idle retention", run_id, exc)
            return None
        return cast(tuple[int, int] | None, span)

    async def _steps(self, make: Callable[[Store], Iterator[int]]) -> int:
        """Advance the step iterator ``make`` builds, one step per turn of the window thread."""
        steps = await self._in_thread(make)
        assert isinstance(steps, Iterator)
        total = 0
        while (step := await self._in_thread(lambda _store: next(steps, None))) is not None:
            assert isinstance(step, int)
            total += step
        return total
