"""The coordinator's API in this process, on a real SQLite store and a clock the test moves."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator, Callable

from aiohttp.test_utils import TestClient, TestServer

from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.store import Store


@contextlib.asynccontextmanager
async def inproc_api(db: pathlib.Path, t0_ns: int) -> AsyncIterator[tuple[TestClient, Store, list[int]]]:
    """A client of the API (no token, no nodes), its store, and ``clock`` (``clock[0]`` is "now")."""
    clock = [t0_ns]
    now: Callable[[], int] = lambda: clock[0]  # noqa: E731
    store = Store(db, now_ns=now)
    coordinator = Coordinator([], store, now_ns=now)
    client = TestClient(TestServer(make_app(coordinator, None)))
    await client.start_server()
    try:
        yield client, store, clock
    finally:
        await client.close()
        await coordinator.stop()
        store.close()
