"""The export answer written while it is made (coordinator/piece_stream.py): pieces from a worker thread
arrive in order on the loop, the thread waits while ``depth`` wait unread, stops when the reader goes, and
an error after the answer began ends it; through the API, the answer is chunked, holds exactly the export,
and a run that does not exist is still a 404 with a JSON reason."""

from __future__ import annotations

import asyncio
import gc
import json
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from helpers.export_api import T0, Api, S, ended_run, node_api
from helpers.windows_made import count_windows_made
from sparkwatch.coordinator.big_values import CollectorPause
from sparkwatch.coordinator.piece_stream import PieceStream, computed_export
from sparkwatch.core.json_pieces import json_pieces
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store
from sparkwatch.window_spool import WindowSpool


def _producer(stream: PieceStream, count: int, said: list[bool], error: BaseException | None = None) -> None:
    for n in range(count):
        said.append(stream.put(b"%d," % n))
        if not said[-1]:
            return
    stream.finish(error)


async def test_pieces_arrive_in_order_and_the_thread_waits_for_the_reader() -> None:
    stream = PieceStream(asyncio.get_running_loop(), depth=2)
    said: list[bool] = []
    thread = threading.Thread(target=_producer, args=(stream, 50, said))
    thread.start()
    await asyncio.sleep(0.3)
    assert said == [True, True]  # two handed over, the third waits for room
    got = [piece async for piece in stream]
    thread.join(5)
    assert got == [b"%d," % n for n in range(50)] and said == [True] * 50 and not thread.is_alive()
    stream.close()


async def test_a_reader_that_goes_stops_the_thread() -> None:
    stream = PieceStream(asyncio.get_running_loop(), depth=1)
    said: list[bool] = []
    thread = threading.Thread(target=_producer, args=(stream, 1000, said))
    thread.start()
    async for _ in stream:
        break  # the client closed the connection after one piece
    stream.close()
    started = time.monotonic()
    await asyncio.to_thread(thread.join, 5)
    assert not thread.is_alive() and time.monotonic() - started < 2
    assert said[-1] is False and len(said) < 5  # it stopped making pieces


async def test_an_error_after_the_answer_began_ends_the_reading() -> None:
    stream = PieceStream(asyncio.get_running_loop())
    thread = threading.Thread(target=_producer, args=(stream, 3, [], ValueError("disk gone")))
    thread.start()
    got = []
    with pytest.raises(ValueError, match="disk gone"):
        async for piece in stream:
            got.append(piece)
    assert got == [b"0,", b"1,", b"2,"]
    thread.join(5)
    stream.close()


async def test_the_api_answer_is_chunked_and_exactly_the_export(tmp_path: pathlib.Path) -> None:
    async with node_api(tmp_path / "c.db") as api:
        client, store, clock = api.client, api.store, api.clock
        run_id = await ended_run(Api(client, store, clock))
        response = await client.get(f"/v1/runs/{run_id}/export")
        body = await response.read()
        assert response.status == 200 and response.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in response.headers
        reader = Store(tmp_path / "c.db")
        try:
            expected = b"".join(json_pieces(export_run(reader, run_id, ["n1"], lambda: clock[0])))
        finally:
            reader.close()
        assert body == expected and json.loads(body)["run"]["id"] == run_id
        assert clock[0] == T0 + 10 * S
        missing = await client.get("/v1/runs/run-nope/export")
        reason = await missing.json()
        assert missing.status == 404 and reason["error"] == "not_found" and "run-nope" in json.dumps(reason)


async def test_the_api_makes_the_windows_once_and_answers_what_they_make(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digest's pass hands the windows to a spool in the API's form, which the answer copies: every
    window made is handed to it (the tap sees every pass), so the count is the windows made. They were made
    twice, for the digest and for the answer. A non-ASCII id goes as UTF-8, as json_pieces writes it."""
    made = count_windows_made(monkeypatch)
    async with node_api(tmp_path / "c.db") as api:
        client, clock = api.client, api.clock
        run_id = str((await (await client.post("/v1/runs", json={"name": "many"})).json())["id"])
        starts = [T0 + 2 * S + k * S // 300 for k in range(1200)]
        windows = [
            {"id": f"w{k}" + ("-é" if k == 7 else ""), "phase": "timed", "t_start_ns": t, "t_end_ns": t + S}
            for k, t in enumerate(starts)
        ]
        assert (await client.post(f"/v1/runs/{run_id}/windows", json={"windows": windows})).status == 201
        clock[0] = T0 + 10 * S
        assert (await client.post(f"/v1/runs/{run_id}/end")).status == 200
        body = await (await client.get(f"/v1/runs/{run_id}/export?series_buckets=100")).read()
        assert sum(made) == 1200
        reader = Store(tmp_path / "c.db")
        try:
            expected = export_run(reader, run_id, ["n1"], lambda: clock[0], series_buckets=100)
        finally:
            reader.close()
        assert body == b"".join(json_pieces(expected)) and "w7-é".encode() in body
        assert len(json.loads(body)["windows"]) == 1200 and json.loads(body)["series"]["buckets"] == 100


async def test_the_answers_spool_is_closed_whatever_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool's temporary file is the worker's to close: after an export that failed (a 404), and after
    a reader that left mid-answer."""
    closed: list[int] = []
    close = WindowSpool.close
    monkeypatch.setattr(WindowSpool, "close", lambda self: (closed.append(1), close(self))[1])

    def failing(tap: Any) -> dict[str, Any]:
        raise LookupError("no run run-nope")

    with pytest.raises(LookupError):
        await computed_export(failing, CollectorPause())
    await _until(lambda: closed == [1])

    def big(tap: Any) -> dict[str, Any]:
        tap(0, [{"k": k, "text": "x" * 1000} for k in range(2000)])
        return {"windows": [{"k": k, "text": "x" * 1000} for k in range(2000)], "after": True}

    stream = await computed_export(big, CollectorPause())
    async for _ in stream:
        break  # the client closed the connection after one piece
    stream.close()
    await _until(lambda: closed == [1, 1])


async def _until(done: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "not closed"
        await asyncio.sleep(0.01)


def test_the_collector_pauses_while_each_chunk_is_made_and_runs_between() -> None:
    """An answer's chunks are made with the collector paused (a chunk's windows are some 100 000 new
    objects), and it runs while the client reads them, however slowly."""
    assert gc.isenabled()
    made: list[bool] = []

    def chunks() -> Iterator[bytes]:
        for n in range(3):
            made.append(gc.isenabled())
            yield b"%d" % n

    between = [gc.isenabled() for _ in CollectorPause().each(chunks())]
    assert made == [False] * 3 and between == [True] * 3 and gc.isenabled()
