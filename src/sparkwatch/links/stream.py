"""What every link does with its agent's frames, whatever carries them (WebSocket messages or SSH stdout
lines): a hello sets the boot the frames belong to, samples and gaps are batched and stored under it,
clock-probe replies are handed back to the link."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sparkwatch.links.state import LinkError, LinkState
from sparkwatch.store import Store
from sparkwatch.wire import GapFrame, HelloFrame, SampleFrame, TimeFrame, decode_lines, latest_summary

log = logging.getLogger(__name__)


class StreamIngest:
    def __init__(
        self, store: Store, state: LinkState, on_hello: Callable[[HelloFrame], None] | None = None
    ) -> None:
        self._store = store
        self._state = state
        self._on_hello = on_hello
        self.boot: str | None = None  # of the latest hello on this stream
        self._samples: list[SampleFrame] = []
        self._gaps: list[GapFrame] = []

    @property
    def pending(self) -> int:
        """Frames held for the next :meth:`flush`."""
        return len(self._samples) + len(self._gaps)

    def feed(self, text: str) -> list[TimeFrame]:
        """Take one message's frames; returns the clock-probe replies among them."""
        replies: list[TimeFrame] = []
        node = self._state.node
        for frame in decode_lines(text, node):
            if isinstance(frame, HelloFrame):
                self.flush()  # what came before belongs to the previous hello's boot
                self.boot = frame.boot_id
                self._record_hello(frame)
            elif isinstance(frame, TimeFrame):
                replies.append(frame)
            elif self.boot is None:
                raise LinkError("stream sent samples before its hello")
            elif isinstance(frame, GapFrame):
                self._gaps.append(frame)
            elif frame.boot_id != self.boot:
                log.warning(
                    "node %s: skipped sample %d of boot %s on a stream of boot %s",
                    node,
                    frame.seq,
                    frame.boot_id,
                    self.boot,
                )
            else:
                self._samples.append(frame)
        return replies

    def flush(self) -> None:
        """Store what is held, in one transaction."""
        if not self.pending or self.boot is None:
            return
        samples, gaps = self._samples, self._gaps
        self._samples, self._gaps = [], []
        state = self._state
        state.samples_ingested += self._store.ingest(state.node, self.boot, samples, gaps)
        if samples:
            last = samples[-1]
            state.last_seq = last.seq
            state.last_sample_wall_ns = last.t_wall_ns
            state.latest = latest_summary(last)

    def _record_hello(self, hello: HelloFrame) -> None:
        state = self._state
        self._store.record_hello(state.node, hello.data)
        if state.boot_id not in (None, hello.boot_id):
            log.warning("node %s: agent restarted (boot %s -> %s)", state.node, state.boot_id, hello.boot_id)
        state.boot_id = hello.boot_id
        state.hello = hello.data
        if self._on_hello is not None:
            self._on_hello(hello)
