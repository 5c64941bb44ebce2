"""Benchmark-harness result files → request windows (pure: a file in, windows out; nothing is posted here).

``load_windows(fmt, path)`` parses the whole file first and returns only when every request in it is
valid, so a bad file imports nothing. Every failure is one :class:`ImportFormatError` line naming the file.
Formats, clock domains and mappings: docs/importers.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from sparkwatch.core.windows import Window, duplicate_id
from sparkwatch.importers import aiperf, genai_perf, guidellm, lmx_status, plain, vllm
from sparkwatch.importers.common import ClockAnchor, ImportFormatError, Problem

__all__ = ["FORMATS", "ClockAnchor", "ImportFormatError", "Importer", "load_windows"]

Parser = Callable[[Path, ClockAnchor | None], list[Window]]


@dataclass(frozen=True, slots=True)
class Importer:
    name: str
    parse: Parser
    summary: str
    needs_clock_anchor: bool = False


FORMATS: Mapping[str, Importer] = MappingProxyType(
    {
        "guidellm": Importer("guidellm", guidellm.parse, "guidellm benchmarks.json (Unix seconds)"),
        "genai-perf": Importer("genai-perf", genai_perf.parse, "genai-perf profile_export.json (epoch ns)"),
        "aiperf": Importer("aiperf", aiperf.parse, "AIPerf profile_export.jsonl (epoch ns)"),
        "vllm": Importer(
            "vllm",
            vllm.parse,
            "vllm bench serve --save-detailed JSON (perf_counter s)",
            needs_clock_anchor=True,
        ),
        "lmx-status": Importer(
            "lmx-status", lmx_status.parse, "lmx --json-status capture from sparkwatch run"
        ),
        "plain": Importer("plain", plain.parse, "sparkwatch plain windows, .csv or .json (epoch ns)"),
    }
)


def load_windows(fmt: str, path: Path, *, clock_anchor: ClockAnchor | None = None) -> list[Window]:
    """Every request window in ``path``, read as format ``fmt``; ImportFormatError if any of it is wrong."""
    name = path.name or str(path)
    importer = FORMATS.get(fmt)
    if importer is None:
        raise ImportFormatError(name, f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if importer.needs_clock_anchor and clock_anchor is None:
        raise ImportFormatError(name, vllm.NEEDS_ANCHOR_HINT)
    try:
        windows = importer.parse(path, clock_anchor)
    except Problem as problem:
        raise ImportFormatError(name, str(problem)) from None
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, RecursionError) as exc:
        # a shape no check above anticipated: still one line naming the file, never a traceback
        raise ImportFormatError(
            name, f"unexpected structure for {fmt} ({type(exc).__name__}: {exc})"
        ) from exc
    if not windows:
        raise ImportFormatError(name, f"no requests found in this {fmt} file")
    repeated = duplicate_id(windows)
    if repeated is not None:
        raise ImportFormatError(name, f"two requests share the window id {repeated!r}")
    return windows
