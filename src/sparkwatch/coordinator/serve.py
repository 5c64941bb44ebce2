"""`sparkwatch coordinator`: the process lifecycle — store, links, API, signals, graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence, Sized
from pathlib import Path

from aiohttp import web

from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.remote_write.spec import RemoteWriteSpec
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.defaults import RETAIN_IDLE_S
from sparkwatch.engines.spec import EngineSpec
from sparkwatch.links.nodes_file import NodeSpec, check_secret_files, load_nodes_file
from sparkwatch.store import Store, corrupt_or_none
from sparkwatch.store.writer_lock import lock_path, writer_lock
from sparkwatch_agent.config import parse_listen
from sparkwatch_agent.shared.auth import ServerToken, access_said, token_for_bind
from sparkwatch_agent.shared.http import bind_error, start_site
from sparkwatch_agent.shared.lifecycle import stop_on_signals
from sparkwatch_agent.shared.listener import bind_listeners
from sparkwatch_agent.shared.systemd_notify import SystemdNotifier

log = logging.getLogger(__name__)

#: How often the interpreter makes a thread holding the GIL hand it over (the default is 5 ms).
SWITCH_INTERVAL_S = 0.001


#: How long a stop waits for the API's requests in flight (a 100 000-window batch takes seconds: cut, its
#: client lost a 201 for windows that were stored).
API_GRACE_S = 5.0


@contextlib.asynccontextmanager
async def running_coordinator(
    nodes: Sequence[NodeSpec],
    db_path: Path,
    host: str,
    port: int,
    token: ServerToken | None,
    *,
    engine: EngineSpec | None = None,
    retain_idle_s: float | None = RETAIN_IDLE_S,
    remote_write: RemoteWriteSpec | None = None,
) -> AsyncIterator[str]:
    """Store, links and API up on host:port (0: any free port) until the block ends, then down in order.
    `sparkwatch coordinator` serves with it; `sparkwatch run`, `hardware` and the demo embed it. ``engine``:
    the serving engine whose /metrics it scrapes (``[engine]`` in nodes.toml, ``run --engine-metrics``);
    ``retain_idle_s``: how long samples no run covers are kept (None: for ever); ``remote_write``: the
    receiver every stored sample is also sent to.

    A coordinator that cannot start changes no database: a port in use is found before the file is opened
    (an existing one stays byte for byte as it was), and a file this start created is removed again when
    a later step fails."""
    if remote_write is not None:
        remote_write.check()  # an unreadable secret file ends the start before anything is opened
    await check_listen(host, port)
    created = not os.path.lexists(db_path)
    with writer_lock(db_path) as lock_made:  # one coordinator per file: a second stored every sample twice
        try:
            store = Store(db_path)
        except BaseException:
            _undo_start(db_path, created, lock_made)
            raise
        coordinator: Coordinator | None = None
        runner: web.AppRunner | None = None
        try:
            coordinator = Coordinator(
                nodes, store, engine=engine, retain_idle_s=retain_idle_s, remote_write=remote_write
            )
            runner = web.AppRunner(
                make_app(coordinator, token, listen_host=host),
                handle_signals=False,
                access_log=None,
                shutdown_timeout=API_GRACE_S,
            )
            url = await start_site(runner, host, port)  # cleans the runner up itself when it fails
            prompt_thread_switches()
            await coordinator.start()
        except BaseException as exc:
            await _stop(coordinator, runner if runner is not None and runner.sites else None, store)
            _undo_start(db_path, created, lock_made)
            if (corrupt := corrupt_or_none(exc, db_path)) is not None:  # one line, not SQLite's traceback
                raise corrupt from exc
            raise
        try:
            yield url  # http://host:port of its API
        finally:
            await _stop(coordinator, runner, store)


def _undo_start(db_path: Path, created: bool, lock_made: bool) -> None:
    """A start that failed keeps nothing of itself: the file it created, the lock beside a refused one."""
    if created:
        remove_database(db_path)
    if lock_made:
        lock_path(db_path).unlink(missing_ok=True)


async def _stop(coordinator: Coordinator | None, runner: web.AppRunner | None, store: Store) -> None:
    """The API first (no new request; those in flight finish, or are cancelled after the runner's grace),
    then the links and the window store, then the database: stopped the other way round, a request that
    came in meanwhile met a closed database and was a 500 with a traceback in the log."""
    try:
        if runner is not None:
            await runner.cleanup()
    finally:
        try:
            if coordinator is not None:
                await coordinator.stop()
        finally:
            store.close()


async def check_listen(host: str, port: int) -> None:
    """Bind host:port as the API will, and let go at once: a port in use (or an address that is not this
    host's) is a :class:`BindError` before anything is opened. Port 0 always binds."""
    if port == 0:
        return
    try:
        sockets = await bind_listeners(host, port, backlog=1)
    except OSError as exc:
        raise bind_error(host, port, exc) from None
    for sock in sockets:
        sock.close()


def remove_database(db_path: Path) -> None:
    """The database file and the files SQLite keeps beside it, where they exist."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            db_path.with_name(db_path.name + suffix).unlink()


def prompt_thread_switches() -> None:
    """Hand the GIL between threads every ``SWITCH_INTERVAL_S`` from now on in this process.

    Window batches and exports run in worker threads; each time the event loop returns from a system call
    it waits for the GIL until the worker is made to let go, 5 ms by default, and a loop turn makes several
    such calls. At 1 ms the loop's own p99 lag while 100 000 windows arrive in one POST fell from ≤ 250 to
    ≤ 100 ms (docs/performance.md). Not restored at the end: coordinators embedded in one process may
    overlap, and the setting only shortens the waits of other threads."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


async def serve(
    nodes_path: Path,
    db_path: Path,
    listen: str,
    token_file: Path | None,
    insecure_no_auth: bool = False,
    *,
    retain_idle_s: float | None = RETAIN_IDLE_S,
    remote_write: RemoteWriteSpec | None = None,
) -> int:
    nodes_file = load_nodes_file(nodes_path)
    nodes = nodes_file.nodes
    check_secret_files(str(nodes_path), nodes_file)
    host, port = parse_listen(listen)
    token = token_for_bind(host, token_file, insecure_no_auth, log)
    stop = stop_on_signals(logger=log)
    notifier = SystemdNotifier()
    async with running_coordinator(
        nodes,
        db_path,
        host,
        port,
        token,
        engine=nodes_file.engine,
        retain_idle_s=retain_idle_s,
        remote_write=remote_write,
    ) as url:
        level, access = access_said(host, token)
        log.log(
            level, "coordinator listening on %s (%s, db %s; %s)", url, nodes_counted(nodes), db_path, access
        )
        notifier.ready(nodes_counted(nodes))
        watchdog = asyncio.create_task(_watchdog(notifier))
        try:
            await stop.wait()
        finally:
            notifier.stopping()
            watchdog.cancel()
    return 0


async def _watchdog(notifier: SystemdNotifier) -> None:
    """WATCHDOG=1 from the event loop that does the work: a stuck loop stops it and systemd restarts us.
    Wakes at half the notify period, so even WatchdogSec=1s hears from a healthy coordinator in time."""
    period_s = min(1.0, notifier.watchdog_every_s / 2)
    while True:
        notifier.watchdog()
        await asyncio.sleep(period_s)


def nodes_counted(nodes: Sized) -> str:
    """``1 node``, ``4 nodes``: how a coordinator's start line counts its nodes."""
    return f"{len(nodes)} node{'' if len(nodes) == 1 else 's'}"
