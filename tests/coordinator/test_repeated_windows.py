"""A harness file imported beside the proxy that holds the proxy's requests again (core/repeated_windows):
each request was stored twice, its tokens counted twice, joules per token halved. The rule, and the
coordinator's store applying it at an import's commit."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from sparkwatch.core.repeated_windows import TOLERANCE_NS, repeated, verdict
from sparkwatch.core.windows import Window
from sparkwatch.store import NotFound, RepeatsProxy, Store
from sparkwatch.store.run_rows import RunRow

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
    assert take and said is not None
    assert said.endswith("and were left out: the proxy's windows stand for those requests")


def test_the_verdict_says_when_the_file_gives_the_requests_another_phase() -> None:
    """A guidellm warm-up the proxy (no --warmup) took for timed: dropping the file drops that phase, so
    the note says it."""
    proxy = [_w("p0", 0, 500), _w("p1", 1000, 1500)]
    harness = [dataclasses.replace(_w("h0", 1, 501), phase="warmup"), _w("h1", 1001, 1501)]
    take, said = verdict("guidellm", "b.json", repeated(proxy, harness), 2)
    assert not take and said is not None
    assert said.endswith("; 1 of them have another phase in the file than the proxy gave them (give the proxy"
                         " a --warmup that matches the harness's)")  # fmt: skip


def _proxied(wid: str, start_ms: float, end_ms: float) -> Window:
    return dataclasses.replace(_w(wid, start_ms, end_ms), source={"kind": "proxy", "clock": "wall"})


def _harness(wid: str, start_ms: float, end_ms: float, fmt: str = "guidellm") -> Window:
    return dataclasses.replace(_w(wid, start_ms, end_ms), source={"format": fmt})


def test_the_store_drops_an_import_of_the_proxys_requests_at_its_commit(tmp_path: pathlib.Path) -> None:
    """`sparkwatch import` (or any API client) into a run the proxy served: the coordinator compares at the
    commit, so a file imported after the run is judged like one `sparkwatch run --import` holds."""
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0)
    store.create_run(RunRow("r1", "bench", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [_proxied(f"p{k}", 1000 * k, 1000 * k + 500) for k in range(4)])
    # a source that holds a proxy's kind deeper down (the stored text matches the read's filter) is not
    # the proxy's: nothing below may pair with it
    decoy = dataclasses.replace(
        _w("decoy", 5000, 5500), source={"format": "plain", "meta": {"kind": "proxy"}}
    )
    store.add_windows("r1", [decoy])

    again = store.begin_import("r1")
    store.add_windows("r1", [_harness(f"h{k}", 1000 * k + 3, 1000 * k + 498) for k in range(4)], again)
    with pytest.raises(RepeatsProxy) as refused:
        store.commit_import("r1", again)
    assert (refused.value.repeats, refused.value.windows) == (4, 4)
    assert str(refused.value).startswith(
        f"4 of the 4 window(s) in import {again} (guidellm) repeat the proxy's"
    )
    assert store.count_windows("r1") == 5  # nothing of it, and the import is gone
    with pytest.raises(NotFound):
        store.commit_import("r1", again)

    own = store.begin_import("r1")  # one request again, four of its own: taken without the one, and said
    store.add_windows(
        "r1",
        [
            _harness("h0", 2, 501, "plain"),
            _harness("near-decoy", 5002, 5499, "plain"),
            *(_harness(f"o{k}", 200 * k, 250 * k + 3000, "plain") for k in range(3)),
        ],
        own,
    )
    count, note = store.commit_import("r1", own)
    assert count == 4 and store.count_windows("r1") == 9
    assert "h0" not in {w.id for w in store.windows("r1")}  # the proxy's p0 stands for that request
    assert note is not None and note.startswith(f"1 of the 5 window(s) in import {own} (plain) repeat")
    assert note.endswith("and were left out: the proxy's windows stand for those requests")

    other_proxy = store.begin_import("r1")  # windows a proxy posted as an import: the proxy's own kind
    store.add_windows("r1", [_proxied("q0", 1, 501)], other_proxy)
    assert store.commit_import("r1", other_proxy) == (1, None)
    nothing = store.begin_import("r1")
    store.add_windows("r1", [_harness("far", 9000, 9500)], nothing)
    assert store.commit_import("r1", nothing) == (1, None)


def test_without_proxy_windows_an_import_is_never_compared(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0)
    store.create_run(RunRow("r1", "bench", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [_harness("plain-0", 0, 500, "plain")])
    same = store.begin_import("r1")
    store.add_windows("r1", [_harness("h0", 0, 500)], same)
    assert store.commit_import("r1", same) == (1, None)


def _exported(wid: str, start_ms: float, end_ms: float) -> Window:
    """A proxy window as `import export` stores it: the export's format, the proxy's source in ``taken``."""
    source = {"format": "export", "taken": {"kind": "proxy", "clock": "coordinator"}}
    return dataclasses.replace(_w(wid, start_ms, end_ms), source=source)


def test_an_exports_proxy_windows_are_the_proxys_whichever_is_imported_first(tmp_path: pathlib.Path) -> None:
    """`import export` of a proxied run, then `import aiperf` of the same requests (or the other way round):
    both were committed, each request twice, its tokens counted twice and joules per token halved."""
    store = Store(tmp_path / "sw.db", now_ns=lambda: T0)
    for run in ("r1", "r2"):
        store.create_run(RunRow(run, "bench", T0, None, 0.1, 0.5, "request"))
    exported = [_exported(f"p{k}", 1000 * k, 1000 * k + 500) for k in range(3)]
    harness = [_harness(f"h{k}", 1000 * k + 2, 1000 * k + 499, "aiperf") for k in range(3)]

    first = store.begin_import("r1")
    store.add_windows("r1", exported, first)
    assert store.commit_import("r1", first) == (3, None)
    again = store.begin_import("r1")
    store.add_windows("r1", harness, again)
    with pytest.raises(RepeatsProxy) as refused:
        store.commit_import("r1", again)
    assert str(refused.value).startswith(
        f"3 of the 3 window(s) in import {again} (aiperf) repeat the proxy's"
    )
    assert {w.id for w in store.windows("r1")} == {"p0", "p1", "p2"}

    first = store.begin_import("r2")
    store.add_windows("r2", harness, first)
    assert store.commit_import("r2", first) == (3, None)
    later = store.begin_import("r2")  # the export's proxy windows of the requests the harness file holds
    own = [_exported(f"own{k}", 9000 + 1000 * k, 9500 + 1000 * k) for k in range(4)]
    store.add_windows("r2", [*exported, *own], later)
    count, note = store.commit_import("r2", later)
    assert count == 4 and {w.id for w in store.windows("r2")} == {"h0", "h1", "h2", *(w.id for w in own)}
    assert note is not None
    assert note.startswith(
        f"3 of the 7 window(s) in import {later} (export) repeat windows already in the run"
    )
    assert note.endswith("and were left out: the windows already in the run stand for those requests")
    exported_again = store.begin_import("r2")  # and mostly the same requests: not imported, and said
    store.add_windows(
        "r2", [_exported(f"q{k}", 1000 * k + 1, 1000 * k + 500) for k in range(3)], exported_again
    )
    with pytest.raises(RepeatsProxy) as refused:
        store.commit_import("r2", exported_again)
    assert "the same requests again, not imported" in str(refused.value)
    assert str(refused.value).endswith("the export keeps the windows already in the run")
    assert store.count_windows("r2") == 7
