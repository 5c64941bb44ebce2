"""What every link does with its agent's frames, whatever carries them (WebSocket messages or SSH stdout
lines): a hello sets the boot the frames belong to, samples and gaps are batched and stored under it,
clock-probe replies are handed back to the link.

A frame's content never ends a link: a line that is not a usable frame, a sample before any hello, of
another boot than its stream's, or whose seq does not move forward is skipped and counted by reason
(``LinkState.frames_rejected``, the coordinator's ``sparkwatch_coordinator_frames_rejected_total``),
with a warning for the first few of each reason and then one every ``LOG_EVERY``.
"""

from __future__ import annotations

import itertools
import logging
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sparkwatch.core.clock import ClockOffset
from sparkwatch.hello_facts import misnamed
from sparkwatch.links.state import LinkState, latest_summary
from sparkwatch.store import Store
from sparkwatch.wire import (
    Frame,
    GapFrame,
    HelloFrame,
    Rejected,
    SampleFrame,
    TimeFrame,
    decode_lines,
)

log = logging.getLogger(__name__)

#: Where stored samples go next (the remote writer's ``offer``): the coordinator's node name, the hello of
#: their stream, the samples the store took and the link's latest clock estimate for their boot (None
#: before any). It must return at once: it runs on the ingest path.
SampleSink = Callable[[str, Mapping[str, Any] | None, Sequence[SampleFrame], ClockOffset | None], None]

#: While no run wants them (:meth:`StreamIngest.settle`), frames are held this long, or until this many
#: wait, before they are stored: a commit writes about three 16 KiB pages (the block's row and its two
#: index entries) however little it holds, so an idle node stored each second wrote ≈ 49 KiB per 1 Hz sample
#: (≈ 4 GB a day); held 5 s, ≈ 10 KiB. The agent's ring keeps them meanwhile: a link that breaks resumes.
IDLE_HOLD_S = 5.0
IDLE_BATCH = 100

#: Warnings for the first rejections of a reason on a link, then one every this many.
LOG_FIRST = 5
LOG_EVERY = 1000

_BOOT = operator.attrgetter("boot_id")
_SEQ = operator.attrgetter("seq")


class StreamIngest:
    def __init__(
        self,
        store: Store,
        state: LinkState,
        on_hello: Callable[[HelloFrame], None] | None = None,
        on_stored: Callable[[], None] | None = None,
        sink: SampleSink | None = None,
        *,
        hold_s: float = 0.0,
        batch: int = 1,
        mono_s: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_stored`` runs after each batch the store took: the link is doing its work (a link that
        connects but cannot store, say with the disk full, keeps backing off). ``sink`` gets the samples
        each batch stored that were new (see :meth:`flush`). ``hold_s`` and ``batch``: how long, and up to
        how many, the link's frames may be held before :meth:`settle` stores them while a run wants them."""
        self._store = store
        self._state = state
        self._on_hello = on_hello
        self._on_stored = on_stored
        self._sink = sink
        self._hold_s = hold_s
        self._batch = batch
        self._mono = mono_s
        self._held_since: float | None = None  # when what is held began to be held
        self._stored_any = False  # this stream has stored a sample
        self.boot: str | None = None  # of the latest hello on this stream
        self._last_seq = 0  # of the latest sample of that boot on this stream
        self._samples: list[SampleFrame] = []
        self._gaps: list[GapFrame] = []

    @property
    def pending(self) -> int:
        """Frames held for the next :meth:`flush`."""
        return len(self._samples) + len(self._gaps)

    def feed(self, text: str) -> list[TimeFrame]:
        """Take one message's frames; returns the clock-probe replies among them."""
        replies: list[TimeFrame] = []
        frames, rejected = decode_lines(text)
        for bad in rejected:
            self.reject(bad)
        if self._take_samples(frames):
            return replies
        for frame in frames:
            if isinstance(frame, HelloFrame):
                self.flush()  # what came before belongs to the previous hello's boot
                self.boot, self._last_seq = frame.boot_id, 0
                self._record_hello(frame)
            elif isinstance(frame, TimeFrame):
                replies.append(frame)
            elif self.boot is None:
                self.reject(Rejected("before_hello", "a frame before the stream's hello", _seq(frame)))
            elif isinstance(frame, GapFrame):
                self._gaps.append(frame)
            elif frame.boot_id != self.boot:
                detail = f"a sample of boot {frame.boot_id} on a stream of boot {self.boot}"
                self.reject(Rejected("foreign_boot", detail, frame.seq))
            elif frame.seq <= self._last_seq:
                detail = f"seq {frame.seq} after seq {self._last_seq}"
                self.reject(Rejected("seq_not_forward", detail, frame.seq))
            else:
                self._last_seq = frame.seq
                self._samples.append(frame)
        return replies

    def _take_samples(self, frames: list[Frame]) -> bool:
        """Hold the frames at once when all are samples the loop in :meth:`feed` would take one by one
        (of this stream's boot, seqs rising from above the last): what a stream sends but for its hello,
        checked here in a few passes of C instead of a Python step per frame."""
        count = len(frames)
        if not count or self.boot is None or list(map(type, frames)).count(SampleFrame) != count:
            return False
        samples = cast(list[SampleFrame], frames)
        seqs = list(map(_SEQ, samples))
        if seqs[0] <= self._last_seq or list(map(_BOOT, samples)).count(self.boot) != count:
            return False  # (count compares: a set would hash every boot_id, a new string each)
        if not all(map(operator.lt, seqs, itertools.islice(seqs, 1, None))):
            return False
        self._samples.extend(samples)
        self._last_seq = seqs[-1]
        return True

    def settle(self, promptly: bool) -> None:
        """Store what is held once it is due: at the link's own pace (``hold_s``, ``batch``) when
        ``promptly`` (a run wants its samples now) or before this stream has stored any (a link just up is
        seen to work), else after IDLE_HOLD_S or at IDLE_BATCH frames (or the link's batch, if larger)."""
        due_s = self.due_in_s(promptly)
        if due_s is not None and due_s <= 0:
            self.flush()

    def due_in_s(self, promptly: bool) -> float | None:
        """How long until what is held is due (≤ 0: now); None when nothing is held. A link waits no longer
        than this for its next message, so an agent sampling every 10 s is not stored 20 s late."""
        if not self.pending:
            return None
        now = self._mono()
        if self._held_since is None:
            self._held_since = now
        if promptly or not self._stored_any:
            hold_s, batch = self._hold_s, self._batch
        else:
            hold_s, batch = IDLE_HOLD_S, max(IDLE_BATCH, self._batch)
        return 0.0 if self.pending >= batch else hold_s - (now - self._held_since)

    def flush_held(self, offer: bool = True) -> None:
        """:meth:`flush` at a stream's end: a store that fails now is logged, not raised (the stream is
        ending already, for its own reason; a link that resumes gets the frames again from the agent)."""
        held = self.pending
        try:
            self.flush(offer)
        except Exception as exc:  # whatever the store raised: the end goes on
            log.warning(
                "node %s: %d held frame(s) not stored at the end of its stream: %s",
                self._state.node,
                held,
                exc,
            )

    def flush(self, offer: bool = True) -> None:
        """Store what is held, in one transaction; and hand the new samples to the sink unless ``offer``
        is False (an ssh-exec session that ends before its first clock probe has no estimate to stamp
        them with: they are stored only, as the export, with no offset round for that boot, leaves them)."""
        if not self.pending or self.boot is None:
            return
        samples, gaps = self._samples, self._gaps
        self._samples, self._gaps = [], []
        self._held_since = None
        state = self._state
        sink = self._sink if offer else None
        top = self._store.last_seq(state.node, self.boot) if sink is not None and samples else 0
        inserted = self._store.ingest(state.node, self.boot, samples, gaps)
        state.samples_ingested += inserted
        if sink is not None and inserted:
            # a stream's samples rise in seq: when the store had some (a resumed link's re-sends), the new
            # ones are those above its top seq before this batch, and the others are not sent again
            sink(
                state.node,
                state.hello,
                samples if inserted == len(samples) else [s for s in samples if s.seq > top],
                state.offset_for(self.boot),
            )
        if self._on_stored is not None:
            self._on_stored()
        if samples:
            self._stored_any = True
            last = samples[-1]
            state.last_seq = last.seq
            state.last_sample_wall_ns = last.t_wall_ns
            state.latest = latest_summary(last)

    def reject(self, bad: Rejected) -> None:
        """Count (and, for the first few, log) a frame that cannot be used, found here or by the link."""
        counts = self._state.frames_rejected
        count = counts[bad.reason] = counts.get(bad.reason, 0) + 1
        if count <= LOG_FIRST or count % LOG_EVERY == 0:
            where = f" seq {bad.seq}" if bad.seq is not None else ""
            log.warning(
                "node %s: skipped a frame%s (%s, %d so far): %s",
                self._state.node,
                where,
                bad.reason,
                count,
                bad.detail,
            )

    def _record_hello(self, hello: HelloFrame) -> None:
        state = self._state
        self._store.record_hello(state.node, hello.data)
        if state.boot_id not in (None, hello.boot_id):
            log.warning("node %s: agent restarted (boot %s -> %s)", state.node, state.boot_id, hello.boot_id)
        if state.boot_id != hello.boot_id and (warning := misnamed(state.node, hello.data)) is not None:
            state.warn(warning)  # once per agent boot, not at each reconnection
        state.boot_id = hello.boot_id
        state.hello = hello.data
        if self._on_hello is not None:
            self._on_hello(hello)


def _seq(frame: SampleFrame | GapFrame) -> int | None:
    return frame.seq if isinstance(frame, SampleFrame) else None
