"""The coordinator: one link per node, the store, the open runs and the interval they ask of the agents.

Every run operation goes through :class:`Coordinator` — the API never touches the store — so what a run
change sets in motion (the interval leases, the log line) has one place, and so does anything that must
stay off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from sparkwatch.coordinator import run_pace
from sparkwatch.coordinator.big_values import CollectorPause, let_go
from sparkwatch.coordinator.housekeeping import Housekeeping
from sparkwatch.coordinator.loop_lag import LoopLag
from sparkwatch.coordinator.piece_stream import PieceStream, computed_export, computed_json
from sparkwatch.coordinator.remote_write.spec import RemoteWriteSpec
from sparkwatch.coordinator.run_nodes import warn_changed_nodes
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.window_rows import FirstPass, WindowsTap
from sparkwatch.core.windows import MARK_SOURCE, Window, outside_run
from sparkwatch.defaults import DEFAULT_PHASES, RETAIN_IDLE_S
from sparkwatch.engines.poller import EnginePoller
from sparkwatch.engines.spec import EngineSpec
from sparkwatch.hello_facts import agent_name, shared_identities
from sparkwatch.links.factory import lease_holder, make_link
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkState
from sparkwatch.meters.factory import make_reader
from sparkwatch.meters.poller import MeterPoller, MeterSink
from sparkwatch.report.bundle import Assets
from sparkwatch.sources.store import export_run, run_windows
from sparkwatch.store import Damaged, Invalid, Store, StoreError, Unavailable
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.windows import Committed

if TYPE_CHECKING:
    from sparkwatch.coordinator.remote_write.sender import RemoteWriter

log = logging.getLogger(__name__)
T = TypeVar("T")


class Coordinator:
    def __init__(
        self,
        nodes: Sequence[NodeSpec],
        store: Store,
        now_ns: Callable[[], int] = time.time_ns,
        link_factory: Callable[..., Any] | None = None,
        engine: EngineSpec | None = None,
        *,
        retain_idle_s: float | None = RETAIN_IDLE_S,
        remote_write: RemoteWriteSpec | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.engine_spec = engine  # the serving engine whose /metrics this coordinator scrapes
        self.store = store
        self.now_ns = now_ns
        self.instance = secrets.token_hex(8)  # this process: what /v1/time calls its boot
        self.holder = lease_holder(store.path)
        self._link_factory = link_factory or make_link
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.links: dict[str, Any] = {}
        self.loop_lag = LoopLag()
        # window batches are written on their own connection in one thread of their own, in short chunks
        # (store/windows.py): a 100 000-window import never holds the event loop or the write lock long
        self._window_thread: ThreadPoolExecutor | None = None
        self._window_store: Store | None = None
        self.meters: dict[str, MeterPoller] = {}
        self._meter_hellos: dict[str, dict[str, Any] | None] = {}  # a metered node's last stored hello
        self.engine: EnginePoller | None = None
        self._collector_pause = CollectorPause()
        self._report_assets = Assets()  # the inlined Vega bundle, assembled at the first report
        self.housekeeping = Housekeeping(self._in_window_thread, retain_idle_s, store_path=store.path)
        self.remote_write_spec = remote_write  # where every stored sample is also sent (opt in)
        self.remote_writer: RemoteWriter | None = None
        store.set_nodes([n.name for n in self.nodes])
        runs = store.runs()  # once: a run left open survives a restart (its pace, and its nodes said)
        warn_changed_nodes(runs, self.node_names)
        self._prompt_until_ns = run_pace.prompt_until_ns(runs)
        for damaged in store.damaged_runs().values():
            log.warning(
                "%s: left out of every run list and of the sampling pace until mended or deleted", damaged
            )

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def desired_interval(self) -> float | None:
        return run_pace.desired_interval(self.store.runs())

    def store_promptly(self) -> bool:
        return self.now_ns() < self._prompt_until_ns

    async def start(self) -> None:
        dropped = self.store.drop_open_imports()
        if dropped:
            log.warning("dropped %d import(s) never committed before the last stop", len(dropped))
        for run_id in self.store.deleted_runs():  # deleted, but stopped before its rows were all gone
            log.warning("run %s: finishing its deletion, cut short by the last stop", run_id)
            self._purge_later(run_id)
        self._watched(self.loop_lag.run(), "loop-lag")
        self._watched(self.housekeeping.run(), "retention")
        self._session = aiohttp.ClientSession()
        sink = self._start_remote_write()
        for spec in self.nodes:
            link = self._link_factory(
                spec,
                self.store,
                self._session,
                holder=self.holder,
                desired_interval=self.desired_interval,
                store_promptly=self.store_promptly,
                now_ns=self.now_ns,
                **sink,
            )
            self.links[spec.name] = link
            self._watched(link.run(), f"link-{spec.name}")
            if spec.meter is not None:
                poller = MeterPoller(
                    spec.name,
                    spec.meter,
                    make_reader(spec.meter),
                    self._meter_sink(spec.name),
                    now_ns=self.now_ns,
                )
                self.meters[spec.name] = poller
                self._watched(poller.run(self._session), f"meter-{spec.name}")
        if self.engine_spec is not None:
            self.engine = EnginePoller(self.engine_spec, self.store, now_ns=self.now_ns)
            self._watched(self.engine.run(self._session), "engine-metrics")

    def _watched(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """One of the coordinator's own tasks, whose end by an exception is said: a meter poller that died
        on a reading it could not store did so in silence, its node's wall domain just gone."""
        task = asyncio.create_task(work, name=name)
        task.add_done_callback(_said_if_failed)
        self._tasks.append(task)

    def _start_remote_write(self) -> dict[str, Any]:
        """The writer, started when remote write is on (protobuf and cramjam load only then); the link
        arguments that hand it every stored sample."""
        if self.remote_write_spec is None:
            return {}
        from sparkwatch.coordinator.remote_write.sender import RemoteWriter  # noqa: PLC0415 — opt in

        self.remote_writer = RemoteWriter(self.remote_write_spec)
        self.remote_writer.start()
        log.info("remote write to %s", self.remote_writer.url)
        return {"sample_sink": self.remote_writer.offer, "stream_end_sink": self.remote_writer.offer_end}

    def _meter_sink(self, name: str) -> MeterSink:
        """Where a node's meter readings go: the store, and with remote write the writer too."""
        self._meter_hellos[name] = self.store.latest_hello_or_absent(name)
        if self.remote_writer is None:
            return self.store
        from sparkwatch.coordinator.remote_write.meters import WrittenMeter  # noqa: PLC0415 — opt in

        return WrittenMeter(self.store, self.remote_writer, self.agent_name)

    def agent_name(self, name: str) -> str:
        """The ``node`` label of node ``name``'s series (what its agent calls itself): from its link's hello,
        else the last one stored before this start (an agent still down after the coordinator restarted
        keeps its name), else ``name``."""
        link = self.links.get(name)
        return agent_name(
            name, (link.state.hello if link is not None else None) or self._meter_hellos.get(name)
        )

    async def stop(self, timeout_s: float = 5.0) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)
        if self.remote_writer is not None:  # after the links: what they stored last goes out too
            await self.remote_writer.stop(timeout_s)
        if self._session is not None:
            await self._session.close()
        if self._window_thread is not None and self._window_store is not None:
            await self._in_window_thread(lambda store: store.close())
            self._window_store = None
        if self._window_thread is not None:
            self._window_thread.shutdown()
            self._window_thread = None

    def states(self) -> list[LinkState]:
        return [self.links[n].state for n in self.node_names if n in self.links]

    def node_json(self, now_ns: int) -> list[dict[str, Any]]:
        """Each node as ``GET /v1/nodes`` shows it: its link, and its meter when it has one."""
        return [
            {
                **self.links[n].state.to_json(now_ns),
                "meter": self.meters[n].state.to_json() if n in self.meters else None,
            }
            for n in self.node_names
            if n in self.links
        ]

    def engine_json(self) -> dict[str, Any] | None:
        """The engine scraper as ``GET /v1/nodes`` shows it (its ``engine`` field); None without one."""
        return self.engine.state.to_json() if self.engine is not None else None

    def _interval_changed(self) -> None:
        self._prompt_until_ns = run_pace.prompt_until_ns(self.store.runs())
        for link in self.links.values():
            link.interval_changed()

    def open_run(
        self,
        name: str,
        interval_s: float,
        gate_threshold: float,
        scope: str,
        phases: Sequence[str] = DEFAULT_PHASES,
    ) -> RunRow:
        """Refused (409) while two entries reach one agent: its watts and memory would be summed twice."""
        hellos = [(s.node, s.hello) for s in self.states()]
        duplicates = shared_identities(hellos)
        if duplicates:
            raise StoreError(f"refusing to open a run: {'; '.join(map(str, duplicates))}")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.now_ns() / 1e9))
        run = RunRow(
            id=f"run-{stamp}-{secrets.token_hex(3)}",
            name=name,
            t_start_ns=self.now_ns(),
            t_end_ns=None,
            interval_s=interval_s,
            gate_threshold=gate_threshold,
            scope=scope,
            phases=tuple(phases),
            nodes=tuple(self.node_names),
        )
        self.store.create_run(run)
        self._interval_changed()
        log.info("run %s (%r) opened at %g s", run.id, run.name, run.interval_s)  # a name is a client's text
        return run

    def end_run(self, run_id: str, command: dict[str, Any] | None = None) -> tuple[RunRow, list[str]]:
        """The ended run, and the marks still open in it: dropped without a window, named (log, answer)."""
        run = self.store.end_run(run_id, self.now_ns(), command)
        self._interval_changed()
        dropped = self.store.drop_marks(run_id)
        said = f" with marks still open, dropped: {name_ids(dropped, quoted=True)}" if dropped else ""
        log.log(logging.WARNING if dropped else logging.INFO, "run %s ended%s", run_id, said)
        return run, dropped

    def runs(self) -> list[RunRow]:
        return self.store.runs()

    def damaged_runs(self) -> dict[str, Damaged]:
        """Runs whose rows were damaged outside sparkwatch, by id: listed apart, with why."""
        return self.store.damaged_runs()

    async def run_sizes(self) -> dict[str, int]:
        """Bytes of stored samples by run, on the window thread's connection: it reads every block's row
        (a few hundred milliseconds with months of them), which must not stall the event loop."""
        return await self._in_window_thread(lambda store: store.run_sizes())

    async def run(self, run_id: str) -> tuple[RunRow, int]:
        """The run and how many windows it has, counted on the window thread's connection: a count reads
        the run's key index (~1 s for 15 M windows), which must not stall the event loop."""
        return self.store.run(run_id), await self._in_window_thread(lambda store: store.count_windows(run_id))

    async def add_windows(self, run_id: str, windows: Sequence[Window], import_id: str | None = None) -> int:
        """All or nothing (staged in ``import_id`` if given); a window a day away from the run is refused
        (``Invalid``)."""
        run = self.store.run(run_id)
        far = outside_run(windows, run.t_start_ns, run.t_end_ns or self.now_ns())
        if far is not None:
            raise Invalid(far)
        return await self._in_window_thread(lambda store: store.add_windows(run_id, windows, import_id))

    async def begin_import(self, run_id: str) -> str:
        return await self._in_window_thread(lambda store: store.begin_import(run_id))

    async def commit_import(self, run_id: str, import_id: str) -> Committed:
        """Commit, unless its windows mostly repeat the proxy's requests (``RepeatsProxy``, dropped)."""
        done = await self._in_window_thread(lambda store: store.commit_import(run_id, import_id))
        log.info("run %s: import %s committed (%d windows)", run_id, import_id, done.windows)
        if done.note is not None:
            log.warning("run %s: %s", run_id, done.note)
        return done

    async def abort_import(self, run_id: str, import_id: str) -> int:
        return await self._in_window_thread(lambda store: store.abort_import(run_id, import_id))

    async def delete_run(self, run_id: str) -> int:
        """Delete an ended or damaged run (store/deletion.py): gone from every read once this returns, its
        rows removed in the background; returns how many windows it had. In the window thread, the one
        writer of an ended run's windows, so the count is exact."""
        windows = await self._in_window_thread(lambda store: store.delete_run(run_id))
        log.info("run %s deleted (%d window%s)", run_id, windows, "" if windows == 1 else "s")
        self._purge_later(run_id)
        return windows

    def _purge_later(self, run_id: str) -> None:
        task = asyncio.create_task(self.housekeeping.purge_run(run_id), name=f"purge-{run_id}")
        self._tasks.append(task)
        task.add_done_callback(lambda done: self._tasks.remove(done) if done in self._tasks else None)

    async def _in_window_thread(self, work: Callable[[Store], T]) -> T:
        if self._window_thread is None:
            self._window_thread = ThreadPoolExecutor(1, thread_name_prefix="sparkwatch-windows")

        def run() -> T:
            if self._window_store is None:
                self._window_store = Store(self.store.path, self.now_ns)
            return work(self._window_store)

        return await asyncio.get_running_loop().run_in_executor(self._window_thread, run)

    def begin_mark(self, run_id: str, name: str, phase: str) -> int:
        """Open a mark now; returns its start (coordinator clock)."""
        now = self.now_ns()
        self.store.begin_mark(run_id, name, phase, now)
        return now

    def end_mark(self, run_id: str, name: str, age_ns: int = 0) -> Window:
        """Close a mark into a window ending ``age_ns`` before now (a client's start-up, not its request)."""
        return self.store.end_mark(run_id, name, self.now_ns() - age_ns, dict(MARK_SOURCE))

    async def report_html(self, run_id: str, series_buckets: int) -> str:
        """The run report, from the export with its series block, computed in a worker thread like the
        export (Altair is imported there, at the first report, not when the coordinator starts); the page
        reads the windows the digest's pass made (they were made twice)."""

        def work() -> str:
            from sparkwatch.report.page import build_page  # noqa: PLC0415 — Altair, on demand

            first = FirstPass()
            with self._collector_pause:  # the export is alive through the page build, as in export_json
                export = self._computed_export(run_id, series_buckets, first)
                windows = first.all(len(export["windows"]))
                made = {**export, "windows": list(export["windows"]) if windows is None else windows}
                try:
                    return build_page(made, self._report_assets)
                finally:
                    let_go(made)
                    let_go(export)

        return await asyncio.get_running_loop().run_in_executor(None, work)

    def _reader(self) -> Store:
        """Read-only (a writing one failed on a file taking no writes); Unavailable where it cannot open."""
        try:
            return Store.read_only(self.store.path, live=True)
        except Damaged:
            raise
        except StoreError as exc:
            raise Unavailable(f"the database cannot be read now: {exc}") from None

    def _computed_export(self, run_id: str, buckets: int | None, tap: WindowsTap) -> dict[str, Any]:
        """The export, on a read connection closed once it is made (no snapshot held while a client reads)."""
        with contextlib.closing(self._reader()) as reader, self._collector_pause:
            return export_run(
                reader, run_id, self.node_names, self.now_ns, series_buckets=buckets, windows_tap=tap
            )

    async def export_json(self, run_id: str, series_buckets: int | None = None) -> PieceStream:
        """The export as JSON pieces, computed and encoded in a worker thread on its own read connection
        (WAL readers do not block the writer): a long run's numpy, SQLite and encoding work never stalls
        ingest or the agents' heartbeats (piece_stream.computed_export: its windows made once). With
        ``series_buckets``, the export's ``series`` block in that many buckets."""
        return await computed_export(
            lambda tap: self._computed_export(run_id, series_buckets, tap), self._collector_pause
        )

    async def windows_json(self, run_id: str) -> PieceStream:
        """``{"run": …, "windows": […]}``: the run's settings and its windows as stored, none measured (what
        `export --prometheus RUN` measures again from a fleet's engine), made as the export is."""

        def work() -> dict[str, Any]:
            reader = self._reader()
            try:
                with self._collector_pause:
                    return run_windows(reader, run_id)
            finally:
                reader.close()

        return await computed_json(work, self._collector_pause)


def _said_if_failed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("%s stopped: %s: %s", task.get_name(), type(exc).__name__, exc, exc_info=exc)
