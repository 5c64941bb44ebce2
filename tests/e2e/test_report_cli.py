"""`sparkwatch report` as a user runs it: the page and the figures from an export file, its default path,
and a one-line refusal (exit 2, nothing written) for every export or folder it cannot use. (`run
--no-report`: tests/e2e/test_run_and_demo.py.)"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from helpers.cli import sparkwatch
from helpers.synthetic_run import synthetic_export
from sparkwatch.outputs import write_export

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def export_file(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("report") / "run.json"
    write_export(path, synthetic_export(hours=0.1, windows=20, series_buckets=400))
    return path


def _one_line_refusal(result: Any, words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert words in result.stderr, result.stderr


def test_the_report_and_its_figures_from_an_export_file(
    export_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    result = sparkwatch(
        "report", str(export_file), "--png", str(tmp_path / "png"), "--svg", str(tmp_path / "svg")
    )
    assert result.returncode == 0, result.stderr
    page = export_file.with_name("run.report.html")
    assert f"report written to {page}" in result.stderr and page.read_text().startswith("<!doctype html>")
    nodes = [n["node"] for n in json.loads(export_file.read_text())["nodes"]]
    run_id = json.loads(export_file.read_text())["run"]["id"]
    pngs = sorted((tmp_path / "png").iterdir())
    assert [p.name for p in pngs] == [f"{run_id}-{n}.png" for n in nodes]
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in pngs)
    svgs = sorted((tmp_path / "svg").iterdir())
    assert len(svgs) == len(nodes) and all(b"<svg" in p.read_bytes()[:200] for p in svgs)
    assert "4 PNG figure(s)" in result.stderr and "4 SVG figure(s)" in result.stderr


def test_a_control_character_in_a_name_is_drawn_escaped(
    export_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A NUL in a node name (a TSDB label's value) or a control character in a line's label aborted
    `--png`/`--svg` with a Rust panic (exit 134, a backtrace): XML, which the figures' text passes through,
    cannot hold them. They are drawn as escapes."""
    text = export_file.read_text().replace('"spark-1"', json.dumps("spark\u00001"))
    odd = json.loads(text.replace('"page cache"', json.dumps("page\u0001cache")))
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(odd))
    result = sparkwatch("report", str(path), "--png", str(tmp_path / "png"), "--svg", str(tmp_path / "svg"))
    assert result.returncode == 0 and "panicked" not in result.stderr, result.stderr
    (svg,) = [p for p in (tmp_path / "svg").iterdir() if "spark_1" in p.name]
    assert "spark\\x001" in svg.read_text() and "page\\x01cache" in svg.read_text()
    assert len(list((tmp_path / "png").iterdir())) == 4


def test_an_export_without_series_still_reports_its_tables_and_says_why(
    export_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    bare = {k: v for k, v in json.loads(export_file.read_text()).items() if k != "series"}
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(bare))
    result = sparkwatch("report", str(path), "-o", str(tmp_path / "bare.html"))
    assert result.returncode == 0, result.stderr
    assert "has no series block" in result.stderr and 'id="no-series"' in (tmp_path / "bare.html").read_text()
    refused = sparkwatch("report", str(path), "--png", str(tmp_path / "png"))
    _one_line_refusal(refused, "has no series block, so there are no figures to draw")
    assert not (tmp_path / "png").exists() and not (tmp_path / "bare.report.html").exists()


def test_what_the_report_cannot_use_is_one_line_and_writes_nothing(
    export_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "not.json").write_text("{nope")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something.else/1"}))
    broken = json.loads(export_file.read_text())
    del broken["nodes"][0]["power_w"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "a-file").write_text("")
    (tmp_path / "nan.json").write_text(
        export_file.read_text().replace('"gated_mean": ', '"gated_mean": NaN, "x": ', 1)
    )
    ragged = json.loads(export_file.read_text())
    ragged["series"]["nodes"][0]["lines"][0]["v"].pop()
    (tmp_path / "ragged.json").write_text(json.dumps(ragged))
    (tmp_path / "self.json").write_text(export_file.read_text())
    wordy = json.loads(export_file.read_text())
    wordy["lmx"]["notes"] = "x" * 2001
    (tmp_path / "wordy.json").write_text(json.dumps(wordy))
    # what Python's json lets through to fail later, as a RecursionError or OverflowError traceback
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    huge = json.loads(export_file.read_text())
    huge["method"]["gate"]["threshold_ratio"] = 10**400
    (tmp_path / "huge.json").write_text(json.dumps(huge))
    (tmp_path / "utf16.json").write_bytes(b"\xff\xfe" + export_file.read_text().encode("utf-16-le"))
    # parts that do not fit together, which the report read side by side: each column named for another node
    short = json.loads(export_file.read_text())
    del short["nodes"][0]
    (tmp_path / "short.json").write_text(json.dumps(short))
    turned = json.loads(export_file.read_text())
    turned["series"]["nodes"].reverse()
    (tmp_path / "turned.json").write_text(json.dumps(turned))
    backwards = json.loads(export_file.read_text())
    middle = backwards["windows"][len(backwards["windows"]) // 2]
    middle["t_end_ns"] = middle["t_start_ns"] - 1
    (tmp_path / "backwards.json").write_text(json.dumps(backwards))
    cases = [
        (["report", str(tmp_path / "missing.json")], "cannot read"),
        (["report", str(tmp_path / "not.json")], "is not JSON"),
        (
            ["report", str(tmp_path / "other.json")],
            "is not a sparkwatch.run/1 export (schema: 'something.else/1')",
        ),
        (["report", str(tmp_path / "broken.json")], "at nodes/0: 'power_w' is a required property"),
        (["report", str(export_file), "-o", str(tmp_path / "no" / "r.html")], "does not exist"),
        (["report", str(export_file), "--png", str(tmp_path / "a-file")], "it is not a folder"),
        (
            ["report", str(export_file), "--svg", str(tmp_path / "no" / "svg")],
            f"folder {tmp_path / 'no'} does not",
        ),
        (  # procfs refuses even root a new entry: a folder that is not writable, checked before the page
            ["report", str(export_file), "-o", str(tmp_path / "r.html"), "--svg", "/proc/self/figures"],
            "cannot write images to /proc/self/figures: folder /proc/self is not writable",
        ),
        (["report", str(tmp_path / "nan.json")], "contains NaN, not a number JSON allows"),
        (["report", str(tmp_path / "deep.json")], "deep.json is JSON nested too deep to read"),
        (["report", str(tmp_path / "huge.json")], "contains an integer of 401 digits, a number too large"),
        (["report", str(tmp_path / "utf16.json")], "utf16.json is not UTF-8 text (byte 0xff at offset 0)"),
        (["report", str(tmp_path / "wordy.json")], "lmx/notes: 'xxxxxxxxxxxx...xxxxxxxxxxxxx' is too long"),
        (["report", str(tmp_path / "ragged.json")], "has unequal t_s and v"),
        (
            ["report", str(tmp_path / "short.json")],
            "series.nodes lists ['spark-1', 'spark-2', 'spark-3', 'spark-4'] where nodes[] lists ['spark-2',",
        ),
        (["report", str(tmp_path / "turned.json")], "series.nodes lists ['spark-4', 'spark-3',"),
        (
            ["report", str(tmp_path / "backwards.json")],
            f"window {middle['id']!r} ends before it starts: was it",
        ),
        (
            ["report", str(tmp_path / "self.json"), "-o", str(tmp_path / "self.json")],
            "is the export itself",
        ),
    ]
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv, words in cases:
        _one_line_refusal(sparkwatch(*argv), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "self.json").read_text() == export_file.read_text()  # the export was not replaced


def test_odd_values_the_schema_allows_are_reported_as_they_are(
    export_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Hardware facts of other shapes (the schema says only "an object" of hardware): a traceback each,
    before; now the page says what it can. A start far outside any date was one too; the schema now
    bounds every window's and the run's stamps (2000 to 2100), so such a file is refused in one line."""
    odd = json.loads(export_file.read_text())
    odd["run"]["t_start_ns"] = 10**300
    path = tmp_path / "far.json"
    path.write_text(json.dumps(odd))
    result = sparkwatch("report", str(path), "-o", str(tmp_path / "far.html"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.endswith(
        "at run/t_start_ns: 100000000000000000...0000000000000000000 is greater than"
        " the maximum of 4102444799999999999\n"
    ), result.stderr
    assert not (tmp_path / "far.html").exists()
    odd["run"]["t_start_ns"] = json.loads(export_file.read_text())["run"]["t_start_ns"]
    odd["nodes"][0]["hardware"] = {"gpus": ["abc", None, 3], "host": "h", "memory_total_bytes": "lots"}
    odd["nodes"][1]["hardware"] = {"gpus": "abc"}
    odd["nodes"][2]["hardware"] = {"host": {"hostname": ["x"]}, "driver_version": {"a": 1}}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(odd))
    result = sparkwatch("report", str(path), "-o", str(tmp_path / "odd.html"))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    page = (tmp_path / "odd.html").read_text()
    assert "n/a (n/a), n/a (n/a), n/a (n/a)" in page


def test_a_figure_that_cannot_be_written_leaves_nothing_behind(
    export_file: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A figure's name already a folder (as a full disk, found by a bad-input sweep): the page was written
    first and stayed, with an empty folder of figures. Now it is one line and nothing is written: no page,
    no folder made, no figure staged."""
    export = json.loads(export_file.read_text())
    last = f"{export['run']['id']}-{export['nodes'][-1]['node']}.svg"
    svgs = tmp_path / "svg"
    (svgs / last).mkdir(parents=True)
    page = tmp_path / "page.html"
    result = sparkwatch(
        "report", str(export_file), "-o", str(page), "--png", str(tmp_path / "png"), "--svg", str(svgs)
    )
    _one_line_refusal(result, f"cannot write {svgs / last}: it is a folder")
    assert not page.exists() and not (tmp_path / "png").exists()  # the PNGs, made first, are gone again
    assert [p.name for p in svgs.iterdir()] == [last]  # the folder that was there, and nothing else
