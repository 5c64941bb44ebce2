"""``--clock-anchor`` (`import`, `run`, `export --prometheus`): the wall/monotonic pair that places a vllm
file's monotonic stamps, refused for a format whose times would not move."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from sparkwatch.importers import FORMATS, ClockAnchor


def anchor_of(
    args: argparse.Namespace, parser: argparse.ArgumentParser, formats: Sequence[str]
) -> ClockAnchor | None:
    """``--clock-anchor``, for the ``formats`` imported; refused where none of them takes one (a wall-clock
    file's times would not move: the flag was silently ignored)."""
    if not args.clock_anchor:
        return None
    if not any(FORMATS[f].needs_clock_anchor for f in formats if f in FORMATS):
        takes = ", ".join(name for name, i in FORMATS.items() if i.needs_clock_anchor)
        said = (
            f"not for {', '.join(dict.fromkeys(formats))}"
            if formats
            else f"and no --import {takes}:FILE was given"
        )
        parser.error(f"--clock-anchor is for {takes} files (their monotonic stamps), {said}")
    try:
        return ClockAnchor.parse(args.clock_anchor)
    except ValueError as exc:
        parser.error(f"--clock-anchor: {exc}")
