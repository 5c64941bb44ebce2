"""`sparkwatch-agent serve`: the one lifecycle owner of the agent process.

Starts the sampler thread and the HTTP server, tells systemd READY=1 once a sample exists, stops
gracefully on SIGTERM/SIGINT within ~1 s (a second SIGINT exits at once).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

from aiohttp import web

from sparkwatch_agent.auth import is_loopback, load_token
from sparkwatch_agent.config import AgentConfig, ConfigError
from sparkwatch_agent.host_facts import read_host_facts
from sparkwatch_agent.http_app import AgentContext, make_app
from sparkwatch_agent.metrics import make_registry
from sparkwatch_agent.node import Node, build_node
from sparkwatch_agent.snapshot import Snapshot
from sparkwatch_agent.systemd_notify import SystemdNotifier

log = logging.getLogger(__name__)


class ServeError(Exception):
    """Start-up failure the user can fix (port in use, bad address)."""


def check_auth(config: AgentConfig) -> str | None:
    """Load the token, and refuse an unauthenticated bind off loopback unless explicitly allowed."""
    token = load_token(config.token_file) if config.token_file else None
    if token is None and not is_loopback(config.host) and not config.insecure_no_auth:
        raise ConfigError(
            f"refusing to listen on {config.host} without a token: pass --token-file FILE"
            " (or --insecure-no-auth to expose /v1/* to the network unauthenticated)"
        )
    return token


def agent_context(node: Node, token: str | None) -> AgentContext:
    """What the HTTP handlers share: the node's sampler, its metrics registry, host facts, auth."""
    return AgentContext(
        sampler=node.sampler,
        registry=make_registry(lambda: node.sampler.snapshot),
        host=read_host_facts(),
        token=token,
        sim=node.sim,
        wall_ns=time.time_ns,
        mono_ns=time.monotonic_ns,
    )


async def serve(config: AgentConfig) -> int:
    token = check_auth(config)
    loop = asyncio.get_running_loop()
    notifier = SystemdNotifier()
    reporter = SystemdReporter(notifier)
    node = build_node(config, on_tick=reporter.on_tick if notifier.enabled else None)
    reporter.snapshot = lambda: node.sampler.snapshot
    app = make_app(agent_context(node, token))
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ServeError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    stop = asyncio.Event()
    _install_signals(loop, stop)
    node.sampler.start()
    try:
        while node.sampler.snapshot.sample is None and not stop.is_set():
            await asyncio.sleep(0.01)
        for address in runner.addresses:
            host, port = address[0], address[1]
            log.info(
                "listening on http://%s:%d (node %s, backend %s)", host, port, config.node, config.backend
            )
        reporter.ready()
        await stop.wait()
    finally:
        log.info("stopping")
        notifier.stopping()
        node.sampler.stop(timeout_s=1.0)
        await runner.cleanup()
        notifier.close()
    return 0


STATUS_EVERY_S = 1.0


class SystemdReporter:
    """Feeds systemd's watchdog and keeps ``STATUS=`` true (a lost GPU or a new interval shows in
    `systemctl status`), from the sampler thread's tick hook: the event loop never wakes for it. A
    once-a-second asyncio timer for this cost ~0.4 ms of CPU a second, more than a 10 Hz tick."""

    def __init__(self, notifier: SystemdNotifier, mono_s: Callable[[], float] = time.monotonic) -> None:
        self._notifier = notifier
        self._mono = mono_s
        self._lock = threading.Lock()  # READY=1 comes from the loop thread, the rest from the sampler's
        self._status: str | None = None  # None until READY=1 went out
        self._next_check_s = 0.0
        self.snapshot: Callable[[], Snapshot] | None = None

    def ready(self) -> None:
        assert self.snapshot is not None
        with self._lock:
            self._status = status_line(self.snapshot())
            self._notifier.ready(self._status)

    def on_tick(self) -> None:
        now = self._mono()
        with self._lock:  # one socket, created by whichever thread sends first
            self._notifier.watchdog()
            if now < self._next_check_s or self.snapshot is None:
                return
            self._next_check_s = now + STATUS_EVERY_S
            if self._status is not None and (line := status_line(self.snapshot())) != self._status:
                self._status = line
                self._notifier.send(f"STATUS={line}")


def status_line(snap: Snapshot) -> str:
    """What systemd shows as the unit's Status: the interval and whether the GPU is being read."""
    return f"sampling every {snap.interval_s:g} s; gpu {'ok' if snap.gpu_ok else snap.gpu_reason}"


def _install_signals(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    def on_signal(signame: str) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now", signame)
            os._exit(130)
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_signal, "SIGTERM")
    loop.add_signal_handler(signal.SIGINT, on_signal, "SIGINT")
