"""Standard streams a caller closed (`2>&-`, a service manager that passes none) as /dev/null.

Python starts such a stream as ``None``, so every message to it was an AttributeError (a traceback nobody
sees, a run left open on its coordinator); and the first file the process opened took the free descriptor,
so whatever a library, a child process or faulthandler wrote to fd 2 landed in that file (a database). A
launcher that exec's Python may also leave a file of its own open read-only on the descriptor (pyenv's shim
script did): every write to it failed with EBADF."""

from __future__ import annotations

import fcntl
import os
import sys

STREAMS = ((0, "stdin", os.O_WRONLY), (1, "stdout", os.O_RDONLY), (2, "stderr", os.O_RDONLY))
#: sysexits' EX_IOERR: what a command's output could not be written to (a full disk) is its exit code.
EX_IOERR = 74


def reopen_closed() -> list[str]:
    """Give each standard descriptor that is closed, or open only the other way, /dev/null (call before
    anything else is opened) and its stream a file on it; returns the names of those it replaced."""
    replaced = []
    for fd, name, wrong_way in STREAMS:
        try:
            usable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != wrong_way
        except OSError:
            usable = False
        if usable and getattr(sys, name) is not None:
            continue
        if not usable:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        mode = "r" if fd == 0 else "w"
        setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115
        replaced.append(name)
    return replaced


def drop_output(fd: int) -> None:
    """``fd`` (stdout's) onto /dev/null from now on, after a write to it failed (its reader left, the disk
    is full): what is left in its buffer goes nowhere, so the interpreter's flush at exit raises no second
    error."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)
