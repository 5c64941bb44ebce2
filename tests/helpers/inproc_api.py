"""The coordinator's API in this process, on a real SQLite store and a clock the test moves."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp.test_utils import TestClient, TestServer

from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.store import Store


@contextlib.asynccontextmanager
async def inproc_api(
    db: pathlib.Path, t0_ns: int, nodes: Sequence[str] = ()
) -> AsyncIterator[tuple[TestClient, Store, list[int]]]:
    """A client of the API (no token; ``nodes``, whose links are never started: a run opened is of them),
    its store, and ``clock`` (``clock[0]`` is "now")."""
    clock = [t0_ns]
    now: Callable[[], int] = lambda: clock[0]  # noqa: E731
    store = Store(db, now_ns=now)
    store.set_nodes(nodes)
    coordinator = Coordinator([NodeSpec(name, url="ws://unused") for name in nodes], store, now_ns=now)
    client = TestClient(TestServer(make_app(coordinator, None)))
    await client.start_server()
    try:
        yield client, store, clock
    finally:
        await client.close()
        await coordinator.stop()
        store.close()
