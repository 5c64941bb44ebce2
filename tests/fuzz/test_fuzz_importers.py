"""Hostile harness files through every importer: the real files of tests/fixtures/harness (see its
README for where each came from) with values replaced by other types, huge numbers and raw fragments,
keys deleted or added, bytes flipped, truncated, lines dropped or repeated, or replaced by garbage.

Every case, read as the CLI reads it (``read_windows``, lazily, to the end): either windows that all obey
the rules docs/coordinator.md states (the independent oracle of fuzz/window_rules.py), with unique ids; or
one ``ImportFormatError`` of one line naming the file. Never any other exception, never a hang.
"""

from __future__ import annotations

import csv
import io
import json
import pathlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from fuzz.hostile import JSON, damaged, hostile_bytes, mutated
from fuzz.profiles import bounded, fuzz_settings
from fuzz.window_rules import doc_problem
from sparkwatch.importers import FORMATS, ClockAnchor, ImportFormatError, read_windows

HARNESS = pathlib.Path(__file__).parents[1] / "fixtures" / "harness"
S = 1_000_000_000
#: The vllm file's perf_counter seconds anchored as test_importers.py anchors them.
ANCHOR = ClockAnchor(wall_ns=1_759_522_400 * S, mono_ns=8_100 * S, uncertainty_ns=2_000)


@dataclass(frozen=True, slots=True)
class Sample:
    fmt: str
    name: str  # the file name the importer sees (its suffix picks plain's CSV or JSON reader)
    data: bytes
    layout: str  # "json": one document; "jsonl": a document per line; "csv"


def _without_series(path: pathlib.Path) -> bytes:
    """The export without its plot data: mutations land on what the importer reads, not on 20 000 points."""
    data = json.loads(path.read_bytes())
    data.pop("series", None)
    return json.dumps(data).encode()


SAMPLES = (
    Sample("guidellm", "benchmarks.json", (HARNESS / "guidellm/benchmarks.json").read_bytes(), "json"),
    Sample("guidellm", "benchmarks.json", (HARNESS / "guidellm/benchmarks_v0.2.json").read_bytes(), "json"),
    Sample(
        "genai-perf", "profile_export.json", (HARNESS / "genai-perf/profile_export.json").read_bytes(), "json"
    ),
    Sample("aiperf", "profile_export.jsonl", (HARNESS / "aiperf/profile_export.jsonl").read_bytes(), "jsonl"),
    Sample(
        "aiperf", "profile_export.jsonl", (HARNESS / "aiperf/profile_export_v0.1.jsonl").read_bytes(), "jsonl"
    ),
    Sample("vllm", "detailed.json", (HARNESS / "vllm/bench_serve_detailed.json").read_bytes(), "json"),
    Sample("lmx-status", "status.jsonl", (HARNESS / "lmx-status/status.jsonl").read_bytes(), "jsonl"),
    Sample("plain", "windows.json", (HARNESS / "plain/windows.json").read_bytes(), "json"),
    Sample("plain", "windows.csv", (HARNESS / "plain/windows.csv").read_bytes(), "csv"),
    Sample("export", "run.json", _without_series(HARNESS / "export/demo-run.json"), "json"),
)
assert {s.fmt for s in SAMPLES} == set(FORMATS), "every importer is fuzzed"


def _mutated_json(data: bytes) -> st.SearchStrategy[bytes]:
    return mutated(json.loads(data)).map(lambda doc: doc.encode())


@st.composite
def _mutated_lines(draw: st.DrawFn, data: bytes) -> bytes:
    """A JSON-lines file with one to three of its lines mutated."""
    original = data.decode().splitlines()
    lines = list(original)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        if original[at].strip():
            lines[at] = draw(mutated(json.loads(original[at]))).encode().decode("utf-8", "surrogatepass")
    return "\n".join(lines).encode("utf-8", "surrogatepass")


@st.composite
def _mutated_csv(draw: st.DrawFn, data: bytes) -> bytes:
    """A CSV file with cells replaced by hostile text, and rows or columns short or long."""
    rows = list(csv.reader(io.StringIO(data.decode())))
    cell = st.one_of(
        st.sampled_from(["", "-1", "1e999", "nan", "9" * 40, "2.5", "NULL", '"', "0x10", "1_000", " 7 "]),
        st.text(max_size=20),
    )
    for _ in range(draw(st.integers(1, 4))):
        row = draw(st.integers(0, len(rows) - 1))
        op = draw(st.sampled_from(["cell", "cell", "short", "long"]))
        if op == "cell" and rows[row]:
            rows[row][draw(st.integers(0, len(rows[row]) - 1))] = draw(cell)
        elif op == "short" and rows[row]:
            rows[row].pop()
        else:
            rows[row].append(draw(cell))
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue().encode("utf-8", "surrogatepass")


def hostile_file(sample: Sample) -> st.SearchStrategy[bytes]:
    structure = {"json": _mutated_json, "jsonl": _mutated_lines, "csv": _mutated_csv}[sample.layout]
    structured = structure(sample.data)
    return st.one_of(st.just(sample.data), structured, structured, damaged(sample.data), hostile_bytes())


@pytest.fixture(scope="module")
def workdir() -> Iterator[pathlib.Path]:
    """One folder for the module's cases (hypothesis runs each example in the same test call), removed
    after them: it was left in /tmp by every run."""
    with tempfile.TemporaryDirectory(prefix="sparkwatch-import-fuzz-") as folder:
        yield pathlib.Path(folder)


@fuzz_settings()
@given(data=st.data())
def test_any_damaged_harness_file_imports_whole_or_is_one_line(
    workdir: pathlib.Path, data: st.DataObject
) -> None:
    sample = data.draw(st.sampled_from(SAMPLES), label="file")
    content = data.draw(hostile_file(sample), label="content")
    path = workdir / sample.name
    path.write_bytes(content)
    anchor = ANCHOR if FORMATS[sample.fmt].needs_clock_anchor else None

    try:
        with bounded():
            windows = list(read_windows(sample.fmt, path, clock_anchor=anchor))
    except ImportFormatError as refusal:
        message = str(refusal)
        assert "\n" not in message and "\r" not in message, f"a refusal of more than one line: {message!r}"
        assert sample.name in message, f"a refusal that does not name the file: {message!r}"
        event(f"{sample.fmt}: refused")
        return

    event(f"{sample.fmt}: imported")
    assert windows, "an import with no windows must be refused"
    ids = [w.id for w in windows]
    assert len(set(ids)) == len(ids), "two windows share an id"
    for window in windows:
        body: dict[str, JSON] = window.to_body()
        problem = doc_problem(body)
        assert problem is None, f"{sample.fmt} yielded a window the docs refuse ({problem}): {body!r}"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: f"{s.fmt}:{s.name}:{len(s.data)}")
def test_every_real_file_imports(sample: Sample, workdir: pathlib.Path) -> None:
    """The unchanged files import (the fuzz target's oracle is not vacuous)."""
    path = workdir / sample.name
    path.write_bytes(sample.data)
    anchor = ANCHOR if FORMATS[sample.fmt].needs_clock_anchor else None
    windows = list(read_windows(sample.fmt, path, clock_anchor=anchor))
    assert windows and all(doc_problem(w.to_body()) is None for w in windows)
