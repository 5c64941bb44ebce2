"""A link whose database cannot take writes (a real SQLITE_FULL: SQLite's page limit at the file's size)
goes down with one clear line, backs off further and further instead of redialling every half second, and
resumes once there is room. The whole coordinator out of disk: tests/e2e/test_out_of_disk.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import pathlib
import time
from typing import Any

import aiohttp
import pytest

from helpers.broken_store import fill
from helpers.links import n1_link
from sparkwatch.store import Store
from sparkwatch_agent.shared.backoff import ExponentialBackoff


async def test_a_link_backs_off_while_the_store_is_full_and_resumes(
    agent_factory: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n1", "--interval", "0.01")  # fills 16 KiB fast
    store = Store(tmp_path / "full.db")
    fill(store)
    dials: list[float] = []  # each session's start
    ends: list[float] = []  # and its end: the wait between them is the backoff (sessions' lengths vary)
    async with aiohttp.ClientSession() as session:
        link = n1_link(
            store,
            session,
            agent.url,
            ExponentialBackoff(initial_s=0.05, factor=2.0, maximum_s=10.0, jitter=0.0),
            probes=2,
        )
        real = link._connected_session

        async def counted() -> None:
            dials.append(time.monotonic())
            try:
                await real()
            finally:
                ends.append(time.monotonic())

        link._connected_session = counted  # type: ignore[method-assign]
        with caplog.at_level(logging.DEBUG, logger="sparkwatch.links"):
            task = asyncio.create_task(link.run())
            while link.state.reconnects == 0:  # the first session stores what fits in pages the file has
                await asyncio.sleep(0.01)
            stored_once_full = store.count_samples("n1")
            first_failure = len(dials)
            await asyncio.sleep(1.0)
            stored_while_full = store.count_samples("n1")
            store._db.execute("PRAGMA max_page_count = 1073741823")  # room again
            await asyncio.sleep(3.0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    gaps = [dials[k + 1] - ends[k] for k in range(first_failure, len(dials) - 1)][:4]
    assert stored_while_full == stored_once_full and store.count_samples("n1") > stored_while_full
    assert len(gaps) >= 3 and all(later > earlier * 1.5 for earlier, later in itertools.pairwise(gaps)), gaps
    downs = [r for r in caplog.records if "link down" in r.getMessage()]
    assert downs and "database or disk is full" in downs[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)  # one clear line, never a traceback
    store.close()
