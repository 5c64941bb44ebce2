"""How many windows an export made, counted where every one of them passes: the windows tap a command or
the coordinator hands the export (a window spool, a first-pass keeper) sees every pass that makes them,
not only the first."""

from __future__ import annotations

from typing import Any

import pytest

from sparkwatch.core.window_rows import FirstPass
from sparkwatch.window_spool import WindowSpool


def count_windows_made(
    monkeypatch: pytest.MonkeyPatch, tap: type[WindowSpool] | type[FirstPass] = WindowSpool
) -> list[int]:
    """A list that each slice handed to any ``tap`` appends its length to, for the test's duration."""
    made: list[int] = []
    handed = tap.__call__

    def counting(self: Any, lo: int, windows: list[Any]) -> None:
        made.append(len(windows))
        handed(self, lo, windows)

    monkeypatch.setattr(tap, "__call__", counting)
    return made
