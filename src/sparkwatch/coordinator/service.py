"""The coordinator: one link per node, the store, the open runs and the interval they ask of the agents."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from sparkwatch.coordinator.api.models import RunCreate
from sparkwatch.coordinator.export_inputs import export_run
from sparkwatch.links.factory import make_link
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkState
from sparkwatch.store import Store
from sparkwatch.store.db import RunRow

log = logging.getLogger(__name__)


class Coordinator:
    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        store: Store,
        now_ns: Callable[[], int] = time.time_ns,
        link_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.store = store
        self.now_ns = now_ns
        self.holder = f"sparkwatch-coordinator-{secrets.token_hex(4)}"
        self._link_factory = link_factory or make_link
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.links: dict[str, Any] = {}
        store.set_nodes([n.name for n in self.nodes])

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def desired_interval(self) -> float | None:
        """The fastest interval any open run asks for (open runs are stored, so this survives restarts)."""
        return min((r.interval_s for r in self.store.runs() if r.open), default=None)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        for spec in self.nodes:
            link = self._link_factory(
                spec,
                self.store,
                self._session,
                holder=self.holder,
                desired_interval=self.desired_interval,
                now_ns=self.now_ns,
            )
            self.links[spec.name] = link
            self._tasks.append(asyncio.create_task(link.run(), name=f"link-{spec.name}"))

    async def stop(self, timeout_s: float = 5.0) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)
        if self._session is not None:
            await self._session.close()

    def states(self) -> list[LinkState]:
        return [self.links[n].state for n in self.node_names if n in self.links]

    def _interval_changed(self) -> None:
        for link in self.links.values():
            link.interval_changed()

    def open_run(self, body: RunCreate) -> RunRow:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.now_ns() / 1e9))
        run = RunRow(
            id=f"run-{stamp}-{secrets.token_hex(3)}",
            name=body.name,
            t_start_ns=self.now_ns(),
            t_end_ns=None,
            interval_s=body.interval_s,
            gate_threshold=body.gate_threshold,
            scope=body.scope,
        )
        self.store.create_run(run)
        self._interval_changed()
        log.info("run %s (%s) opened at %g s", run.id, run.name, run.interval_s)
        return run

    def end_run(self, run_id: str, command: dict[str, Any] | None = None) -> RunRow:
        run = self.store.end_run(run_id, self.now_ns(), command)
        self._interval_changed()
        log.info("run %s ended", run_id)
        return run

    async def export_async(self, run_id: str) -> dict[str, Any]:
        """The export computed in a worker thread on its own read connection (WAL readers do not block the
        writer), so a long run's numpy and SQLite work never stalls ingest or the agents' heartbeats."""

        def work() -> dict[str, Any]:
            reader = Store(self.store.path)
            try:
                return export_run(reader, run_id, self.node_names, self.now_ns)
            finally:
                reader.close()

        return await asyncio.get_running_loop().run_in_executor(None, work)
