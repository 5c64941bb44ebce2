"""A proxy's window sink that keeps what it is given, for the tests that read a proxy's windows."""

from __future__ import annotations

from sparkwatch.core.windows import Window


class ListSink:
    def __init__(self) -> None:
        self.windows: list[Window] = []

    def submit(self, window: Window) -> None:
        self.windows.append(window)
