"""The API's 409s, on a real coordinator over HTTP with a SQLite file: a window id the run holds or the
batch repeats is named in the refusal (never SQLite's wording) and nothing of the batch is kept; an ended
run takes no marks and only windows inside its span (what `sparkwatch import` sends after a run)."""

from __future__ import annotations

import asyncio
import gzip
import json
import pathlib
import re
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from helpers.inproc_api import inproc_api
from sparkwatch.client import CoordinatorClient, CoordinatorTarget
from sparkwatch.coordinator.api.bodies import HALF_PAIR
from sparkwatch.core.windows import Window
from sparkwatch.proxy.sinks import RunPoster
from sparkwatch.proxy.spill import spill_lost
from sparkwatch.store.refusals import ENDED_RUN_SLACK_NS
from sparkwatch.store.windows import CHUNK_ROWS

S = 1_000_000_000
T0 = 1_800_000_000 * S  # 2027-01-15T08:00:00Z
RUN_S = 100


@dataclass
class Api:
    client: TestClient[Any, Any]
    db: pathlib.Path
    clock: list[int]

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        response = await self.client.request(method, path, json=body)
        return response.status, await response.json()

    def rows(self) -> int:
        """Every window row in the file, staged ones included."""
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT COUNT(*) FROM windows").fetchone()[0])

    async def visible(self, run: str) -> int:
        status, body = await self.call("GET", f"/v1/runs/{run}")
        assert status == 200
        return int(body["windows"])

    async def new_run(self, ended: bool = False) -> str:
        self.clock[0] = T0
        status, run = await self.call("POST", "/v1/runs", {"name": "conflicts"})
        assert status == 201
        if ended:
            await self.end(run["id"])
        return str(run["id"])

    async def end(self, run: str) -> None:
        self.clock[0] = T0 + RUN_S * S
        assert (await self.call("POST", f"/v1/runs/{run}/end"))[0] == 200
        self.clock[0] = T0 + 2 * RUN_S * S  # later: what arrives now arrives after the end


@pytest.fixture
async def api(tmp_path: pathlib.Path) -> AsyncIterator[Api]:
    async with inproc_api(tmp_path / "c.db", T0) as (client, _store, clock):
        yield Api(client, tmp_path / "c.db", clock)


def window(wid: str, start_s: float = 1, length_s: float = 1) -> dict[str, Any]:
    start = T0 + int(start_s * S)
    return {"id": wid, "phase": "timed", "t_start_ns": start, "t_end_ns": start + int(length_s * S)}


def batch(*ids: str) -> dict[str, Any]:
    return {"windows": [window(i) for i in ids]}


def assert_duplicates(status: int, body: Any, ids: list[str], count: int) -> None:
    assert status == 409, body
    assert body["error"] == "duplicate_window_ids"
    assert body["duplicate_ids"] == ids and body["duplicates"] == count
    assert all(repr(i) in body["reason"] for i in ids)
    assert "UNIQUE" not in body["reason"] and "constraint" not in body["reason"]


async def test_an_id_the_run_holds_is_named_and_nothing_of_the_batch_is_kept(api: Api) -> None:
    run = await api.new_run()
    assert (await api.call("POST", f"/v1/runs/{run}/windows", batch("a", "b")))[0] == 201
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", batch("c", "b", "d"))
    assert_duplicates(status, body, ["b"], 1)
    already = "is already in it (stored, or staged by an import)"
    assert body["reason"] == f"window ids must be unique within run {run}: 'b' {already}"
    assert await api.visible(run) == 2 and api.rows() == 2  # "c" and "d" were not kept either


async def test_many_duplicates_are_named_a_few_then_counted(api: Api) -> None:
    run = await api.new_run()
    taken = [f"w{i:02}" for i in range(12)]
    assert (await api.call("POST", f"/v1/runs/{run}/windows", batch(*taken)))[0] == 201
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", batch("new", *reversed(taken)))
    assert_duplicates(status, body, ["w11", "w10", "w09", "w08", "w07"], 12)
    assert body["reason"].endswith(
        "'w11', 'w10', 'w09', 'w08', 'w07' and 7 more are already in it (stored, or staged by an import)"
    )
    assert api.rows() == 12


async def test_ids_repeated_inside_one_batch_are_a_409_naming_them(api: Api) -> None:
    run = await api.new_run()
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", batch("x", "y", "x", "z", "y", "x"))
    assert_duplicates(status, body, ["x", "y"], 2)
    assert "'x', 'y' appear more than once in the batch" in body["reason"]
    assert api.rows() == 0


async def test_a_duplicate_in_the_last_chunk_of_a_large_batch_leaves_nothing(api: Api) -> None:
    run = await api.new_run()
    assert (await api.call("POST", f"/v1/runs/{run}/windows", batch("taken")))[0] == 201
    ids = [f"w{i}" for i in range(2 * CHUNK_ROWS + 10)] + ["taken"]
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", batch(*ids))
    assert_duplicates(status, body, ["taken"], 1)
    assert api.rows() == 1 and await api.visible(run) == 1  # no chunk of it is left, staged or not


async def test_imports_name_ids_staged_before_in_this_import_or_another(api: Api) -> None:
    run = await api.new_run()
    first = (await api.call("POST", f"/v1/runs/{run}/imports", {}))[1]["import_id"]
    into_first = {**batch("a", "b"), "import_id": first}
    assert (await api.call("POST", f"/v1/runs/{run}/windows", into_first))[0] == 201
    again = {**batch("c", "a"), "import_id": first}  # a second batch of the same import repeats "a"
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", again)
    assert_duplicates(status, body, ["a"], 1)
    assert "unfinished import" not in body["reason"]  # its own import: not one to drop
    second = (await api.call("POST", f"/v1/runs/{run}/imports", {}))[1]["import_id"]
    other = {**batch("b", "e"), "import_id": second}
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", other)
    assert_duplicates(status, body, ["b"], 1)
    # what a retry after a killed `sparkwatch import` meets: which import holds them, and how it goes
    assert body["reason"].endswith(
        f"; 1 unfinished import(s) stage some, e.g. {first}, last written at 2027-01-15T08:00:00.000Z: it is"
        f" dropped when an import begins 10 min after that, or now by DELETE /v1/runs/{run}/imports/{first}"
    ), body["reason"]
    assert api.rows() == 2
    status, body = await api.call("POST", f"/v1/runs/{run}/imports/{first}/commit", {})
    assert status == 200 and body["committed"] == 2
    assert await api.visible(run) == 2


async def test_a_mark_named_like_a_window_is_a_duplicate_when_it_begins(api: Api) -> None:
    run = await api.new_run()
    assert (await api.call("POST", f"/v1/runs/{run}/windows", batch("gen")))[0] == 201
    path = f"/v1/runs/{run}/marks"
    status, body = await api.call("POST", path, {"name": "gen", "event": "begin"})
    assert_duplicates(status, body, ["gen"], 1)
    assert "a mark ends as a window of its name" in body["reason"]
    assert (await api.call("POST", path, {"name": "gen", "event": "end"}))[0] == 404  # it never began
    assert api.rows() == 1


async def test_a_mark_whose_name_a_window_took_meanwhile_is_dropped_when_it_ends(api: Api) -> None:
    """Else it stayed open for ever: ending it refused, beginning it again refused as already open."""
    run = await api.new_run()
    path = f"/v1/runs/{run}/marks"
    assert (await api.call("POST", path, {"name": "gen", "event": "begin"}))[0] == 201
    assert (await api.call("POST", f"/v1/runs/{run}/windows", batch("gen")))[0] == 201
    status, body = await api.call("POST", path, {"name": "gen", "event": "end"})
    assert_duplicates(status, body, ["gen"], 1)
    assert "the mark is dropped" in body["reason"]
    assert (await api.call("POST", path, {"name": "gen", "event": "end"}))[0] == 404
    assert (await api.call("POST", path, {"name": "gen2", "event": "begin"}))[0] == 201
    assert api.rows() == 1


async def test_a_mark_that_cannot_end_as_a_window_is_refused_and_stays_open(api: Api) -> None:
    """The coordinator's clock stepped back past a mark's begin (or its row was edited): the mark ended as
    a window that ends before it starts, stored unchecked, after which the run's windows and export were a
    409 "damaged window" for good. Refused now, with nothing stored; the mark stays open to end later."""
    run = await api.new_run()
    path = f"/v1/runs/{run}/marks"
    api.clock[0] = T0 + 10 * S
    assert (await api.call("POST", path, {"name": "m", "event": "begin"}))[0] == 201
    api.clock[0] = T0 + 5 * S  # stepped back 5 s
    status, body = await api.call("POST", path, {"name": "m", "event": "end"})
    assert status == 400 and body["reason"] == (
        f"mark 'm' of run {run} cannot end as a window: t_end_ns: ends before it starts"
        f" ({T0 + 5 * S} < t_start_ns {T0 + 10 * S})"
    )
    assert api.rows() == 0 and (await api.call("GET", f"/v1/runs/{run}/windows"))[0] == 200
    with sqlite3.connect(api.db) as db:
        db.execute("UPDATE marks SET t_begin_ns = 'abc'")
    status, body = await api.call("POST", path, {"name": "m", "event": "end"})
    assert status == 409 and body["reason"] == (
        f"mark 'm' of run {run} is damaged in the database: t_begin_ns 'abc'"
    )
    with sqlite3.connect(api.db) as db:
        db.execute("UPDATE marks SET t_begin_ns = ?", (T0 + 2 * S,))
    api.clock[0] = T0 + 20 * S
    assert (await api.call("POST", path, {"name": "m", "event": "end"}))[0] == 200 and api.rows() == 1


async def test_a_phase_goes_with_a_mark_that_begins(api: Api) -> None:
    run = await api.new_run()
    path = f"/v1/runs/{run}/marks"
    assert (await api.call("POST", path, {"name": "m", "event": "begin", "phase": "warmup"}))[0] == 201
    status, body = await api.call("POST", path, {"name": "m", "event": "end", "phase": "warmup"})
    assert status == 400 and body["error"] == "invalid_body", body
    assert "phase goes with event 'begin'" in json.dumps(body["reason"])
    assert (await api.call("POST", path, {"name": "m", "event": "end"}))[0] == 200


async def test_a_marks_end_is_dated_back_by_the_age_its_client_gives(api: Api) -> None:
    """`runs mark … end` is a process whose start-up (0.45-0.6 s) came after the step it closes had ended:
    stamped on arrival, every window ran that much long. It sends its age; the end is dated back by it."""
    run = await api.new_run()
    path = f"/v1/runs/{run}/marks"
    api.clock[0] = T0 + 10 * S
    assert (await api.call("POST", path, {"name": "m", "event": "begin"}))[0] == 201
    status, body = await api.call("POST", path, {"name": "n", "event": "begin", "age_ns": 1})
    assert status == 400 and "age_ns goes with event 'end'" in json.dumps(body["reason"]), body
    api.clock[0] = T0 + 15 * S
    for age in (-1, 60 * S + 1):  # a negative age, or one past a start-up's
        status, body = await api.call("POST", path, {"name": "m", "event": "end", "age_ns": age})
        assert status == 400 and body["error"] == "invalid_body", body
    status, body = await api.call("POST", path, {"name": "m", "event": "end", "age_ns": 6 * S})
    assert status == 400 and "ends before it starts" in body["reason"]  # before its begin: still open
    status, body = await api.call("POST", path, {"name": "m", "event": "end", "age_ns": 2 * S})
    assert status == 200 and (body["t_start_ns"], body["t_end_ns"]) == (T0 + 10 * S, T0 + 13 * S), body


def assert_run_ended(status: int, body: Any, run: str, *names: str) -> None:
    assert status == 409, body
    assert body["error"] == "run_ended" and body["t_end_ns"] == T0 + RUN_S * S
    reason = body["reason"]
    assert reason.startswith(f"run {run} ended at 2027-01-15T08:01:40.000Z (t_end_ns {T0 + RUN_S * S}); ")
    assert all(repr(name) in reason for name in names), reason


async def test_an_ended_run_takes_no_marks(api: Api) -> None:
    run = await api.new_run()
    path = f"/v1/runs/{run}/marks"
    assert (await api.call("POST", path, {"name": "open", "event": "begin"}))[0] == 201
    await api.end(run)
    status, body = await api.call("POST", path, {"name": "late", "event": "begin"})
    assert_run_ended(status, body, run)
    assert "no mark can begin in it" in body["reason"]
    status, body = await api.call("POST", path, {"name": "open", "event": "end"})
    assert_run_ended(status, body, run, "open")
    assert api.rows() == 0
    status, body = await api.call("POST", f"/v1/runs/{run}/end")
    assert (
        status == 409
        and body["error"] == "run_ended"
        and "already ended, at 2027-01-15T08:01:40" in body["reason"]
    )


async def test_an_ended_run_takes_windows_inside_its_span_only(api: Api) -> None:
    run = await api.new_run(ended=True)
    slack_s = ENDED_RUN_SLACK_NS / S
    edges = [window("first", -slack_s, 1), window("last", RUN_S - 1, 1 + slack_s)]  # the edges, give or take
    assert (await api.call("POST", f"/v1/runs/{run}/windows", {"windows": edges}))[0] == 201
    late = [window("in", 50), window("after", RUN_S + slack_s + 1), window("before", -slack_s - 2)]
    status, body = await api.call("POST", f"/v1/runs/{run}/windows", {"windows": late})
    assert_run_ended(status, body, run, "after", "before")
    assert f"inside its span [{T0}, {T0 + RUN_S * S}], give or take 2 s, and " in body["reason"]
    assert "'in'" not in body["reason"] and "coordinator's clock" not in body["reason"]  # none is on it
    assert api.rows() == 2 and await api.visible(run) == 2  # "in" went back with the rest of its batch


@pytest.mark.parametrize("staged", [False, True])
async def test_a_window_on_our_clock_that_starts_after_the_end_is_not_the_runs(
    api: Api, staged: bool
) -> None:
    """The 2 s slack is for a harness host's clock. A proxy window is stamped on the coordinator's: one
    that starts after the end was a request made after the run (it was stored and measured, its tokens
    counted in the run's). One in flight at the end keeps the slack for its end; a stated clock
    uncertainty is allowed for its start."""
    run = await api.new_run(ended=not staged)
    ours = {"kind": "proxy", "clock": "coordinator"}
    late = {**window("late", RUN_S + 0.05, 1), "source": ours}
    close = {**window("close", RUN_S + 0.0005, 1), "source": {**ours, "clock_uncertainty_ns": 10**6}}
    in_flight = {**window("in-flight", RUN_S - 0.5, 1.5), "source": ours}
    harness = {**window("harness", RUN_S + 0.05, 1), "source": {"kind": "aiperf"}}  # its clock may be off
    windows = [late, close, in_flight, harness]
    if staged:  # posted into an import while the run was open, committed once it ended
        into = (await api.call("POST", f"/v1/runs/{run}/imports", {}))[1]["import_id"]
        assert (await api.call("POST", f"/v1/runs/{run}/windows", {"windows": windows, "import_id": into}))[
            0
        ] == 201
        await api.end(run)
        status, body = await api.call("POST", f"/v1/runs/{run}/imports/{into}/commit", {})
    else:
        status, body = await api.call("POST", f"/v1/runs/{run}/windows", {"windows": windows})
    assert_run_ended(status, body, run, "late")
    assert "none that starts after its end on the coordinator's clock" in body["reason"]
    assert all(f"'{w}'" not in body["reason"] for w in ("close", "in-flight", "harness")), body
    if not staged:
        batch = {"windows": [close, in_flight, harness]}
        assert (await api.call("POST", f"/v1/runs/{run}/windows", batch))[0] == 201
        assert await api.visible(run) == 3


async def test_an_import_after_the_run_is_committed_when_inside_it(api: Api) -> None:
    run = await api.new_run(ended=True)
    begun = await api.call("POST", f"/v1/runs/{run}/imports", {})
    assert begun[0] == 201
    into = begun[1]["import_id"]
    posted = await api.call("POST", f"/v1/runs/{run}/windows", {**batch("a", "b"), "import_id": into})
    assert posted[0] == 201
    outside = {"windows": [window("z", RUN_S + 10)], "import_id": into}
    assert_run_ended(*await api.call("POST", f"/v1/runs/{run}/windows", outside), run, "z")
    assert (await api.call("POST", f"/v1/runs/{run}/imports/{into}/commit", {}))[1]["committed"] == 2
    assert await api.visible(run) == 2


async def test_staged_windows_past_the_end_are_not_committed_after_it(api: Api) -> None:
    """Staged while the run was open (which takes windows up to a day away), committed after it ended:
    the commit is when they would join the run, so it is refused, and the import can still be aborted."""
    run = await api.new_run()
    api.clock[0] = T0 + 10 * S
    into = (await api.call("POST", f"/v1/runs/{run}/imports", {}))[1]["import_id"]
    staged = {"windows": [window("ok", 5), window("future", RUN_S + 50)], "import_id": into}
    assert (await api.call("POST", f"/v1/runs/{run}/windows", staged))[0] == 201
    await api.end(run)
    status, body = await api.call("POST", f"/v1/runs/{run}/imports/{into}/commit", {})
    assert_run_ended(status, body, run, "future")
    assert "'ok'" not in body["reason"] and await api.visible(run) == 0
    status, body = await api.call("DELETE", f"/v1/runs/{run}/imports/{into}")
    assert status == 200 and body["dropped"] == 2 and api.rows() == 0


async def test_the_proxy_still_posts_a_window_in_flight_at_the_end_after_a_later_one_was_refused(
    api: Api,
) -> None:
    """A short request made just after the end (refused: it starts after it, on our clock) put every later
    window that ended after it into the after-end spill unposted, a long one in flight at the end (the run
    takes it: it ends within the 2 s slack) too. Kept back now is only what the run's end rules out."""
    run = await api.new_run()
    client = CoordinatorClient(CoordinatorTarget(str(api.client.server.make_url("")).rstrip("/"), None))
    poster = RunPoster(client, run, batch_delay_s=0.01)
    poster.start()
    end, ours = T0 + RUN_S * S, {"kind": "proxy", "clock": "coordinator"}
    try:
        await api.end(run)
        poster.submit(Window("short-after", "timed", end + S // 10, end + 3 * S // 10, source=ours))
        await asyncio.sleep(0.2)  # refused: the poster learns where the run ended
        poster.submit(Window("in-flight", "timed", end - 20 * S, end + 3 * S // 2, source=ours))
        poster.submit(Window("later", "timed", end + S, end + 2 * S, source=ours))  # kept back, unposted
        lost = await poster.close()
    finally:
        await client.close()
    assert [w.id for w in poster.after_end] == ["short-after", "later"] and poster.stored == 1
    assert [w.id for w in lost] == ["short-after", "later"] and await api.visible(run) == 1


async def test_the_proxy_counts_a_window_an_ended_run_refused_as_lost_not_stored(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    """The proxy's poster takes a single window's 409 for "an earlier try stored it"; a run_ended 409 is
    not that: the window is reported lost, the end said once, and later windows are not posted at all."""
    run = await api.new_run()
    client = CoordinatorClient(CoordinatorTarget(str(api.client.server.make_url("")).rstrip("/"), None))
    poster = RunPoster(client, run, batch_delay_s=0.01)
    poster.start()
    try:
        poster.submit(Window("kept", "timed", T0 + S, T0 + 2 * S))
        await asyncio.sleep(0.2)
        await api.end(run)
        poster.submit(Window("kept", "timed", T0 + S, T0 + 2 * S))  # a retry whose first answer was lost
        poster.submit(Window("after", "timed", T0 + 150 * S, T0 + 151 * S))
        await asyncio.sleep(0.2)
        posted: list[list[str]] = []
        real = client.add_windows

        async def recording(run_id: str, windows: list[Window]) -> int:
            posted.append([w.id for w in windows])
            return await real(run_id, windows)

        client.add_windows = recording  # type: ignore[method-assign]
        poster.submit(Window("later", "timed", T0 + 160 * S, T0 + 161 * S))  # refused too: not posted
        lost = await poster.close()
    finally:
        await client.close()
    assert posted == [] and [w.id for w in lost] == ["after", "later"] and poster.stored == 2
    (said_once,) = [r.getMessage() for r in caplog.records if "has ended" in r.getMessage()]
    assert said_once.startswith(f"run {run} has ended: the proxy's windows are no longer stored in it (")
    assert f"HTTP 409: run {run} ended at " in said_once and poster.refused == []
    assert await api.visible(run) == 1
    # kept apart from the run's unsent windows: the run refuses them, so no import into it is offered
    assert [w.id for w in poster.after_end] == ["after", "later"]
    lost = lost[:1]
    unsent = Window("unsent", "timed", T0 + 3 * S, T0 + 4 * S)
    said = spill_lost(api.db.parent / "u.json", [unsent, *lost], poster.after_end, run)
    late, kept = api.db.parent / "u.after-end.json", api.db.parent / "u.json"
    assert said == (
        f"1 kept in {kept} (sparkwatch import plain {kept} --run {run});"
        f" 1 that came after run {run} ended (it refuses them) kept in {late}: import them into a run whose"
        " span holds them"
    )
    assert [w["id"] for w in json.loads(late.read_text())["windows"]] == ["after"]
    assert [w["id"] for w in json.loads(kept.read_text())["windows"]] == ["unsent"]


async def test_beginning_or_committing_an_import_takes_an_empty_body_or_none(api: Api) -> None:
    """Both carry nothing: ``{}`` or no body; anything else is a 400 with its reason, and no import is
    begun (the body is read before the store is asked)."""
    run = await api.new_run()
    for body in ([], {"x": 1}, "garbage"):
        status, answer = await api.call("POST", f"/v1/runs/{run}/imports", body)
        assert status == 400 and answer["error"] == "invalid_body", (body, answer)
    into = (await api.call("POST", f"/v1/runs/{run}/imports"))[1]["import_id"]  # no body at all
    status, answer = await api.call("POST", f"/v1/runs/{run}/imports/{into}/commit", {"windows": []})
    assert status == 400 and answer["error"] == "invalid_body"
    assert (await api.call("POST", f"/v1/runs/{run}/imports/{into}/commit", {}))[1]["committed"] == 0


@pytest.mark.parametrize("label", ["bogus", "gzip, gzip", "compress"])
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/runs/{run}/windows", "/v1/runs/{run}/marks"])
async def test_a_body_in_an_encoding_that_is_not_decoded_is_a_415_and_changes_nothing(
    api: Api, path: str, label: str
) -> None:
    """aiohttp decodes one of gzip, deflate, br or zstd and hands any other body over as sent: a run was
    opened from the bytes behind ``Content-Encoding: bogus``."""
    run = await api.new_run()
    headers = {"Content-Encoding": label, "Content-Type": "application/json"}
    bodies = {"/v1/runs": {"name": "x"}, "/v1/runs/{run}/windows": {"windows": [window("w1")]}}
    sent = bodies.get(path, {"name": "m", "event": "begin"})
    response = await api.client.post(path.format(run=run), json=sent, headers=headers)
    body = await response.json()
    assert response.status == 415 and body["error"] == "unsupported_media_type", body
    assert f"Content-Encoding {label!r} is not one this API decodes" in body["reason"], body
    assert len((await api.call("GET", "/v1/runs"))[1]["runs"]) == 1 and api.rows() == 0
    response = await api.client.post(
        path.format(run=run), json=sent, headers={"Content-Encoding": "Identity"}
    )
    assert response.status < 300, await response.text()  # the one that says "as it is" is taken


@pytest.mark.parametrize("path", ["/v1/runs", "/v1/runs/{run}/windows", "/v1/runs/{run}/marks"])
async def test_a_body_labelled_gzip_that_is_not_is_a_400_and_changes_nothing(
    api: Api, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp raises while decoding it; that was a 500 with two tracebacks in the log."""
    run = await api.new_run()
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    response = await api.client.post(path.format(run=run), data=b"xx", headers=headers)
    body = await response.json()
    assert response.status == 400 and body["error"] == "invalid_body", body
    assert "the body cannot be read" in body["reason"] and "gzip" in body["reason"]
    assert len((await api.call("GET", "/v1/runs"))[1]["runs"]) == 1 and api.rows() == 0
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@pytest.mark.parametrize(
    "bad", ["\n", "\x1b[2J", "\x00", "\t", "\x7f", "\x85", "\u2028", "\u2029", "\u202e", "\u2067"]
)
async def test_a_name_with_a_control_character_is_refused(api: Api, bad: str) -> None:
    """A run or mark name is one line wherever it shows (log, report, table): a newline in one could write
    a log line of its own ("ERROR … link unauthorized"). Refused with the reason; nothing stored."""
    forged = f"inj{bad}ERROR sparkwatch.links.state: node spark-1: link unauthorized"
    status, body = await api.call("POST", "/v1/runs", {"name": forged})
    assert status == 400 and body["reason"][0]["loc"] == "name", body
    assert "control characters" in body["reason"][0]["msg"], body
    assert (await api.call("GET", "/v1/runs"))[1]["runs"] == []
    status, run = await api.call("POST", "/v1/runs", {"name": "fine"})
    marks = f"/v1/runs/{run['id']}/marks"
    status, body = await api.call("POST", marks, {"name": f"m{bad}", "event": "begin"})
    assert status == 400 and body["reason"][0]["loc"] == "name", body
    status, ended = await api.call("POST", f"/v1/runs/{run['id']}/end")
    assert status == 200 and not ended["dropped_marks"], ended  # no mark was begun


async def test_a_name_too_long_is_said_in_characters(api: Api) -> None:
    """A 201-character name was refused as "at most 200 items" (the length judged after the validator)."""
    status, body = await api.call("POST", "/v1/runs", {"name": "x" * 201})
    assert status == 400 and body["reason"][0]["msg"] == "String should have at most 200 characters", body
    status, run = await api.call("POST", "/v1/runs", {"name": "fine"})
    status, body = await api.call(
        "POST", f"/v1/runs/{run['id']}/marks", {"name": "x" * 201, "event": "begin"}
    )
    assert status == 400 and body["reason"][0]["msg"] == "String should have at most 200 characters", body


async def test_a_clients_names_are_quoted_in_the_log(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """A name is a client's text: the log quotes it, so its quotes and spaces cannot pass for the log's."""
    caplog.set_level("INFO")
    name = "llama 70B' node 'spark-9 \u00e9"
    status, run = await api.call("POST", "/v1/runs", {"name": name})
    assert status == 201, run
    marks = f"/v1/runs/{run['id']}/marks"
    assert (await api.call("POST", marks, {"name": "m x", "event": "begin"}))[0] == 201
    assert (await api.call("POST", f"/v1/runs/{run['id']}/end"))[0] == 200
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert repr(name) in text and "'m x'" in text


async def test_a_small_route_refuses_a_large_body_unread(api: Api) -> None:
    """Runs, marks, a run's end: a few hundred bytes. A body announced over 1 MiB is a 413 with a JSON
    reason before it is read (before, up to 64 MiB was read and parsed on the event loop: seconds held)."""
    big = {"name": "x" * (2 * 1024 * 1024)}
    response = await api.client.post("/v1/runs", json=big)
    assert response.status == 413
    body = await response.json()
    assert body["error"] == "request_entity_too_large" and "1048576" in body["reason"], body
    assert (await api.call("GET", "/v1/runs"))[1]["runs"] == []


async def test_a_small_route_refuses_a_large_chunked_body_at_its_limit(api: Api) -> None:
    """Sent chunked, with no length announced, the same body is read to 1 MiB and no further."""

    async def pieces() -> AsyncIterator[bytes]:
        yield b'{"name": "'
        for _ in range(16):
            yield b"x" * (256 * 1024)
        yield b'"}'

    response = await api.client.post("/v1/runs", data=pieces(), headers={"Content-Type": "application/json"})
    assert response.status == 413
    assert (await response.json())["error"] == "request_entity_too_large"
    assert (await api.call("GET", "/v1/runs"))[1]["runs"] == []


async def test_a_small_route_counts_a_compressed_body_as_it_unpacks(api: Api) -> None:
    """30 KB of gzip that unpacks to 3 MiB: refused at 1 MiB of what it unpacks to (before, its announced
    length passed, and 3 MiB were read and parsed twice on the event loop)."""
    packed = gzip.compress(json.dumps({"name": "x" * (3 * 1024 * 1024)}).encode())
    assert len(packed) < 100_000
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    response = await api.client.post("/v1/runs", data=packed, headers=headers)
    assert response.status == 413, await response.text()
    assert (await response.json())["error"] == "request_entity_too_large"
    assert (await api.call("GET", "/v1/runs"))[1]["runs"] == []


async def test_a_windows_body_announced_over_64_mib_is_refused_before_it_is_sent(api: Api) -> None:
    """The answer comes at once, from the headers alone (before, the coordinator waited for 64 MiB of a
    body that could not be taken, and read it)."""
    _, run = await api.call("POST", "/v1/runs", {"name": "r"})
    url = api.client.make_url(f"/v1/runs/{run['id']}/windows")
    reader, writer = await asyncio.open_connection(url.host, url.port)
    head = (
        f"POST {url.path} HTTP/1.1\r\nHost: {url.host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {65 * 1024 * 1024}\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    try:
        async with asyncio.timeout(10):  # no byte of the body is ever sent
            status_line = await reader.readline()
    finally:
        writer.close()
    assert status_line.split()[1] == b"413", status_line
    assert (await api.call("GET", f"/v1/runs/{run['id']}"))[1]["windows"] == 0


@pytest.mark.parametrize(
    ("raw", "loc", "msg"),
    [
        ('{"name": "a", "name": "b"}', "name", "given more than once in one object"),
        ('{"name": "a", "interval_s": NaN}', "interval_s", "finite number"),
        ('{"name": "a", "gate_threshold": Infinity}', "gate_threshold", "finite number"),
        # nested past Python's stack: pydantic's finding, not a 500 from the repeated-key check
        ('{"name": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "", "recursion limit exceeded"),
    ],
)
async def test_a_run_body_with_a_repeated_key_or_a_nan_says_so(
    api: Api, raw: str, loc: str, msg: str
) -> None:
    """A key given twice (before, the last was taken silently) or a NaN (before, "should be less than or
    equal to 60": NaN's comparisons fail) is refused with what is wrong; nothing stored."""
    response = await api.client.post("/v1/runs", data=raw, headers={"Content-Type": "application/json"})
    body = await response.json()
    assert response.status == 400 and body["reason"][0]["loc"] == loc, body
    assert msg in body["reason"][0]["msg"], body
    assert (await api.call("GET", "/v1/runs"))[1]["runs"] == []


async def test_a_window_with_a_key_given_twice_is_refused_and_nothing_stored(api: Api) -> None:
    """Before, the last of the two was stored: a window ending where the client did not mean it to."""
    _, run = await api.call("POST", "/v1/runs", {"name": "twice"})
    start = run["t_start_ns"]
    raw = (
        f'{{"windows": [{{"id": "a", "phase": "timed", "t_start_ns": {start}, "t_end_ns": {start + 10**9}}},'
        f' {{"id": "b", "phase": "timed", "t_start_ns": {start}, "t_end_ns": {start + 10**9},'
        f' "t_end_ns": {start + 2 * 10**9}}}]}}'
    )
    response = await api.client.post(
        f"/v1/runs/{run['id']}/windows", data=raw, headers={"Content-Type": "application/json"}
    )
    body = await response.json()
    assert response.status == 400, body
    assert body["reason"] == [{"loc": "windows.1.t_end_ns", "msg": "given more than once in one object"}]
    assert (await api.call("GET", f"/v1/runs/{run['id']}"))[1]["windows"] == 0


@pytest.mark.parametrize("half", ["\\ud800", "\\udc00", "\\ud800\\u0041"])
async def test_half_a_surrogate_pair_is_said_as_such_and_a_whole_pair_is_taken(api: Api, half: str) -> None:
    """jiter says "unexpected end of hex escape" of a window id with a lone \\ud800, which names no cause."""
    run = await api.new_run()
    for path, body in (
        (
            f"/v1/runs/{run}/windows",
            b'{"windows": [{"id": "a%sb", "phase": "timed", "t_start_ns": %d,'
            b' "t_end_ns": %d}]}' % (half.encode(), T0 + S, T0 + 2 * S),
        ),
        ("/v1/runs", b'{"name": "x%s"}' % half.encode()),
    ):
        response = await api.client.post(path, data=body, headers={"Content-Type": "application/json"})
        said = await response.json()
        assert response.status == 400 and said["error"] == "invalid_body", said
        msg = said["reason"][0]["msg"]
        assert msg.startswith(HALF_PAIR) and "hex escape" not in msg
        # where the parser stopped, when it read the body itself (a window is read from a slice of it)
        assert (
            msg == HALF_PAIR
            if path.endswith("windows")
            else (at := re.fullmatch(r" at line 1 column (\d+)", msg[len(HALF_PAIR) :]))
            and 13 <= int(at.group(1)) <= len(body)
        )
    assert api.rows() == 0 and len((await api.call("GET", "/v1/runs"))[1]["runs"]) == 1
    status, _ = await api.call("POST", f"/v1/runs/{run}/windows", {"windows": [window("a\U0001f600b")]})
    assert status == 201 and api.rows() == 1
