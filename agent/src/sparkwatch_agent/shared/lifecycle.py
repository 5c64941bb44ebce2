"""One stop policy for every long-running process: the first SIGINT or SIGTERM asks for a graceful stop,
a second one exits at once with code 130 (someone who presses Ctrl-C twice means it)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

#: What stops a service in order (streams closed, files flushed): a hangup too, the terminal that ran it gone
#: (its default ends the process on the spot, with nothing said and no stream closed).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
FORCED_EXIT_CODE = 130


class StopPolicy:
    """``request(why)`` the first time calls ``on_first(why)``; the second time exits the process now."""

    def __init__(self, on_first: Callable[[str], None], exit_now: Callable[[int], object] = os._exit) -> None:
        self._on_first = on_first
        self._exit = exit_now
        self.requested = False

    def request(self, why: str) -> None:
        if self.requested:
            log.warning("second %s: exiting now", why)
            self._exit(FORCED_EXIT_CODE)
            return
        self.requested = True
        self._on_first(why)

    def install(self, signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
        """Route ``signals`` here on the running event loop (but those :func:`_routed` leaves alone)."""
        loop = asyncio.get_running_loop()
        for sig in _routed(signals):
            loop.add_signal_handler(sig, self.request, sig.name)

    def install_plain(self, signals: Iterable[signal.Signals] = STOP_SIGNALS) -> None:
        """Route ``signals`` here with ``signal.signal`` (a process without an event loop; main thread)."""
        for sig in _routed(signals):
            signal.signal(sig, lambda signum, _frame: self.request(signal.Signals(signum).name))


def _routed(signals: Iterable[signal.Signals]) -> list[signal.Signals]:
    """``signals`` but those the process was started ignoring: `nohup` ignores SIGHUP so that the closed
    terminal does not stop the service, and a handler installed over it would (Python leaves an inherited
    SIG_IGN of SIGINT alone by the same rule)."""
    return [sig for sig in signals if signal.getsignal(sig) is not signal.SIG_IGN]


def stop_on_signals(
    signals: Iterable[signal.Signals] = STOP_SIGNALS, logger: logging.Logger = log
) -> asyncio.Event:
    """An event set by the first of ``signals`` (a second exits at once); call inside the running loop.

    ``logger`` is the caller's, so the stop is logged under the process that stops (the coordinator, the
    proxy), not under this module of the agent."""
    stop = asyncio.Event()

    def first(why: str) -> None:
        logger.info("%s: stopping", why)
        stop.set()

    StopPolicy(first).install(signals)
    return stop
