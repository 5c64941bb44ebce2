"""Files a person names on a command line or in a config (an export, a payload, a nodes file, a token
file, a harness's result), read whole only when they end.

``/dev/zero`` or ``/dev/urandom`` given by mistake never ends: ``Path.read_bytes`` reads it into memory
until the machine runs out. A device is refused before a byte is read, as an ``OSError`` whose
``strerror`` says so, so every reader's "cannot read {path}: {strerror}" already words it. A pipe (a
shell's ``<(cmd)``, a FIFO) is read: it ends when its writer does.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

#: What a refused device is told (after "cannot read {path}: ").
NOT_A_FILE = "is a {kind} device, not a file (a regular file or a pipe is read)"


def refuse_device(target: int | Path) -> None:
    """Raise ``OSError`` (ENODEV) when ``target`` (an open file, or a path: links followed, nothing opened)
    is a character or block device. A path is checked before it is opened, since opening some devices acts
    (a serial line waits for its carrier, a watchdog arms), and the open file again after (the path may
    have been replaced in between)."""
    mode = (os.fstat(target) if isinstance(target, int) else os.stat(target)).st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "character" if stat.S_ISCHR(mode) else "block"
        raise OSError(errno.ENODEV, NOT_A_FILE.format(kind=kind))


def read_file_bytes(path: Path) -> bytes:
    """``path.read_bytes()``, a device refused (:func:`refuse_device`)."""
    refuse_device(path)
    with path.open("rb") as handle:
        refuse_device(handle.fileno())
        return handle.read()


def read_file_text(path: Path) -> str:
    """The file's bytes as UTF-8 (no newline translation), a device refused; ``UnicodeDecodeError`` as it
    raises."""
    return read_file_bytes(path).decode("utf-8")
