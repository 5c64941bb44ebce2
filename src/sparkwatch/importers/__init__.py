"""Benchmark-harness result files → request windows (pure: a file in, windows out; nothing is posted here).

``read_windows(fmt, path)`` yields the windows as it reads the file (line-oriented formats are read line
by line, so a 200 MB capture is never held whole) and raises one :class:`ImportFormatError` line naming the
file where the file goes wrong; the client stages what it posts in one import that it commits only at the
end (store/windows.py), so a bad file imports nothing. ``load_windows`` is the same, as one list.
Formats, clock domains and mappings: docs/importers.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sparkwatch.core.stamps import utc_stamp
from sparkwatch.core.windows import Window, outside_span
from sparkwatch.importers import aiperf, genai_perf, guidellm, lmx_status, plain, run_export, vllm
from sparkwatch.importers.common import ClockAnchor, ImportFormatError, Problem, as_object

__all__ = [
    "FORMATS",
    "ClockAnchor",
    "ImportFormatError",
    "Importer",
    "export_answer",
    "load_windows",
    "read_windows",
    "windows_answer",
]

Parser = Callable[[Path, ClockAnchor | None], Iterable[Window]]


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
        "export": Importer(
            "export", run_export.parse, "a sparkwatch.run/1 export's windows (a coordinator's run, again)"
        ),
    }
)


def load_windows(
    fmt: str, path: Path, *, clock_anchor: ClockAnchor | None = None, allow_empty: bool = False
) -> list[Window]:
    """Every request window in ``path``, read as format ``fmt``; ImportFormatError if any of it is wrong, or
    if it has none unless ``allow_empty`` (a whole run measured from a TSDB needs none)."""
    return list(read_windows(fmt, path, clock_anchor=clock_anchor, allow_empty=allow_empty))


def read_windows(
    fmt: str,
    path: Path,
    *,
    clock_anchor: ClockAnchor | None = None,
    since_ns: int | None = None,
    now_ns: Callable[[], int] = time.time_ns,
    allow_empty: bool = False,
) -> Iterator[Window]:
    """The windows of ``path`` as they are read. A wrong format or a missing clock anchor fails here; a
    problem inside the file fails where the iteration meets it. ``since_ns``: every window must lie between
    then and ``now_ns()``, give or take ``SPAN_SLACK_NS`` (the harness ran while this run was open, on this
    host's clock: a window outside is a file an earlier run left behind, or a clock that is off)."""
    name = str(path)  # as given: runs/a/win.json and runs/b/win.json were both "win.json"
    importer = FORMATS.get(fmt)
    if importer is None:
        raise ImportFormatError(name, f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if importer.needs_clock_anchor and clock_anchor is None:
        raise ImportFormatError(name, vllm.missing_anchor(path))
    # a file that is not there is said now, before a coordinator is asked to begin an import (not opened
    # here: a pipe, <(…), would be read and lost)
    if not path.exists():
        raise ImportFormatError(name, "no such file")
    if path.is_dir():
        raise ImportFormatError(name, "is a directory, not a file")
    span = None if since_ns is None else (since_ns, now_ns)
    return _checked(name, fmt, lambda: importer.parse(path, clock_anchor), span, allow_empty=allow_empty)


def export_answer(data: Any, label: str) -> tuple[list[Window], run_export.ExportedRun]:
    """A coordinator's export of a run (its answer, not a file: ``label`` names the route), read as the
    ``export`` format reads a file: its windows, checked as an import's, and its run."""
    return _answer(data, label, run_export.export_of, run_export.run_of)


def windows_answer(data: Any, label: str) -> tuple[list[Window], run_export.ExportedRun]:
    """A coordinator's ``GET /v1/runs/{id}/windows`` answer (the run as stored and its windows, none
    measured), read as :func:`export_answer` reads its export."""
    return _answer(data, label, lambda value: as_object(value, "the answer"), run_export.stored_run_of)


def _answer(
    data: Any,
    label: str,
    shaped: Callable[[Any], dict[str, Any]],
    run_of: Callable[[dict[str, Any]], run_export.ExportedRun],
) -> tuple[list[Window], run_export.ExportedRun]:
    windows_of = run_export.windows_of  # none: a run measured whole (the caller judges by its scope)
    windows = list(
        _checked(label, run_export.FORMAT, lambda: windows_of(shaped(data), label), allow_empty=True)
    )
    try:
        return windows, run_of(shaped(data))
    except Problem as problem:
        raise ImportFormatError(label, str(problem)) from None


def _checked(
    name: str,
    fmt: str,
    parse: Callable[[], Iterable[Window]],
    span: tuple[int, Callable[[], int]] | None = None,
    *,
    allow_empty: bool = False,
) -> Iterator[Window]:
    seen: set[str] = set()
    outside: str | None = None  # the first window outside the run: said once the file is read through,
    try:  # so a malformed row further on is said first (it was found only after the file was "fixed")
        for window in parse():
            if window.id in seen:
                raise ImportFormatError(name, f"two requests share the window id {window.id!r}")
            seen.add(window.id)
            if outside is None and span is not None and outside_span([window], span[0], now := span[1]()):
                outside = _not_this_run(window, span[0], now)
            if outside is None:
                yield window
    except Problem as problem:
        raise ImportFormatError(name, str(problem)) from None
    except (KeyError, TypeError, IndexError, AttributeError, ValueError, RecursionError) as exc:
        if isinstance(exc, ImportFormatError):
            raise
        # a shape no check above anticipated: still one line naming the file, never a traceback
        raise ImportFormatError(
            name, f"unexpected structure for {fmt} ({type(exc).__name__}: {exc})"
        ) from exc
    if outside is not None:
        raise ImportFormatError(name, outside)
    if not seen and not allow_empty:
        raise ImportFormatError(name, f"no requests found in this {fmt} file")


def _not_this_run(window: Window, since_ns: int, now_ns: int) -> str:
    return (
        f"window {window.id!r} ({utc_stamp(window.t_start_ns)} to {utc_stamp(window.t_end_ns)}) lies outside"
        f" this run (open from {utc_stamp(since_ns)} to {utc_stamp(now_ns)}): a result file an earlier run"
        " left behind, or a harness clock that is off?"
    )
