"""Signals for the long-running commands: the first SIGINT/SIGTERM asks for a graceful stop, a second
one exits at once (design: one lifecycle owner per process)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

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
