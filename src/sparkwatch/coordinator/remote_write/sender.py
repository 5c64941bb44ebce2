"""The remote-write sender: a bounded in-memory queue the links fill after each stored batch, and one
asyncio task that sends it in batches, in order, one request at a time (a receiver such as Prometheus
refuses a sample older than the series' newest with 400, so requests never overtake each other).

- ``offer`` never blocks and never waits: it appends the link's list of stored frames (O(1)) or, when
  the queue holds ``capacity`` samples already, drops what does not fit and counts it. ``offer_meter``
  does the same for one stored wall-meter reading (counted as one sample).
- A batch is sent once ``batch_samples`` wait, or ``batch_wait_s`` after the first of them arrived; the
  frames are parsed, mapped and encoded in a thread of the writer's own (batch.py, proto.py), so a large
  batch never holds the event loop that ingests.
- 2xx is sent. 5xx, 429 and a connection error or timeout are retried with exponential backoff and jitter
  (429's Retry-After is honoured, up to the backoff's maximum) until they succeed or the coordinator
  stops; any other answer (a 4xx such as 400 "out of order sample") is final: the batch is dropped and
  counted as rejected, with the receiver's reason in the log. A 400 of a batch of several nodes' samples
  is final for the node(s) it was about: the receiver refuses a whole request for one bad sample, so
  the batch goes again one node at a time, and only the nodes refused then are dropped.
- At stop, what is queued gets until the stop timeout to go out; the rest is counted as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import aiohttp

from sparkwatch.coordinator.remote_write.answers import not_sent, refusal_hint, retry_after_s, shown_url
from sparkwatch.coordinator.remote_write.batch import Entry, Held, Part, Stamped, node_parts
from sparkwatch.coordinator.remote_write.proto import HEADERS, Messages
from sparkwatch.coordinator.remote_write.series import Key
from sparkwatch.coordinator.remote_write.spec import RemoteWriteError, RemoteWriteSpec
from sparkwatch.core.clock import ClockOffset
from sparkwatch.store.meters import MeterReading
from sparkwatch.wire import SampleFrame
from sparkwatch_agent.shared.backoff import ExponentialBackoff
from sparkwatch_agent.shared.http import other_service

log = logging.getLogger(__name__)

#: Stored samples held at most (queued or being sent): about 20 min of 4 nodes at 10 Hz; a full queue of
#: simulated GB10 frames holds ≈ 60 MiB (benchmarks/remote_write_queue.py).
CAPACITY_SAMPLES = 50_000
#: Stored samples per request (≈ 35 series each for a GB10: ≈ 17 500 series samples, ≈ 60 kB on the wire).
BATCH_SAMPLES = 500
BATCH_WAIT_S = 1.0
REQUEST_TIMEOUT_S = 30.0
#: The longest wait between two tries of one request (and the most of a 429's Retry-After honoured).
RETRY_MAX_S = 30.0
#: Rejections logged: the first few, then one every this many.
LOG_FIRST, LOG_EVERY = 5, 100
#: The most of a receiver's answer quoted in a log line.
QUOTED_CHARS = 300

Outcome = Literal["sent", "retry", "rejected"]
#: The answer of a request that held a bad sample (out of order, out of bounds, a duplicate with another
#: value): Prometheus refuses the whole request with it (a receiver that keeps the good samples and still
#: answers 400, as Mimir does, gets those again, the same values, when the batch goes node by node).
BAD_DATA = 400
DropReason = Literal["queue_full", "rejected", "unreadable", "stopped"]


@dataclass(slots=True)
class WriterStats:
    """Counts in stored samples (an agent's sample or a meter's reading), read by the coordinator's
    /metrics."""

    capacity: int
    sent: int = 0
    pending: int = 0  # queued or in the request being sent
    retries: int = 0  # requests that failed and were tried again
    dropped: dict[str, int] = field(default_factory=dict)  # by reason (DropReason)


class Refused(NamedTuple):
    status: int
    detail: str


class RemoteWriter:
    def __init__(
        self,
        spec: RemoteWriteSpec,
        *,
        capacity: int = CAPACITY_SAMPLES,
        batch_samples: int = BATCH_SAMPLES,
        batch_wait_s: float = BATCH_WAIT_S,
        timeout_s: float = REQUEST_TIMEOUT_S,
        retry_max_s: float = RETRY_MAX_S,
        backoff: ExponentialBackoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``backoff`` and ``sleep`` are injected so tests see every retry delay without waiting."""
        self.spec = spec
        self.url = shown_url(spec.url)
        self.stats = WriterStats(capacity)
        self._batch_samples = batch_samples
        self._batch_wait_s = batch_wait_s
        self._timeout_s = timeout_s
        self._retry_max_s = retry_max_s
        self._backoff = backoff or ExponentialBackoff(initial_s=0.5, maximum_s=retry_max_s, jitter=0.5)
        self._sleep = sleep
        self._queue: deque[Entry] = deque()
        self._queued = 0  # samples in the queue (pending less the batch being sent)
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._stopping = False
        self._failing = False  # the last request failed (logged once until one succeeds)
        self._overflowing = False  # the queue was full (logged once until there is room again)
        self._rejections = 0  # requests refused for good
        self._splits = 0  # batches refused for a bad sample and sent again node by node
        self._task: asyncio.Task[None] | None = None
        self._messages: Messages | None = None  # built in the encoding thread, used only there
        self._last_ms: dict[Stamped, int] = {}  # each node's (meter's) last stamp encoded (encoding thread)
        self._last_series: dict[Stamped, list[Key]] = {}  # each one's last series sent (encoding thread)

    # ---- the ingest side -------------------------------------------------------------------------
    def offer(
        self,
        node: str,
        hello: Mapping[str, Any] | None,
        frames: Sequence[SampleFrame],
        offset: ClockOffset | None = None,
    ) -> None:
        """Queue a link's stored frames (their lines and stamps: :class:`Held`) with the clock estimate that
        stamps them (batch.py); never blocks."""
        stats = self.stats
        if self._stopping:
            self._drop("stopped", len(frames))
            return
        room = stats.capacity - stats.pending
        if len(frames) > room:
            self._drop("queue_full", len(frames) - max(room, 0))
            frames = frames[: max(room, 0)]
        if frames:
            self._enqueue(Entry(node, hello, Held.of(frames), offset))

    def offer_meter(self, node: str, reading: MeterReading, failed_polls: int = 0) -> None:
        """Queue one stored meter reading, ``node`` the name its series carry, with the meter's failed
        polls so far; never blocks."""
        if self._stopping:
            self._drop("stopped", 1)
        elif self.stats.pending >= self.stats.capacity:
            self._drop("queue_full", 1)
        else:
            self._enqueue(Entry(node, None, (), meter=reading, meter_failed_polls=failed_polls))

    def offer_end(self, node: str, domain: str | None = None) -> None:
        """The node's stream stopped (its link lost the agent) or, with ``domain``, its meter stopped
        answering: the series they sent last are marked stale, as a receiver marks a target it can no
        longer scrape (batch.py); never blocks, never dropped (it holds no sample)."""
        if not self._stopping:
            self._enqueue(Entry(node, None, (), ended=node if domain is None else (node, domain)))

    def _enqueue(self, entry: Entry) -> None:
        if self._overflowing and self.stats.pending + entry.samples < self.stats.capacity:
            self._overflowing = False
            log.info("remote write to %s: the queue has room again", self.url)
        self._queue.append(entry)
        self.stats.pending += entry.samples
        self._queued += entry.samples
        self._arrived.set()
        if self._queued >= self._batch_samples:
            self._full.set()

    def _drop(self, reason: DropReason, count: int) -> None:
        if count <= 0:
            return
        self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + count
        if reason == "queue_full" and not self._overflowing:  # once, until there is room again
            self._overflowing = True
            log.warning(
                "remote write to %s: the queue is full (%d samples); new samples are dropped and counted"
                " until it has room (the SQLite file keeps them)",
                self.url,
                self.stats.capacity,
            )

    # ---- the lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="remote-write")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued for up to ``timeout_s``, then give up on the rest (counted as dropped)."""
        self._stopping = True
        self._arrived.set()
        self._full.set()
        if self._task is None:
            return
        done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
        if not done:
            self._task.cancel()
            await asyncio.wait({self._task})
        if self.stats.dropped.get("stopped"):
            log.warning(
                "remote write to %s: %d samples were not sent in the %g s the stop allows",
                self.url,
                self.stats.dropped["stopped"],
                timeout_s,
            )

    async def _run(self) -> None:
        executor = ThreadPoolExecutor(1, thread_name_prefix="sparkwatch-remote-write")
        timeout = aiohttp.ClientTimeout(total=self._timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                while await self._wait_for_batch():
                    await self._deliver(session, executor, *self._take())
        except asyncio.CancelledError:
            self._drop("stopped", self.stats.pending)
            self.stats.pending = self._queued = 0
            self._queue.clear()
            raise
        finally:
            executor.shutdown(wait=False)

    async def _wait_for_batch(self) -> bool:
        """Until a batch is due; False once stopping with nothing left."""
        while not self._queue:
            if self._stopping:
                return False
            self._arrived.clear()
            await self._arrived.wait()
        if self._queued < self._batch_samples and not self._stopping:
            self._full.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._batch_wait_s):
                    await self._full.wait()
        return True

    def _take(self) -> tuple[list[Entry], int]:
        """The oldest entries, up to ``batch_samples`` samples (an entry is split where it must be)."""
        taken: list[Entry] = []
        count = 0
        while self._queue and count < self._batch_samples:
            entry = self._queue.popleft()
            room = self._batch_samples - count
            if len(entry.frames) > room:  # a meter's entry is one sample: room is at least 1
                self._queue.appendleft(entry._replace(frames=entry.frames[room:]))
                entry = entry._replace(frames=entry.frames[:room])
            taken.append(entry)
            count += entry.samples
        self._queued -= count
        return taken, count

    # ---- the receiver side -----------------------------------------------------------------------
    def _encode(self, entries: list[Entry]) -> tuple[list[Part], bytes | None, int]:
        """In the writer's thread: each node's part, the body of them all (None: no series at all), and how
        many frames could not be read back. Grouped node by node (each keeps its own stamps and series),
        so a part is its node's alone when the batch must go again node by node."""
        if self._messages is None:
            self._messages = Messages()
        parts, merged, unreadable = node_parts(entries, self._last_ms, self._last_series)
        return parts, (self._messages.encode(merged) if merged else None), unreadable

    async def _deliver(
        self, session: aiohttp.ClientSession, executor: ThreadPoolExecutor, entries: list[Entry], count: int
    ) -> None:
        """A batch with any series is posted: staleness markers alone (a stream's end) count no sample, and
        encoding them has already let go of what would make them again."""
        loop = asyncio.get_running_loop()
        parts, body, unreadable = await loop.run_in_executor(executor, self._encode, entries)
        self._drop("unreadable", unreadable)
        refused = None if body is None else await self._send(session, body, count - unreadable)
        sent = [part for part in parts if part.series]
        if refused is not None and refused.status == BAD_DATA and len(sent) > 1:
            self.stats.pending -= count - sum(part.samples for part in sent)  # what no part sends again
            await self._apart(session, executor, sent, refused.detail)  # each part's once it is settled
            return
        if refused is not None:
            self._rejected(count - unreadable, refused.detail)
        self.stats.pending -= count

    async def _apart(
        self, session: aiohttp.ClientSession, executor: ThreadPoolExecutor, parts: list[Part], detail: str
    ) -> None:
        """A batch refused for a bad sample, again one node at a time: one node's sample out of order (a
        second writer of its series, a clock stepped back) does not drop every other node's."""
        self._splits += 1
        if self._splits <= LOG_FIRST or self._splits % LOG_EVERY == 0:  # as often as the refusals' lines
            log.info(
                "remote write to %s: a batch was refused (%s); sending it node by node", self.url, detail
            )
        assert self._messages is not None  # made by the batch's encoding
        for part in parts:
            body = await asyncio.get_running_loop().run_in_executor(
                executor, self._messages.encode, part.series
            )
            refused = await self._send(session, body, part.samples)
            if refused is not None:
                self._rejected(part.samples, f"node {part.node}: {refused.detail}")
            self.stats.pending -= part.samples  # settled: a stop now counts only the parts still to go

    async def _send(self, session: aiohttp.ClientSession, body: bytes, count: int) -> Refused | None:
        """Post until the receiver takes the batch (None) or refuses it for good (its answer)."""
        while True:
            outcome, detail, retry_after_s, status = await self._post(session, body)
            if outcome == "sent":
                self.stats.sent += count
                self._backoff.reset()
                if self._failing:
                    log.info("remote write to %s: sending again", self.url)
                    self._failing = False
                return None
            if outcome == "rejected":
                return Refused(status, detail)
            self.stats.retries += 1
            delay_s = self._backoff.next_delay_s()
            if retry_after_s is not None:
                delay_s = max(delay_s, min(retry_after_s, self._retry_max_s))
            if not self._failing:
                log.warning("remote write to %s failed (%s); retrying with backoff", self.url, detail)
                self._failing = True
            await self._sleep(delay_s)

    def _rejected(self, count: int, detail: str) -> None:
        self._drop("rejected", count)
        self._failing = False
        self._rejections += 1
        if self._rejections <= LOG_FIRST or self._rejections % LOG_EVERY == 0:
            last = self._rejections == LOG_FIRST
            more = f"; from here on one refusal in {LOG_EVERY} is logged" if last else ""
            log.warning(
                "remote write to %s: %d samples refused, not retried (%s)%s", self.url, count, detail, more
            )

    async def _post(
        self, session: aiohttp.ClientSession, body: bytes
    ) -> tuple[Outcome, str, float | None, int]:
        """The outcome, what to say of it, a 429's or 5xx's Retry-After, and the HTTP status (0: none)."""
        headers = dict(HEADERS)
        try:
            authorization = self.spec.authorization()
        except RemoteWriteError as exc:  # a secret file gone since the start: retried, it may come back
            return "retry", str(exc), None, 0
        if authorization is not None:
            headers["Authorization"] = authorization
        try:
            async with session.post(self.spec.url, data=body, headers=headers, allow_redirects=False) as r:
                said = (await r.content.read(QUOTED_CHARS)).decode("utf-8", "replace").strip()
                status, retry_after, location = (
                    r.status,
                    r.headers.get("Retry-After"),
                    r.headers.get("Location"),
                )
                service = other_service(r.headers, "")  # an agent or a coordinator given as the receiver
        except TimeoutError:  # its message is empty
            return "retry", f"no answer within {self._timeout_s:g} s", None, 0
        except (aiohttp.ClientError, OSError) as exc:
            return "retry", not_sent(exc), None, 0
        detail = f"HTTP {status}: {said}" if said else f"HTTP {status}"
        detail += refusal_hint(status, authorization is not None, location, service)
        if 200 <= status < 300:
            return "sent", detail, None, status
        if status == 429 or status >= 500:
            return "retry", detail, retry_after_s(retry_after), status
        return "rejected", detail, None, status
