"""A coordinator's run measured again from elsewhere: the windows of a ``sparkwatch.run/1`` export (format
``export``), and `export --prometheus` taking the run's span, gate, scope and phases from it.

The fixture is the export `sparkwatch demo` wrote (tests/fixtures/harness/README.md)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkwatch.core.windows import WINDOW_FIELDS
from sparkwatch.importers import ImportFormatError, export_answer, load_windows
from sparkwatch.importers.run_export import exported_run

DEMO = Path(__file__).parents[1] / "fixtures" / "harness" / "export" / "demo-run.json"


def demo() -> dict[str, Any]:
    return copy.deepcopy(json.loads(DEMO.read_text()))


def written(tmp_path: Path, data: Any, name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_an_exports_windows_are_the_windows_the_run_took() -> None:
    data = demo()
    windows = load_windows("export", DEMO)
    assert len(windows) == len(data["windows"]) == 4
    for window, exported in zip(windows, data["windows"], strict=True):
        mine = window.to_json()
        for name in WINDOW_FIELDS:
            if name != "source":
                assert mine[name] == exported[name], name
        assert window.source["format"] == "export" and window.source["file"] == DEMO.name
        assert window.source["run_id"] == data["run"]["id"]
        assert window.source["taken"] == exported["source"]  # the proxy's, whole
        assert not window.failed
    assert [w.phase for w in windows] == ["warmup", "timed", "timed", "timed"]


def test_a_request_cut_short_stays_unmeasured(tmp_path: Path) -> None:
    data = demo()
    data["windows"][2]["source"]["upstream_unfinished"] = True
    data["windows"][3]["http_status"] = 503
    windows = load_windows("export", written(tmp_path, data))
    assert [w.failed for w in windows] == [False, False, True, True]
    assert windows[2].source["upstream_unfinished"] is True


def test_the_exported_run_gives_its_span_gate_scope_and_phases(tmp_path: Path) -> None:
    data = demo()
    run = exported_run(DEMO)
    assert (run.t_start_ns, run.t_end_ns) == (data["run"]["t_start_ns"], data["run"]["t_end_ns"])
    assert (run.gate_threshold, run.scope, run.phases) == (0.5, "request", ("timed",))
    data["run"]["t_end_ns"] = None  # exported while it was open
    data["method"].update(scope="decode", phases=["timed", "warmup"])
    data["method"]["gate"]["threshold_ratio"] = 0.3
    run = exported_run(written(tmp_path, data))
    assert (run.t_end_ns, run.gate_threshold, run.scope, run.phases) == (
        None,
        0.3,
        "decode",
        ("timed", "warmup"),
    )


def _other_schema(d: dict[str, Any]) -> None:
    d["schema"] = "sparkwatch.run/2"


def _no_id(d: dict[str, Any]) -> None:
    del d["windows"][1]["id"]


def _string_time(d: dict[str, Any]) -> None:
    d["windows"][0]["t_end_ns"] = "later"


def _end_before_start(d: dict[str, Any]) -> None:
    d["windows"][0]["t_end_ns"] = d["windows"][0]["t_start_ns"] - 1


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_other_schema, "an export of schema 'sparkwatch.run/2'; this sparkwatch reads sparkwatch.run/1"),
        (_no_id, "windows[1]: missing id"),
        (_string_time, "windows[0].t_end_ns must be an integer, found a string"),
        (_end_before_start, "windows[0]: t_end_ns: ends before it starts"),
    ],
)
def test_a_broken_export_is_one_line_naming_the_file(tmp_path: Path, change: Any, said: str) -> None:
    data = demo()
    change(data)
    with pytest.raises(ImportFormatError) as info:
        load_windows("export", path := written(tmp_path, data))
    assert str(info.value).startswith(f"{path}: ") and said in str(info.value), info.value


def test_other_files_given_as_an_export_or_an_export_as_plain_say_what_they_are(tmp_path: Path) -> None:
    plain = written(tmp_path, {"windows": []}, "plain.json")
    with pytest.raises(ImportFormatError, match=r"not a sparkwatch export.*plain windows file"):
        load_windows("export", plain)
    with pytest.raises(
        ImportFormatError, match="this looks like a sparkwatch export: read its windows with format export"
    ):
        load_windows("plain", DEMO)
    bad = demo()
    bad["method"]["scope"] = "everything"
    with pytest.raises(ImportFormatError, match=r"method\.scope must be one of request, decode, run"):
        exported_run(written(tmp_path, bad))


def _export(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkwatch", "export", *argv], capture_output=True, text=True, timeout=60
    )


def test_export_prometheus_takes_the_span_from_the_export_and_asks_for_an_open_runs_end(
    tmp_path: Path,
) -> None:
    """No --start/--end with an export's windows: its run's span (the engine is then asked: none listens
    here); a run exported while open has no end to give, which is one line before the engine is asked."""
    done = _export("--prometheus", "http://127.0.0.1:1", "--windows", str(DEMO), "--windows-format", "export")
    assert done.returncode != 0 and "cannot reach" in done.stderr and "Traceback" not in done.stderr, (
        done.stderr
    )
    data = demo()
    data["run"]["t_end_ns"] = None
    open_run = written(tmp_path, data)
    done = _export(
        "--prometheus", "http://127.0.0.1:1", "--windows", str(open_run), "--windows-format", "export"
    )
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert (
        f"run {data['run']['id']} was still open when exported (it has no end yet): give --end" in done.stderr
    )
    # one bound given, the other the run's: the 31-day limit holds as for two flags (read for minutes,
    # or for good, before); said before the engine is asked
    for bound, value in (("--start", "2026-01-01T00:00:00Z"), ("--end", "2099-12-01T00:00:00Z")):
        done = _export(
            "--prometheus", "http://127.0.0.1:1", "--windows", str(DEMO), "--windows-format", "export",
            bound, value,
        )  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "--start to --end spans more than 31 days (" in done.stderr, done.stderr
    long_run = demo()  # a run's own span past 31 days, no flag given: read as long as it is (asked here)
    long_run["run"]["t_start_ns"] -= 40 * 86_400 * 10**9
    done = _export(
        "--prometheus", "http://127.0.0.1:1", "--windows", str(written(tmp_path, long_run)),
        "--windows-format", "export",
    )  # fmt: skip
    assert "cannot reach" in done.stderr and "spans more than" not in done.stderr, done.stderr
    done = _export("--prometheus", "http://127.0.0.1:1", "--windows", str(DEMO))  # plain: the span is needed
    assert done.returncode == 2 and "--prometheus needs --start, --end" in done.stderr, done.stderr
    assert "a run's export file as --windows with --windows-format export" in done.stderr
    done = _export("--prometheus", "http://127.0.0.1:1", "run-x", "--windows-format", "export")
    assert done.returncode == 2 and "RUN (a coordinator's run) or --windows FILE" in done.stderr, done.stderr


def test_a_run_without_windows_is_measured_from_a_tsdb_only_in_the_run_scope(tmp_path: Path) -> None:
    """A run measured whole (`run --scope run`, which `run` itself suggests) has no windows: it exported from
    the database, and was refused from Prometheus (`the run has no windows: nothing to measure again`),
    from a coordinator's RUN, an export file or an empty plain file alike. Now only a scope that measures
    windows refuses, before the engine is asked."""
    data = demo()
    data["windows"] = []
    data["method"]["scope"] = "run"
    windows, run = export_answer(data, "http://c:8750/v1/runs/r/export")
    assert windows == [] and run.scope == "run"
    empty = written(tmp_path, data)
    plain = written(tmp_path, {"windows": []}, "plain.json")
    span = ("--start", "1700000000", "--end", "1700000060")
    for argv, what in (
        (("--windows", str(empty), "--windows-format", "export", "--scope", "request"), "run.json"),
        (("--windows", str(plain), *span), "plain.json"),
    ):
        done = _export("--prometheus", "http://127.0.0.1:1", *argv)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"{what} holds no requests: nothing to measure in scope request (--scope run measures the" in (
            done.stderr
        )
    for argv in (
        ("--windows", str(empty), "--windows-format", "export"),
        ("--windows", str(plain), *span, "--scope", "run"),
    ):
        done = _export("--prometheus", "http://127.0.0.1:1", *argv)  # taken: the engine is asked, and down
        assert done.returncode == 2 and "nothing to measure" not in done.stderr, done.stderr
        assert "127.0.0.1:1" in done.stderr and "Traceback" not in done.stderr
    windows, run = export_answer(demo(), "http://c:8750/v1/runs/r/export")
    assert len(windows) == 4 and run.id == demo()["run"]["id"]
    assert windows[0].source["file"] == "http://c:8750/v1/runs/r/export"
