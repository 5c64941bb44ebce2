"""Signals for the long-running commands: the first SIGINT/SIGTERM asks for a graceful stop, a second
one exits at once (design: one lifecycle owner per process)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiohttp import web

log = logging.getLogger(__name__)


class StartError(Exception):
    """A server could not start for a reason the user can fix (port in use, bad URL); one line."""


def stop_on_signals() -> asyncio.Event:
    """An event set by the first SIGINT or SIGTERM; call from inside the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(name: str) -> None:
        if stop.is_set():
            log.warning("second %s: exiting now", name)
            os._exit(130)
        log.info("%s: stopping", name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    return stop


async def start_site(runner: web.AppRunner, host: str, port: int) -> str:
    """Set the runner up and listen on host:port (0: any free port); returns its ``http://`` URL. A port in
    use or a bad address is a :class:`StartError` with the runner already cleaned up."""
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise StartError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_host, bound_port = runner.addresses[0][:2]
    return f"http://[{bound_host}]:{bound_port}" if ":" in bound_host else f"http://{bound_host}:{bound_port}"
