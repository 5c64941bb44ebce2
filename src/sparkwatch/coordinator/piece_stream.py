"""Bytes made in a worker thread and written out on the event loop while they are made: an 8 h run's export
answer is 27 MB of JSON, which the coordinator used to hold whole before the first byte went out.

The thread hands each piece over and waits while ``DEPTH`` pieces wait unread (the reader sets the pace);
when the reader goes away (the client closed the connection), :meth:`PieceStream.put` answers False and
the thread stops making pieces instead of waiting for room for ever.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

from sparkwatch.coordinator.big_values import CollectorPause, let_go
from sparkwatch.core.json_pieces import json_pieces
from sparkwatch.core.window_rows import WindowsTap
from sparkwatch.window_spool import WindowSpool, wire_pieces

log = logging.getLogger(__name__)
#: The most of an export answer's windows spooled in the temporary folder (an 8 h run's 10 000 windows are
#: 27 MB); past it, the answer makes them again, as before the spool.
SPOOL_MAX_BYTES = 128 * 2**20

#: Chunks waiting to be written at most (each about ``CHUNK_BYTES``).
DEPTH = 4
#: How often a thread waiting for room looks whether the reader has gone.
POLL_S = 0.25
#: Small pieces are joined up to about this many bytes before they are handed over: an export is some
#: 8 000 pieces, most of them a key or a number, and each hand-over costs tens of microseconds.
CHUNK_BYTES = 1 << 20


def coalesced(pieces: Iterable[bytes], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """``pieces`` joined into chunks of at least ``size`` bytes (the last one shorter), in order."""
    held: list[bytes] = []
    length = 0
    for piece in pieces:
        held.append(piece)
        length += len(piece)
        if length >= size:
            yield b"".join(held)
            held, length = [], 0
    if held:
        yield b"".join(held)


class _End:
    """The last item: the pieces are complete, or how making them failed."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class PieceStream:
    """Made on the loop; the thread calls :meth:`put` and :meth:`finish`, the loop iterates and closes.
    Room is a semaphore the reader releases, so a hand-over never waits on the loop nor races it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, depth: int = DEPTH) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[bytes | _End] = asyncio.Queue()  # bounded by ``_room``
        self._room = threading.Semaphore(depth)
        self._closed = threading.Event()

    # ---- the worker thread's side --------------------------------------------------------------
    def put(self, piece: bytes) -> bool:
        """Hand ``piece`` over, waiting for room; False once the reader has gone (stop making)."""
        return self._hand_over(piece)

    def finish(self, error: BaseException | None = None) -> None:
        """No more pieces: all were made, or ``error`` stopped it (the reader raises it)."""
        self._hand_over(_End(error))

    def _hand_over(self, item: bytes | _End) -> bool:
        while not self._closed.is_set():
            if self._room.acquire(timeout=POLL_S):
                try:
                    self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
                except RuntimeError:  # the loop has closed: nobody reads any more
                    return False
                return True
        return False

    # ---- the event loop's side -----------------------------------------------------------------
    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            item = await self._queue.get()
            self._room.release()
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item

    def close(self) -> None:
        """The reader is done (or gone): a waiting thread stops at its next look."""
        self._closed.set()


def settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    """On the loop: the export is computed (or failed), unless its caller went away meanwhile."""
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


def log_failure(worker: asyncio.Future[None]) -> None:
    """A worker thread (an export's, a run's windows') that failed outside what it hands over (closing its
    read connection)."""
    if not worker.cancelled() and worker.exception() is not None:
        log.error("answer worker failed", exc_info=worker.exception())


async def computed_json(
    compute: Callable[[], Any],
    pause: CollectorPause,
    encode: Callable[[Any], Iterable[bytes]] = json_pieces,
    after: Callable[[], None] | None = None,
) -> PieceStream:
    """``compute()``'s value as JSON pieces (``encode``: json_pieces, or pieces of the same bytes that reuse
    what the computation encoded already), computed and encoded in a worker thread, the collector paused
    while each chunk is made (big_values.py says why). Returns once the value is computed (its errors
    raised here, before an answer starts), the pieces then made while they are read; the caller closes
    the stream. ``compute`` runs under ``pause`` itself where it builds a large value. ``after`` runs in
    the worker once it is done, whatever happened (what ``encode`` read from is let go there)."""
    loop = asyncio.get_running_loop()
    pieces = PieceStream(loop)
    computed: asyncio.Future[None] = loop.create_future()

    def work() -> None:
        try:
            value = compute()
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, computed, exc)
            return
        loop.call_soon_threadsafe(settle, computed, None)
        chunks = coalesced(encode(value))
        try:  # the collector paused while a chunk is made, not while the client reads it
            if all(pieces.put(chunk) for chunk in pause.each(chunks)):
                pieces.finish()
        except Exception as exc:  # the answer has begun: the reader ends it unfinished
            pieces.finish(exc)
        finally:
            let_go(value)

    def worked() -> None:
        try:
            work()
        finally:
            if after is not None:
                after()

    loop.run_in_executor(None, worked).add_done_callback(log_failure)
    try:
        await computed
    except BaseException:  # the computation failed, or the caller went away meanwhile
        pieces.close()
        raise
    return pieces


async def computed_export(compute: Callable[[WindowsTap], Any], pause: CollectorPause) -> PieceStream:
    """An export's JSON pieces (:func:`computed_json`), its windows encoded once: ``compute`` hands them, as
    the digest's pass makes them, to a spool that the answer copies (window_spool; they were made twice:
    the second pass was about 0.3 s of an 8 h run's 10 000 windows)."""
    spools: list[WindowSpool] = []  # made in the worker (its temporary file is no loop's wait), once

    def computed() -> Any:
        spools.append(WindowSpool(wire_form=True, max_bytes=SPOOL_MAX_BYTES))
        return compute(spools[0])

    def closed() -> None:
        for spool in spools:
            spool.close()

    return await computed_json(computed, pause, lambda export: wire_pieces(export, spools[0]), after=closed)
