"""How many windows an export made, counted where every one of them passes: the window spool a command or
the coordinator hands the export as its windows tap sees every pass that makes them, not only the first."""

from __future__ import annotations

from typing import Any

import pytest

from sparkwatch.window_spool import WindowSpool


def count_windows_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that each slice handed to any WindowSpool appends its length to, for the test's duration."""
    made: list[int] = []
    handed = WindowSpool.__call__

    def counting(self: WindowSpool, lo: int, windows: list[Any]) -> None:
        made.append(len(windows))
        handed(self, lo, windows)

    monkeypatch.setattr(WindowSpool, "__call__", counting)
    return made
