"""`sparkwatch-agent serve`: the one lifecycle owner of the agent process.

Starts the sampler thread and the HTTP server, tells systemd READY=1 once a sample exists, stops
gracefully on SIGTERM/SIGINT within ~1 s (a second one exits at once).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from aiohttp import web

from sparkwatch_agent.config import AgentConfig
from sparkwatch_agent.hardware.sim import SimGb10
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.sampling.snapshot import Snapshot
from sparkwatch_agent.serving.http_app import AgentContext, make_app
from sparkwatch_agent.serving.metrics import make_registry
from sparkwatch_agent.shared.auth import ServerToken, access_said, token_for_bind
from sparkwatch_agent.shared.http import start_site
from sparkwatch_agent.shared.lifecycle import stop_on_signals
from sparkwatch_agent.shared.systemd_notify import SystemdNotifier

log = logging.getLogger(__name__)


def agent_context(
    sampler: Sampler,
    sim: SimGb10 | None,
    token: ServerToken | None,
    mono_ns: Callable[[], int] = time.monotonic_ns,
) -> AgentContext:
    """What the HTTP handlers share: the sampler, its metrics registry, the simulator, auth."""
    return AgentContext(
        sampler=sampler,
        registry=make_registry(lambda: sampler.snapshot, mono_ns),
        token=token,
        sim=sim,
        wall_ns=time.time_ns,
        mono_ns=mono_ns,
    )


@asynccontextmanager
async def serve_http(
    sampler: Sampler, sim: SimGb10 | None, host: str, port: int, token: ServerToken | None
) -> AsyncIterator[str]:
    """The HTTP API on host:port and the sampler thread, until the block ends; yields the URL. A port that
    cannot be bound raises ``BindError`` before the sampler starts."""
    app = make_app(agent_context(sampler, sim, token), listen_host=host)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    url = await start_site(runner, host, port)
    sampler.start()
    try:
        yield url
    finally:
        sampler.stop(timeout_s=1.0)
        await runner.cleanup()


async def serve(config: AgentConfig, sampler: Sampler, sim: SimGb10 | None) -> int:
    token = token_for_bind(config.host, config.token_file, config.insecure_no_auth, log)
    notifier = SystemdNotifier()
    reporter = SystemdReporter(notifier, lambda: sampler.snapshot)
    if notifier.enabled:
        sampler.set_tick_hook(reporter.on_tick)
    stop = stop_on_signals(logger=log)
    try:
        async with serve_http(sampler, sim, config.host, config.port, token) as url:
            while sampler.snapshot.sample is None and not stop.is_set():
                await asyncio.sleep(0.01)
            level, access = access_said(config.host, token)
            log.log(
                level, "listening on %s (node %s, backend %s; %s)", url, config.node, config.backend, access
            )
            reporter.ready()
            try:
                await stop.wait()
            finally:
                log.info("stopping")
                notifier.stopping()
    finally:
        notifier.close()
    return 0


STATUS_EVERY_S = 1.0


class SystemdReporter:
    """Feeds systemd's watchdog and keeps ``STATUS=`` true (a lost GPU or a new interval shows in
    `systemctl status`), from the sampler thread's tick hook: the event loop never wakes for it. A
    once-a-second asyncio timer for this cost ~0.4 ms of CPU a second, more than a 10 Hz tick."""

    def __init__(
        self,
        notifier: SystemdNotifier,
        snapshot: Callable[[], Snapshot],
        mono_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._notifier = notifier
        self._snapshot = snapshot
        self._mono = mono_s
        self._lock = threading.Lock()  # READY=1 comes from the loop thread, the rest from the sampler's
        self._status: str | None = None  # None until READY=1 went out
        self._next_check_s = 0.0

    def ready(self) -> None:
        with self._lock:
            self._status = status_line(self._snapshot())
            self._notifier.ready(self._status)

    def on_tick(self) -> None:
        now = self._mono()
        with self._lock:  # one socket, created by whichever thread sends first
            self._notifier.watchdog()
            if now < self._next_check_s:
                return
            self._next_check_s = now + STATUS_EVERY_S
            if self._status is not None and (line := status_line(self._snapshot())) != self._status:
                self._status = line
                self._notifier.send(f"STATUS={line}")


def status_line(snap: Snapshot) -> str:
    """What systemd shows as the unit's Status: the interval and whether the GPU is being read."""
    return f"sampling every {snap.interval_s:g} s; gpu {'ok' if snap.gpu_ok else snap.gpu_reason}"
