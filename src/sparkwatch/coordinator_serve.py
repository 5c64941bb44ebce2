"""`sparkwatch coordinator`: the process lifecycle — store, links, API, signals, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from aiohttp import web

from sparkwatch.api.app import make_app
from sparkwatch.coordinator import Coordinator
from sparkwatch.nodes_file import load_nodes
from sparkwatch.store import Store
from sparkwatch_agent.auth import is_loopback, load_token
from sparkwatch_agent.config import parse_listen
from sparkwatch_agent.systemd_notify import SystemdNotifier

log = logging.getLogger(__name__)


class CoordinatorStartError(Exception):
    """Start-up failure the user can fix; printed as one line."""


async def serve(
    nodes_path: Path, db_path: Path, listen: str, token_file: Path | None, insecure_no_auth: bool = False
) -> int:
    nodes = load_nodes(nodes_path)
    host, port = parse_listen(listen)
    token = load_token(token_file) if token_file else None
    if token is None and not is_loopback(host) and not insecure_no_auth:
        raise CoordinatorStartError(
            f"refusing to listen on {host} without a token: pass --token-file FILE (or --insecure-no-auth)"
        )
    store = Store(db_path)
    coordinator = Coordinator(nodes, store)
    runner = web.AppRunner(
        make_app(coordinator, token), handle_signals=False, access_log=None, shutdown_timeout=1.0
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        store.close()
        raise CoordinatorStartError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(name: str) -> None:
        if stop.is_set():
            os._exit(130)
        log.info("%s: stopping", name)
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_signal, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, on_signal, "SIGINT")
    notifier = SystemdNotifier()
    await coordinator.start()
    for address in runner.addresses:
        log.info(
            "coordinator listening on http://%s:%d (%d nodes, db %s)",
            address[0],
            address[1],
            len(nodes),
            db_path,
        )
    notifier.ready(f"{len(nodes)} nodes")
    watchdog = asyncio.create_task(_watchdog(notifier))
    try:
        await stop.wait()
    finally:
        notifier.stopping()
        watchdog.cancel()
        await coordinator.stop()
        await runner.cleanup()
        store.close()
    return 0


async def _watchdog(notifier: SystemdNotifier) -> None:
    while True:
        notifier.watchdog()
        await asyncio.sleep(1.0)
