"""The live view `sparkwatch run` keeps on stderr while the benchmark runs.

On a terminal it is redrawn in place: one line per node when the terminal is tall enough, else all nodes
on one line, every line cut to the terminal's width (a wrapped line would break the redraw). Anywhere else
(a log file, CI) it is plain lines that are never redrawn: all nodes on one line per update."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TextIO

#: Lines the view leaves free below it on a terminal (the command's own output, the prompt).
SPARE_LINES = 3


class LiveView:
    def __init__(
        self,
        out: TextIO,
        tty: bool,
        size: Callable[[], os.terminal_size] = lambda: os.get_terminal_size(2),
    ) -> None:
        self._out = out
        self._tty = tty
        self._size = size
        self._drawn = 0  # lines of the last redraw still on the terminal

    def show(self, parts: Sequence[str]) -> None:
        """Draw one update: ``parts`` has one text per node."""
        if not self._tty:
            self._out.write(" | ".join(parts) + "\n")
            self._out.flush()
            return
        try:
            columns, rows = self._size()
        except OSError:
            columns, rows = 0, 0
        columns, rows = columns or 80, rows or 24  # 0: a terminal that does not say (`script`, some CI)
        lines = list(parts) if len(parts) + SPARE_LINES <= rows else [" | ".join(parts)]
        cut = [line if len(line) < columns else line[: max(1, columns - 2)] + "…" for line in lines]
        self._out.write(self._erase() + "\n".join(cut))
        self._out.flush()
        self._drawn = len(cut)

    def clear(self) -> None:
        """Take the view off the terminal (before the table is printed)."""
        if self._tty and self._drawn:
            self._out.write(self._erase())
            self._out.flush()
            self._drawn = 0

    def _erase(self) -> str:
        """Back to the first line of the last redraw, and clear from there down."""
        if not self._drawn:
            return ""
        up = f"\x1b[{self._drawn - 1}F" if self._drawn > 1 else "\r"
        return f"{up}\x1b[J"
