"""When a link stores what its agent sent: at once while a run wants samples, held a few seconds while
idle (a commit writes about three 16 KiB pages however little it holds), and never lost at a stream's end.
A real Store on a temp file; the clock is a list of times."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any, cast

import pytest

from helpers.frames import sample_frame
from sparkwatch.coordinator.run_pace import FOREVER_NS, PROMPT_AFTER_END_NS, prompt_until_ns
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.clock import ClockOffset
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkState
from sparkwatch.links.stream import IDLE_BATCH, IDLE_HOLD_S, StreamIngest
from sparkwatch.links.ws_link import WsLink
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow

HELLO = '{"type":"hello","boot_id":"b1","node":"n1"}'
T0_NS = 1_800_000_000_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[Store]:
    s = Store(tmp_path / "c.db")
    yield s
    s.close()


def _ingest(store: Store, clock: Clock, hold_s: float = 0.0, batch: int = 1) -> StreamIngest:
    state = LinkState(node="n1", transport="test")
    ingest = StreamIngest(store, state, mono_s=clock, hold_s=hold_s, batch=batch)
    ingest.feed(HELLO)
    return ingest


def _send(ingest: StreamIngest, seq: int, promptly: bool) -> None:
    ingest.feed(sample_frame(seq, {"power_w": 50.0}).raw)
    ingest.settle(promptly)


def test_idle_samples_are_held_then_stored_together_and_a_run_stores_them_at_once(store: Store) -> None:
    clock = Clock()
    ingest = _ingest(store, clock)
    _send(ingest, 1, promptly=False)  # the stream's first sample: at once (a link just up is seen to work)
    assert store.count_samples("n1") == 1
    for seq in range(2, 6):  # one a second, idle: held
        clock.now_s += 1.0
        _send(ingest, seq, promptly=False)
    assert store.count_samples("n1") == 1 and ingest.pending == 4
    # what a link waiting for its next message waits at most: until the first held one is due
    assert ingest.due_in_s(promptly=False) == pytest.approx(IDLE_HOLD_S - 3.0)
    assert ingest.due_in_s(promptly=True) == 0.0
    clock.now_s += IDLE_HOLD_S - 3.0  # the first held one has waited IDLE_HOLD_S
    _send(ingest, 6, promptly=False)
    assert store.count_samples("n1") == 6 and ingest.pending == 0
    assert ingest.due_in_s(promptly=False) is None  # nothing held: wait as long as it takes
    clock.now_s += 1.0
    _send(ingest, 7, promptly=False)
    assert ingest.pending == 1
    _send(ingest, 8, promptly=True)  # a run opened: what is held goes in with it
    assert store.count_samples("n1") == 8 and ingest.pending == 0


def test_idle_samples_go_in_at_a_batch_and_at_the_streams_end(store: Store) -> None:
    clock = Clock()
    ingest = _ingest(store, clock)
    _send(ingest, 1, promptly=False)
    for seq in range(2, 2 + IDLE_BATCH):  # a burst (an agent's ring replayed) in no time
        _send(ingest, seq, promptly=False)
    assert store.count_samples("n1") == 1 + IDLE_BATCH
    _send(ingest, 2 + IDLE_BATCH, promptly=False)
    assert ingest.pending == 1
    ingest.flush_held()  # the stream ends
    assert store.count_samples("n1") == 2 + IDLE_BATCH and ingest.pending == 0


def test_a_links_own_pace_holds_while_a_run_is_open(store: Store) -> None:
    """SSH exec's pace (a line a sample): up to hold_s or batch frames, even while a run wants them."""
    clock = Clock()
    ingest = _ingest(store, clock, hold_s=0.2, batch=3)
    _send(ingest, 1, promptly=True)
    assert ingest.pending == 1  # 0 s held
    clock.now_s += 0.2
    ingest.settle(True)
    assert store.count_samples("n1") == 1
    for seq in (2, 3, 4):
        _send(ingest, seq, promptly=True)
    assert store.count_samples("n1") == 4  # the batch of 3


def test_a_store_that_fails_at_the_streams_end_is_logged_not_raised(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    ingest = _ingest(store, clock)
    _send(ingest, 1, promptly=False)
    clock.now_s += 1.0
    _send(ingest, 2, promptly=False)
    store.close()  # a store that cannot take the write any more
    ingest.flush_held()
    assert "node n1: 1 held frame(s) not stored at the end of its stream" in caplog.text


def _run(t_end_ns: int | None) -> RunRow:
    return RunRow(id="r", name="r", t_start_ns=1, t_end_ns=t_end_ns, interval_s=0.1, gate_threshold=0.5,
                  scope="request")  # fmt: skip


def test_runs_want_samples_stored_at_once_while_open_and_a_minute_after() -> None:
    end = 10**18
    assert prompt_until_ns([]) == 0
    assert prompt_until_ns([_run(end), _run(None)]) == FOREVER_NS
    assert prompt_until_ns([_run(end), _run(end - 5)]) == end + PROMPT_AFTER_END_NS  # its end waits for them


def test_an_idle_links_clock_estimates_are_stored_once_a_minute_a_runs_every_round(
    tmp_path: pathlib.Path,
) -> None:
    """Every round stamps what the link hands on (its state); stored, while idle, a boot's first and then
    one a minute (each commit ~49 KiB: every 10 s it was half an idle link's writes); every round while a
    run wants samples."""
    stamps = iter(range(T0_NS, T0_NS + 10**12, 10**9))
    store = Store(tmp_path / "c.db", now_ns=lambda: next(stamps))
    clock, prompt = Clock(), [False]
    spec = NodeSpec(name="spark-1", url="ws://127.0.0.1:9")
    link = WsLink(spec, store, cast(Any, None), holder="h", desired_interval=lambda: None,
                  store_promptly=lambda: prompt[0], mono_s=clock)  # fmt: skip

    def rounds() -> int:
        return sum(len(r) for r in store.offset_rounds("spark-1", 0, 2**62).values())

    try:
        for k in range(12):  # two minutes of idle rounds, one every 10 s
            link._record_offset("b1", ClockOffset(1000 + k, 10, 5, 5))
            assert link.state.offset is not None and link.state.offset.offset_ns == 1000 + k
            clock.now_s += 10.0
        assert rounds() == 2  # the first, and one at 60 s
        link._record_offset("b2", ClockOffset(7, 10, 5, 5))  # a new boot: its first at once
        assert rounds() == 3
        prompt[0] = True
        for k in range(3):
            link._record_offset("b2", ClockOffset(8 + k, 10, 5, 5))
            clock.now_s += 10.0
        assert rounds() == 6
    finally:
        store.close()


def test_the_coordinator_wants_samples_at_once_while_a_run_is_open_and_a_minute_after(
    tmp_path: pathlib.Path,
) -> None:
    """What the coordinator hands its links as ``store_promptly``, worked out as runs open and end."""
    now = [T0_NS]
    store = Store(tmp_path / "c.db", now_ns=lambda: now[0])
    coordinator = Coordinator([], store, now_ns=lambda: now[0])
    try:
        assert not coordinator.store_promptly()
        run = coordinator.open_run("r", 0.1, 0.5, "request")
        now[0] += 3600 * 10**9
        assert coordinator.store_promptly()  # open an hour: still
        coordinator.end_run(run.id)
        now[0] += PROMPT_AFTER_END_NS - 1
        assert coordinator.store_promptly()
        now[0] += 2
        assert not coordinator.store_promptly()
        assert Coordinator([], store, now_ns=lambda: now[0]).store_promptly() is False  # after a restart too
    finally:
        store.close()
