"""A harness file imported beside the proxy that holds the proxy's requests again (commands/repeated_windows):
each request was stored twice, its tokens counted twice, joules per token halved."""

from __future__ import annotations

import dataclasses

from sparkwatch.commands.repeated_windows import TOLERANCE_NS, repeated, verdict
from sparkwatch.core.windows import Window

MS = 1_000_000
T0 = 1_800_000_000 * 1_000_000_000


def _w(wid: str, start_ms: float, end_ms: float) -> Window:
    return Window(wid, "timed", T0 + round(start_ms * MS), T0 + round(end_ms * MS))


def test_each_harness_window_pairs_with_one_proxy_window_by_start_and_end() -> None:
    """Concurrent requests starting within a millisecond of each other pair one for one, by their ends."""
    proxy = [_w("p1", 0, 900), _w("p2", 0.4, 400), _w("p3", 1000, 1500)]
    harness = [_w("h2", 3, 402), _w("h1", 2, 903), _w("h3", 1008, 1497)]  # a few ms off, as measured
    assert len(repeated(proxy, harness)) == 3
    assert len(repeated(proxy, [_w("h1", 2, 903), _w("again", 2, 903)])) == 1  # one proxy window pairs once


def test_a_window_of_another_span_never_pairs() -> None:
    """A whole benchmark's window (the first request's start, the last one's end) is not a request again."""
    proxy = [_w("p1", 0, 300), _w("p2", 310, 600), _w("p3", 620, 900)]
    assert repeated(proxy, [_w("whole", 0, 900)]) == []
    edge = TOLERANCE_NS / MS
    assert repeated(proxy, [_w("late", edge + 1, 300)]) == []
    assert len(repeated(proxy, [_w("close", edge - 1, 300 - edge + 1)])) == 1


def test_the_verdict_keeps_the_proxys_windows_when_half_or_more_repeat() -> None:
    proxy = [_w(f"p{k}", 1000 * k, 1000 * k + 500) for k in range(12)]
    harness = [_w(f"h{k}", 1000 * k + 2, 1000 * k + 501) for k in range(12)]
    assert verdict("guidellm", "b.json", [], 12) == (True, None)
    take, said = verdict("guidellm", "b.json", repeated(proxy, harness[:6]), 12)
    assert not take and said is not None
    assert said.startswith("6 of the 12 window(s) in b.json (guidellm) repeat the proxy's")
    assert "not imported (each would be counted twice)" in said and "another phase" not in said
    take, said = verdict("plain", "x.csv", repeated(proxy, harness[:1]), 3)
    assert take and said is not None and said.endswith("those requests are counted twice")


def test_the_verdict_says_when_the_file_gives_the_requests_another_phase() -> None:
    """A guidellm warm-up the proxy (no --warmup) took for timed: dropping the file drops that phase, so
    the note says it."""
    proxy = [_w("p0", 0, 500), _w("p1", 1000, 1500)]
    harness = [dataclasses.replace(_w("h0", 1, 501), phase="warmup"), _w("h1", 1001, 1501)]
    take, said = verdict("guidellm", "b.json", repeated(proxy, harness), 2)
    assert not take and said is not None
    assert said.endswith("; 1 of them have another phase in the file than the proxy gave them (give the proxy"
                         " a --warmup that matches the harness's)")  # fmt: skip
