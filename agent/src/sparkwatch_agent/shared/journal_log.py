"""Log lines on stderr that the systemd journal files at their real priority.

journald takes a stream line's priority only from a leading ``<N>`` (sd-daemon(3); ``SyslogLevelPrefix=`` is
on by default) and files every other line at info, so without the prefix ``journalctl -p warning`` finds
nothing. The prefix is added only when stderr *is* the journal stream: systemd sets ``JOURNAL_STREAM`` to
that stream's ``DEV:INODE`` (systemd.exec(5)), and a child whose stderr was redirected elsewhere inherits the
variable, so the stream's own fstat must match it. In a terminal or a file the lines stay plain.
Shared by both CLIs (``sparkwatch`` and ``sparkwatch-agent``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import IO

#: The line both CLIs write (journald adds the time and the unit).
LINE_FORMAT = "%(levelname)s %(name)s: %(message)s"

#: Python level → syslog priority of sd-daemon(3), highest first: crit, err, warning, info (else debug).
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
_DEBUG_PRIORITY = 7


def sd_priority(levelno: int) -> int:
    """The syslog priority for a Python level; a custom level counts as the standard one at or below it."""
    for threshold, priority in _PRIORITIES:
        if levelno >= threshold:
            return priority
    return _DEBUG_PRIORITY


class JournalFormatter(logging.Formatter):
    """Prefixes every line of a record with ``<N>``: journald splits a record on newlines, so the lines of
    a traceback would otherwise be filed at info under an error."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{sd_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def is_journal_stream(stream: IO[str], env: Mapping[str, str]) -> bool:
    """Whether ``stream`` is the journal stream systemd connected (``JOURNAL_STREAM`` = its dev:inode)."""
    dev, sep, ino = env.get("JOURNAL_STREAM", "").partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or not backed by a descriptor (io.StringIO)
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def log_handler(stream: IO[str] | None = None, env: Mapping[str, str] | None = None) -> logging.Handler:
    """A handler writing LINE_FORMAT lines to ``stream`` (default stderr), with the journal's priority
    prefix when ``env`` (default the process environment) says the stream is the journal."""
    stream = sys.stderr if stream is None else stream
    env = os.environ if env is None else env
    handler = logging.StreamHandler(stream)
    journal = is_journal_stream(stream, env)
    handler.setFormatter(JournalFormatter(LINE_FORMAT) if journal else logging.Formatter(LINE_FORMAT))
    return handler


def configure_logging(
    level: str, stream: IO[str] | None = None, env: Mapping[str, str] | None = None
) -> logging.Handler:
    """Configure the root logger once for a CLI (a no-op, as ``logging.basicConfig`` is, when the root
    already has handlers); returns the handler it built."""
    handler = log_handler(stream, env)
    logging.basicConfig(level=level.upper(), handlers=[handler])
    return handler
