"""Log lines that could repeat without end, at most once a minute: out of file descriptors, a server retries
``accept()`` every second, and asyncio's default handler logs a traceback each time (an agent once wrote
190 MB of them); a connection flood would log one line per refused connection. Our own servers accept in
``shared.listener``; :class:`AcceptErrorLog` covers the asyncio servers that do not (an SSH tunnel's)."""

from __future__ import annotations

import asyncio
import errno
import logging
import math
import time
from collections.abc import Callable
from typing import Any

#: The errors asyncio's ``_accept_connection`` hands to the loop's exception handler (and retries).
ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
LOG_EVERY_S = 60.0

ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


class RateLimitedLog:
    """One line per ``every_s`` at most; the next line says how many were held back since the last."""

    def __init__(
        self,
        logger: logging.Logger,
        every_s: float = LOG_EVERY_S,
        mono_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._every_s = every_s
        self._mono_s = mono_s
        self._next_s = -math.inf
        self._held = 0

    def log(self, level: int, message: str, exc_info: bool = False) -> bool:
        """Log ``message`` (with the exception being handled: ``exc_info``) unless a line went out less than
        ``every_s`` ago; returns whether it did."""
        now = self._mono_s()
        if now < self._next_s:
            self._held += 1
            return False
        more = f" ({self._held} more since the last such line)" if self._held else ""
        self._held = 0
        self._next_s = now + self._every_s
        self._logger.log(level, "%s%s", message, more, exc_info=exc_info or None)
        return True


class RateLimitedExceptions:
    """Exceptions logged with their traceback at most once per ``every_s`` for each message: a bug in a
    reader raised at every tick logged a traceback ten times a second, which filled the journal and, in
    an SSH exec session, the channel the coordinator reads the agent's stderr from."""

    def __init__(self, logger: logging.Logger, mono_s: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._mono_s = mono_s
        self._by_message: dict[str, RateLimitedLog] = {}

    def exception(self, message: str, detail: str = "") -> None:
        """``message`` and this time's ``detail`` (say, which sample), limited by ``message`` alone."""
        lines = self._by_message.get(message)
        if lines is None:
            lines = self._by_message[message] = RateLimitedLog(self._logger, mono_s=self._mono_s)
        lines.log(logging.ERROR, message + detail, exc_info=True)


def accept_error_line(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "?")
    return (
        f"cannot accept connections: {exc.strerror} ({name}); retrying every second. Too many open "
        "connections or files: raise LimitNOFILE or lower SPARKWATCH_HTTP_MAX_CONNECTIONS"
    )


class AcceptErrorLog:
    """The loop's exception handler: accept errors become a rate-limited line without a traceback;
    everything else goes on to the handler that was there before (or asyncio's default)."""

    def __init__(self, previous: ExceptionHandler | None, lines: RateLimitedLog) -> None:
        self._previous = previous
        self._lines = lines

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in ACCEPT_ERRNOS and "socket" in context:
            self._lines.log(logging.ERROR, accept_error_line(exc))
        elif self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


def install_accept_error_log(
    loop: asyncio.AbstractEventLoop, logger: logging.Logger, mono_s: Callable[[], float] = time.monotonic
) -> None:
    """Put :class:`AcceptErrorLog` in front of the loop's exception handler (once per loop)."""
    current = loop.get_exception_handler()
    if isinstance(current, AcceptErrorLog):
        return
    loop.set_exception_handler(AcceptErrorLog(current, RateLimitedLog(logger, mono_s=mono_s)))
