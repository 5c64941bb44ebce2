"""`sparkwatch proxy`: the proxy as a process, posting its windows to a run or printing them."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget
from sparkwatch.proxy.clock import ProxyClock, WallClock
from sparkwatch.proxy.proxy import (
    Proxy,
    ProxyConfig,
    ProxyConfigError,
    WindowSink,
    make_proxy_runner,
    upstream_shown,
)
from sparkwatch.proxy.refusals import openai_shape
from sparkwatch.proxy.sinks import PrintSink, RunPoster
from sparkwatch.proxy.spill import spill_lost
from sparkwatch.proxy.upstream_probe import upstream_warning
from sparkwatch_agent.shared.conn_guard import ConnectionGuard
from sparkwatch_agent.shared.http import start_site
from sparkwatch_agent.shared.lifecycle import stop_on_signals
from sparkwatch_agent.shared.listener import GuardedSite
from sparkwatch_agent.shared.server_limits import ENV_HEADER_TIMEOUT_S, ENV_MAX_CONNECTIONS, raise_nofile

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def running_proxy(
    host: str,
    port: int,
    config: ProxyConfig,
    sink: WindowSink,
    client: CoordinatorClient | None = None,
    *,
    clock: ProxyClock | None = None,
    untimed_to: Callable[[str], None] | None = None,
) -> AsyncIterator[str]:
    """The proxy on host:port until the block ends; yields its URL. With ``client`` (windows go to that
    coordinator) they are stamped on the coordinator's clock (``clock``, started and stopped by the
    caller, when it stamps more than the proxy's windows), else on this host's wall clock. The POSTs it
    relayed without a window are said when it closes: to ``untimed_to`` (`run`: a note of the run), else
    in the log."""
    if not config.upstream.startswith(("http://", "https://")):
        raise ProxyConfigError(f"--upstream must be an http:// or https:// URL, not {config.upstream!r}")
    shown = upstream_shown(config.upstream)
    if config.upstream.rstrip("/").endswith("/v1"):  # a client's base URL, given where the server's root goes
        log.warning(
            "the upstream URL ends in /v1: a request to the proxy's /v1/chat/completions goes to"
            " %s/v1/chat/completions; give the server's root (without /v1) unless that is meant",
            shown,
        )
    own = None if clock is not None or client is None else ProxyClock(client)
    if own is not None:
        await own.start()
    proxy = Proxy(config, sink, clock or own or WallClock())
    runner = make_proxy_runner(proxy)
    try:
        raise_nofile()  # two descriptors a request: a shell's soft 1024 ran out at ~500 streams
        url = await start_site(runner, host, port, refusal_shape=openai_shape, fds_per_connection=2)
        try:
            warning = await upstream_warning(config.upstream, shown)
            if proxy.saw_itself:  # the probe's HEAD came back to it
                raise ProxyConfigError(
                    f"the upstream {shown} leads back to this proxy ({url}): every request would loop;"
                    " give it the model server's URL"
                )
            if warning is not None:
                log.warning("%s", warning)
            yield url
        finally:
            proxy.closing()
            guards = [site.guard for site in runner.sites if isinstance(site, GuardedSite)]
            await runner.cleanup()
            for guard in guards:
                _say_refused(guard)
            if (untimed := proxy.untimed.said()) is not None:
                (untimed_to or partial(log.warning, "%s"))(untimed)
    finally:
        if own is not None:
            await own.stop()


def _say_refused(guard: ConnectionGuard) -> None:
    """Connections closed before a request was read made no window, so only this line says so, each way
    apart with the setting that governs it. None proves a request was lost: a bare connection (a port
    check) is counted too, though a flood of requests is what fills a cap."""
    cap = f"at the cap of {guard.limits.max_connections} ({ENV_MAX_CONNECTIONS})"
    deadline = f"{guard.limits.header_timeout_s:g} s ({ENV_HEADER_TIMEOUT_S})"
    parts = [
        f"{count} {what}"
        for count, what in (
            (guard.refused, f"refused with 503 {cap}"),
            (guard.evicted, f"closed with 408 {cap} to make room, no request yet"),
            (guard.expired, f"closed with 408 when no request headers came within {deadline}"),
        )
        if count
    ]
    if parts:
        log.warning(
            "the proxy turned away %d connection(s) before a request was read (%s): a request on them made"
            " no window",
            guard.refused + guard.evicted + guard.expired,
            "; ".join(parts),
        )


async def serve_proxy(
    host: str,
    port: int,
    config: ProxyConfig,
    target: CoordinatorTarget | None,
    run_id: str | None,
    *,
    spill: Path | None = None,
) -> int:
    """Until SIGINT/SIGTERM. Windows that could not be stored in the run are kept in ``spill`` (a plain
    window file), and the exit code is then 1."""
    stop = stop_on_signals(logger=log)
    if run_id is None:
        async with running_proxy(host, port, config, PrintSink()) as url:
            log.info("proxy on %s -> %s; no --run: windows are printed as JSON lines", url, config.upstream)
            await stop.wait()
        return 0
    assert target is not None
    async with CoordinatorClient(target) as client:
        run = await client.run(run_id)
        if not run.get("open"):
            raise CoordinatorError(f"run {run_id} has already ended")
        poster = RunPoster(client, run_id)
        poster.start()
        try:
            async with running_proxy(host, port, config, poster, client) as url:
                log.info("proxy on %s -> %s; windows go to run %s", url, config.upstream, run_id)
                await stop.wait()
        finally:
            lost = await poster.close()
            where = spill or Path(f"sparkwatch-{run_id}-unsent-windows.json")
            if lost:
                said = spill_lost(where, lost, poster.after_end, run_id)
                log.warning("%d window(s) could not be stored: %s", len(lost), said)
        log.info("%d window(s) stored in run %s", poster.stored, run_id)
    return 1 if lost else 0
