"""The bodies the client sends: orjson's text where it reads as json's, and an import's windows read ahead."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import threading
import time
from collections.abc import Iterator

import pytest

from sparkwatch.client_bodies import bodies_ahead, request_json
from sparkwatch.core.windows import Window
from sparkwatch.importers import ImportFormatError

T0_NS = 1_800_000_000 * 10**9


def test_a_body_reads_back_as_it_was_given() -> None:
    body = {"windows": [{"id": "ü-1", "t_start_ns": 2**63 - 1, "source": {"resolution_s": 1e-9}}], "n": 0.1}
    text = request_json(body)
    assert json.loads(text) == body and " " not in text  # orjson's compact text


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        ({"x": math.nan}, "NaN"),  # orjson would send null: the coordinator must see it to refuse it
        ({"x": [math.inf]}, "Infinity"),
        ({"n": 2**64}, str(2**64)),  # orjson refuses an integer past 64 bits
        ({1: "a"}, '"1"'),  # and a key that is not a string
    ],
)
def test_what_orjson_would_write_otherwise_is_written_by_json(body: object, kept: str) -> None:
    text = request_json(body)
    assert text == json.dumps(body) and kept in text


def _windows(count: int, taken: list[int], fail_at: int | None = None) -> Iterator[Window]:
    for i in range(count):
        if i == fail_at:
            raise ImportFormatError("w.csv", f"row {i}: bad")
        taken.append(i)
        yield Window(f"w{i}", "timed", T0_NS + i, T0_NS + i + 1)


async def _collect(windows: Iterator[Window], size: int, pause_s: float) -> list[list[str]]:
    got = []
    async with contextlib.aclosing(bodies_ahead(windows, size)) as bodies:
        async for batch in bodies:
            got.append([body["id"] for body in batch])
            await asyncio.sleep(pause_s)  # the post of this batch
    return got


def test_the_next_batch_is_read_while_this_one_is_posted() -> None:
    taken: list[int] = []

    async def first_then_look() -> list[int]:
        async with contextlib.aclosing(bodies_ahead(_windows(10, taken), 4)) as bodies:
            first = await anext(bodies)
            assert [body["id"] for body in first] == ["w0", "w1", "w2", "w3"]
            await asyncio.sleep(0.2)  # posting it
            return list(taken)

    assert asyncio.run(first_then_look()) == list(range(8))  # the second batch read meanwhile
    assert asyncio.run(_collect(_windows(10, [], None), 4, 0)) == [
        ["w0", "w1", "w2", "w3"], ["w4", "w5", "w6", "w7"], ["w8", "w9"],
    ]  # fmt: skip


def test_a_bad_row_is_raised_where_its_batch_is_asked_for() -> None:
    got: list[list[str]] = []

    async def run() -> None:
        async with contextlib.aclosing(bodies_ahead(_windows(10, [], fail_at=6), 4)) as bodies:
            async for batch in bodies:
                got.append([body["id"] for body in batch])

    with pytest.raises(ImportFormatError, match="row 6"):
        asyncio.run(run())
    assert got == [["w0", "w1", "w2", "w3"]]  # the batch before it was handed out whole


def test_a_failed_read_no_one_asked_for_is_taken_not_printed() -> None:
    """The post of a batch failed while the next batch's read failed too: the read's error, never asked
    for, was printed as a traceback after the CLI's one line ("exception was never retrieved")."""
    unretrieved: list[str] = []

    async def post_fails() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, ctx: unretrieved.append(ctx["message"])
        )
        async with contextlib.aclosing(bodies_ahead(_windows(10, [], fail_at=6), 4)) as bodies:
            await anext(bodies)
            await asyncio.sleep(0.2)  # the next read fails meanwhile
            raise ConnectionError("the post failed")

    with pytest.raises(ConnectionError):
        asyncio.run(post_fails())
    gc.collect()
    assert unretrieved == []


def test_a_read_blocked_on_a_stalled_pipe_does_not_hold_the_process() -> None:
    """A file read from a pipe whose writer stalled: the import ended (Ctrl-C, SIGTERM), and the process
    then waited for the reading thread, which no signal ends (asyncio.run joins its executor's threads)."""
    stalled = threading.Event()

    def from_a_stalled_pipe() -> Iterator[Window]:
        stalled.wait(30)
        yield Window("w0", "timed", T0_NS, T0_NS + 1)

    async def given_up() -> None:
        async with contextlib.aclosing(bodies_ahead(from_a_stalled_pipe(), 4)) as bodies:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    await anext(bodies)

    threading.Timer(10, stalled.set).start()  # a hang is a failure, not a stuck suite
    t0 = time.monotonic()
    asyncio.run(given_up())
    took = time.monotonic() - t0
    stalled.set()
    assert took < 5, f"asyncio.run waited {took:.1f} s for the reading thread"
