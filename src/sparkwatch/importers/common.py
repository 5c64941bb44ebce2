"""What every importer shares: the error type, the clock anchor, strict field readers and window checks.

Parsers raise :class:`Problem` (a message without the file name); :func:`sparkwatch.importers.load_windows`
turns it into one :class:`ImportFormatError` line naming the file. Every check a window must pass on the
coordinator's API is made here too (the core's own ``check_window``), so a file either imports whole or
fails before anything is posted.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO

from sparkwatch.core.windows import NS_MAX, Window, WindowError, check_window, epoch_ns_problem
from sparkwatch_agent.shared.strict_text import (
    TextFormatError,
    cut_short,
    loads_json,
    quoted_number,
    whole_number,
)
from sparkwatch_agent.shared.user_files import refuse_device

NS_PER_S = 1_000_000_000
_DIGITS = re.compile(r"[0-9]+")


class ImportFormatError(ValueError):
    """A harness file that cannot be imported; ``str()`` is one line: ``"<file as given>: <problem>"``."""

    def __init__(self, file: str, problem: str) -> None:
        self.file = file
        one_line = " ".join(problem.split())  # one line, whatever the harness put in its strings
        # a JSON Lines record's fields are named from its line ("line 3.metadata.x"): said as "line 3: …"
        self.problem = _LINE_FIELD.sub(r"\1: ", one_line, count=1)
        super().__init__(f"{file}: {self.problem}")


_LINE_FIELD = re.compile(r"^(line \d+)\.(?=\w)")


class Problem(ValueError):
    """What is wrong inside a file, before the file name is attached."""


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """One (wall, monotonic) pair read together on the host where the harness ran.

    ``uncertainty_ns`` is the gap between the two reads: the pair is only known to that precision.
    """

    wall_ns: int
    mono_ns: int
    uncertainty_ns: int = 0

    @classmethod
    def parse(cls, text: str) -> ClockAnchor:
        """``"WALL_NS:MONO_NS[:UNCERTAINTY_NS]"``, non-negative integers; else a one-line ValueError."""
        shown = cut_short(text.strip())
        parts = text.strip().split(":")
        if len(parts) not in (2, 3) or not all(_DIGITS.fullmatch(p) for p in parts):
            raise ValueError(
                f"clock anchor {shown!r}: expected WALL_NS:MONO_NS[:UNCERTAINTY_NS] (non-negative integers)"
            )
        try:
            wall_ns, mono_ns = whole_number(parts[0]), whole_number(parts[1])
            uncertainty_ns = whole_number(parts[2]) if len(parts) == 3 else 0
        except TextFormatError:
            raise ValueError(f"clock anchor {shown!r}: value out of the 64-bit range") from None
        problem = epoch_ns_problem(wall_ns)
        if problem is not None:
            raise ValueError(f"clock anchor {shown!r}: WALL_NS {problem}")
        if mono_ns > NS_MAX or uncertainty_ns > NS_MAX:
            raise ValueError(f"clock anchor {shown!r}: value out of the 64-bit range")
        return cls(wall_ns=wall_ns, mono_ns=mono_ns, uncertainty_ns=uncertainty_ns)

    @classmethod
    def read_now(
        cls, wall_ns: Callable[[], int] = time.time_ns, mono_ns: Callable[[], int] = time.monotonic_ns
    ) -> ClockAnchor:
        """A pair read here, where a harness runs: what a vLLM result file's perf_counter times need
        (Python's perf_counter is CLOCK_MONOTONIC on Linux, the same clock for every process). The
        tightest of five reads; its uncertainty is half the monotonic reads around the wall one."""
        best: tuple[int, int, int] | None = None
        for _ in range(5):
            m0 = mono_ns()
            wall = wall_ns()
            m1 = mono_ns()
            if best is None or m1 - m0 < best[2]:
                best = (wall, (m0 + m1) // 2, m1 - m0)
        assert best is not None
        return cls(wall_ns=best[0], mono_ns=best[1], uncertainty_ns=max(1, best[2] // 2))

    def to_wall_ns(self, mono_ns: int) -> int:
        return self.wall_ns + (mono_ns - self.mono_ns)

    def to_json(self) -> dict[str, int]:
        return {"wall_ns": self.wall_ns, "mono_ns": self.mono_ns, "uncertainty_ns": self.uncertainty_ns}


# ---- reading files ----


def read_text(path: Path) -> str:
    with reading(path) as handle:
        return handle.read()


def parse_json(text: str, where: str = "file") -> Any:
    """Standard JSON, strictly (shared.strict_text): NaN, Infinity and numbers past a double cannot be
    stored or exported, and nesting past the parser's stack is refused in words."""
    try:
        return loads_json(text)
    except TextFormatError as exc:
        raise Problem(f"{where} {exc}") from None


def read_json(path: Path) -> Any:
    text = read_text(path)
    if not text.strip():
        raise Problem("file is empty")
    try:
        return parse_json(text)
    except Problem as problem:
        first = text.lstrip().partition("\n")[0]
        if "Extra data" not in str(problem) or not first.strip():
            raise
        try:  # JSON Lines given where one document belongs: say whose lines they look like
            hint = looks_like(loads_json(first))
        except TextFormatError:
            raise problem from None
        raise Problem(f"{problem}: JSON Lines, not one document{hint}") from None


@contextmanager
def reading(path: Path, newline: str | None = None) -> Iterator[TextIO]:
    """The file open as UTF-8 text, read as the caller goes; what goes wrong reading it is a Problem. A
    device is refused before a byte is read: ``/dev/zero`` or ``/dev/urandom`` never ends, and would be
    read into memory until the machine ran out (a pipe, such as ``<(cmd)``, is read: it ends)."""
    try:
        refuse_device(path)
        with path.open(encoding="utf-8-sig", newline=newline) as handle:
            refuse_device(handle.fileno())
            yield handle
    except FileNotFoundError:
        raise Problem("no such file") from None
    except IsADirectoryError:
        raise Problem("is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise Problem(f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise Problem(f"cannot read: {exc.strerror or exc}") from None


#: The longest line a line-by-line harness file may have: AIPerf's records are a few kB. A longer one is no
#: record: ``tr '\0' a </dev/zero |`` as the file was read into memory until a MemoryError's traceback.
MAX_LINE_CHARS = 64 * 1024 * 1024


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) as the file is read: a large file is never held whole, nor a
    line longer than MAX_LINE_CHARS (a Problem)."""
    with reading(path) as handle:
        number = 0
        while line := handle.readline(MAX_LINE_CHARS + 1):
            number += 1
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                raise Problem(
                    f"line {number} is longer than {MAX_LINE_CHARS:,} characters: no harness record is"
                    " (is it the file meant?)"
                )
            yield number, line.rstrip("\n")


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-blank line, as the file is read."""
    rows = 0
    for number, line in text_lines(path):
        if not line.strip():
            continue
        try:
            value = parse_json(line, f"line {number}")
        except Problem:
            whole = None if rows else _whole_document(path)
            if whole is not None:
                raise Problem("not JSON Lines: the file is one JSON document" + looks_like(whole)) from None
            raise
        rows += 1
        yield number, value
    if not rows:
        raise Problem("file is empty")


#: A file larger than this that is not JSON Lines is not read again to say what it is instead.
WHOLE_DOCUMENT_HINT_BYTES = 64 * 1024 * 1024


def _whole_document(path: Path) -> Any:
    """The file as one (pretty-printed) JSON document, when that is what it is; else None."""
    try:
        if path.stat().st_size > WHOLE_DOCUMENT_HINT_BYTES:
            return None
        text = read_text(path)
    except (OSError, Problem):
        return None
    if len(text.strip().splitlines()) < 2:
        return None
    try:
        return parse_json(text)
    except Problem:
        return None


def looks_like(value: Any) -> str:
    """A hint naming the harness a foreign file seems to come from, for the error line."""
    if isinstance(value, dict):
        if "experiments" in value:
            return " (this looks like a genai-perf profile_export.json)"
        if "benchmarks" in value:
            return " (this looks like a guidellm benchmarks report)"
        if "start_times" in value or "ttfts" in value:
            return " (this looks like a vllm bench serve result)"
        if "windows" in value and str(value.get("schema", "")).startswith("sparkwatch.run/"):
            return " (this looks like a sparkwatch export: read its windows with format export)"
        if "windows" in value:
            return " (this looks like a sparkwatch plain windows file)"
        if "metadata" in value and "metrics" in value:
            return " (this looks like an AIPerf profile_export.jsonl record)"
        if "t_arrival_ns" in value and "status" in value:
            return " (this looks like a sparkwatch lmx-status capture)"
        if "records" in value and "input_config" in value:
            return (
                " (this looks like AIPerf's aggregate profile_export_aiperf.json, not the per-request .jsonl)"
            )
    return ""


# ---- strict field readers ----


def as_object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Problem(f"{where} must be a JSON object, found {type_name(value)}")
    return value


def as_list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise Problem(f"{where} must be a list, found {type_name(value)}")
    return value


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def field(obj: Mapping[str, Any], key: str, where: str) -> Any:
    """A required key."""
    if key not in obj:
        raise Problem(f"{where}: missing field '{key}'")
    return obj[key]


def as_int(value: Any, where: str, *, minimum: int = 0) -> int:
    """A JSON integer (not a boolean, not a float) no smaller than ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Problem(f"{where} must be an integer, found {type_name(value)}")
    if value < minimum:
        raise Problem(f"{where} must be >= {minimum}, found {quoted_number(value)}")
    if value > NS_MAX:
        raise Problem(f"{where} is beyond the 64-bit range: {quoted_number(value)}")
    return value


def as_count(value: Any, where: str) -> int:
    """A token count: a non-negative integer, also written as an integral float (3.0) by some harnesses."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return as_int(value, where)


def as_number(value: Any, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Problem(f"{where} must be a number, found {type_name(value)}")
    if not math.isfinite(value):
        raise Problem(f"{where} must be finite, found {value!r}")
    return value


def as_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise Problem(f"{where} must be a string, found {type_name(value)}")
    return value


def opt(obj: Mapping[str, Any], key: str) -> Any:
    """An optional key; absent and null are the same."""
    return obj.get(key)


# ---- units ----


def seconds_to_ns(seconds: int | float | Fraction) -> int:
    """Exactly the value a float (or sum of floats) holds, in integer ns: no second rounding in ×1e9."""
    return round(Fraction(seconds) * NS_PER_S)


def float_resolution_s(seconds: float) -> float:
    """The finest step a float-seconds value of this size can carry (never finer than the 1 ns clocks)."""
    return max(1e-9, math.ulp(seconds))


def epoch_ns(value: int, where: str) -> int:
    """An integer that must be a Unix epoch ns stamp (catches seconds, ms and monotonic values)."""
    problem = epoch_ns_problem(value)
    if problem is not None:
        raise Problem(f"{where}: {problem}")
    return value


# ---- the window itself ----


def checked(where: str, window: Window) -> Window:
    """``window`` if the coordinator would accept it (core.windows.check_window), else a Problem naming
    ``where``: a file imports whole or fails before anything is posted."""
    try:
        return check_window(window)
    except WindowError as exc:
        raise Problem(f"{where}: {exc}") from None


def base_source(
    fmt: str, path: Path, clock_domain: str, mapping: dict[str, object], resolution_s: float
) -> dict[str, object]:
    """The keys every window's ``source`` carries."""
    return {
        "format": fmt,
        "file": path.name,
        "clock_domain": clock_domain,
        "mapping": mapping,
        "resolution_s": resolution_s,
    }
