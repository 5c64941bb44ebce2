"""Where the proxy's windows go: posted to a run on a coordinator, or printed as JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import TextIO

import orjson

from sparkwatch.client import CoordinatorClient, CoordinatorError
from sparkwatch.core.windows import Window, after_end

log = logging.getLogger(__name__)

#: The 409 that says an earlier try stored this window (its answer was lost); a 409 ``run_ended`` is a loss.
DUPLICATE_IDS = "duplicate_window_ids"
#: The 409 of a window outside an ended run's span: the run ended under a proxy still posting to it.
RUN_ENDED = "run_ended"
#: Windows kept after the run ended (a proxy left running for days would otherwise grow without bound).
MAX_AFTER_END = 100_000


class PrintSink:
    """One JSON object per window (the API's window body) on a text stream, for a proxy with no run."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self._out = out

    def submit(self, window: Window) -> None:
        self._out.write(orjson.dumps(window.to_body()).decode() + "\n")
        self._out.flush()


class RunPoster:
    """Posts windows to a run in small batches from a background task, so a request never waits on the
    coordinator. A post that fails in transit keeps its windows and is retried; a batch the coordinator
    refuses (4xx) is retried window by window, so one bad window cannot hold back the others — a window
    refused as a duplicate was stored by an earlier try whose answer was lost. :meth:`close` drains."""

    def __init__(
        self, client: CoordinatorClient, run_id: str | None = None, batch_delay_s: float = 0.2
    ) -> None:
        self.run_id = run_id  # may be set after construction, before start()
        self.stored = 0
        self.refused: list[tuple[Window, str]] = []
        self.after_end: list[Window] = []  # of those refused, the windows that came after the run ended
        self.after_end_dropped = 0  # past MAX_AFTER_END: counted, not kept
        self._run_end_ns: int | None = None  # where the run ended, once a refusal said so
        self._client = client
        self._delay_s = batch_delay_s
        self._pending: list[Window] = []
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, window: Window) -> None:
        # once the run has ended, a window past its end (core.windows.after_end) is kept, not posted; one in
        # flight at the end (it started before and ends within the slack) is still the run's
        if self._run_end_ns is not None and after_end(window, self._run_end_ns):
            self._after_end(window)
            return
        self._pending.append(window)
        self._wake.set()

    def _after_end(self, window: Window) -> None:
        if len(self.after_end) < MAX_AFTER_END:
            self.after_end.append(window)
        else:
            self.after_end_dropped += 1

    def start(self) -> None:
        if self.run_id is None:
            raise RuntimeError("RunPoster.start() before its run id was set")
        self._task = asyncio.create_task(self._loop(), name="sparkwatch-window-poster")

    async def _post(self, batch: list[Window]) -> None:
        """Store or refuse every window of ``batch``. On a transit error the windows not yet handled go
        back to the front of the queue (and only those: none is counted or refused twice)."""
        assert self.run_id is not None
        try:
            self.stored += await self._client.add_windows(self.run_id, batch)
            return
        except CoordinatorError as exc:
            if not exc.refused:
                self._pending = batch + self._pending
                raise
            if len(batch) == 1:
                if exc.code == DUPLICATE_IDS:
                    self.stored += 1  # the id is ours and unique: an earlier try stored it
                elif exc.code == RUN_ENDED:
                    if not self.after_end:  # said once: every later window is refused the same way
                        log.error(
                            "run %s has ended: the proxy's windows are no longer stored in it (%s)",
                            self.run_id,
                            exc,
                        )
                    self._after_end(batch[0])
                    if exc.t_end_ns is not None:
                        self._run_end_ns = exc.t_end_ns
                else:
                    log.error("window %s refused by the coordinator: %s", batch[0].id, exc)
                    self.refused.append((batch[0], str(exc)))
                return
        for i, window in enumerate(batch):
            try:
                await self._post([window])
            except CoordinatorError:
                # the failed window is back at the front; the rest of the batch follows it
                self._pending = self._pending[:1] + batch[i + 1 :] + self._pending[1:]
                raise

    async def _post_pending(self) -> None:
        batch, self._pending = self._pending, []
        await self._post(batch)

    async def _loop(self) -> None:
        retry_s = 0.5
        while True:
            await self._wake.wait()
            if not self._closing.is_set():
                await asyncio.sleep(self._delay_s)  # gather the windows of requests ending together
            self._wake.clear()
            if self._pending:
                try:
                    await self._post_pending()
                    retry_s = 0.5
                except CoordinatorError as exc:
                    if self._closing.is_set():
                        log.error(
                            "%d window(s) not stored in run %s: %s", len(self._pending), self.run_id, exc
                        )
                        return
                    log.warning(
                        "%d window(s) not posted yet (%s); retry in %.1f s", len(self._pending), exc, retry_s
                    )
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(retry_s):
                            await self._closing.wait()
                    retry_s = min(retry_s * 2, 10.0)
                    self._wake.set()
                    continue
            if self._closing.is_set() and not self._pending:
                return
            if self._pending:
                self._wake.set()  # submitted while the last post was in flight

    async def close(self) -> list[Window]:
        """Post what is left (never cancelling a post in flight, which might have been stored); returns
        the windows that were not stored, refused ones included."""
        self._closing.set()
        self._wake.set()
        if self._task is None and self._pending:
            self.start()
        if self._task is not None:
            await self._task
            self._task = None
        if self.after_end_dropped:
            log.error(
                "%d more window(s) after run %s ended were not kept", self.after_end_dropped, self.run_id
            )
        return [*self._pending, *(w for w, _reason in self.refused), *self.after_end]
