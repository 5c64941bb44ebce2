"""Clocks that lie, for real processes: libfaketime (Debian's libfaketime, installed by .ci/run)."""

from __future__ import annotations

import pathlib

import pytest

LIBRARY = next(pathlib.Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"), pathlib.Path("/missing"))


def faketime_env(control: pathlib.Path) -> dict[str, str]:
    """Environment for a process whose wall clock follows ``control`` (re-read on every call: write
    "+0", then "-20" to step it back 20 s, or "+0 x1.00005" to make it run 50 ppm fast); its monotonic
    clock stays true, as a real one does through any step."""
    if not LIBRARY.exists():
        pytest.fail("libfaketime missing: install the Debian package libfaketime (.ci/run does)")
    if not control.exists():
        set_fake_time(control, "+0")
    return {
        "LD_PRELOAD": str(LIBRARY),
        "FAKETIME_TIMESTAMP_FILE": str(control),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def set_fake_time(control: pathlib.Path, spec: str) -> None:
    """Change the fake clock in one step: the file is replaced, never seen empty or half written by a
    process that re-reads it on every clock call (libfaketime would read a garbled time)."""
    part = control.with_name(control.name + ".part")
    part.write_text(spec + "\n")
    part.replace(control)
