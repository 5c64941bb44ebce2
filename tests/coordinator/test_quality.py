"""The measurement's quality line and ``--strict``'s exit code, from exports shaped like real ones, and the
user's config file that can make every run strict."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import tempfile
from typing import Any

import pytest

from sparkwatch.commands.quality import EXIT_NOT_SOUND, exit_code, judge
from sparkwatch.core.windows import Window, outside_span
from sparkwatch.importers import read_windows
from sparkwatch.proxy.spill import spill_safely, write_spill
from sparkwatch.settings import SettingsError, load_settings


def _export(
    verdicts: list[str], counts: list[int], uuids: list[str] | None = None, gated: list[bool] | None = None
) -> dict[str, Any]:
    """Timed windows with these verdicts (``failed``: an HTTP error, left out of the scope), a warm-up
    window that is not measured, and nodes with these sample counts (and one GPU UUID each), each with a
    gated power unless ``gated`` says not."""
    windows = [
        {"id": f"r{i}", "in_scope": v != "failed", "verdict": "ok" if v == "failed" else v, "phase": "timed"}
        for i, v in enumerate(verdicts)
    ]
    windows.append({"id": "w0", "in_scope": False, "verdict": "ok", "phase": "warmup"})
    uuids = uuids or [f"GPU-{i}" for i in range(len(counts))]
    gated = gated or [c > 0 for c in counts]
    nodes = [
        {
            "node": f"spark-{i + 1}",
            "samples": {"count": c},
            "gpus": [{"uuid": u}],
            "power_w": {"gated_mean": None},
        }
        for i, (c, u) in enumerate(zip(counts, uuids, strict=True))
    ]
    for node, has in zip(nodes, gated, strict=True):
        if has:
            node["power_w"] = {"gated_mean": 50.0}
        else:
            node["null_reasons"] = {
                "power_w.gated_mean": "no interval inside the scope with utilisation >= 0.5"
            }
    return {"method": {"phases": ["timed"]}, "windows": windows, "nodes": nodes}


def test_a_sound_run_in_words() -> None:
    quality = judge(_export(["ok", "ok", "ok"], [30, 30, 30, 30]))
    assert quality.sound and quality.line() == "3 of 3 timed windows ok on 4 of 4 nodes"
    assert exit_code(0, quality, strict=True) == 0


def test_a_whole_run_is_judged_by_its_own_span_and_coverage_not_by_windows() -> None:
    """`run --scope run` measures the run itself: it was judged by its timed windows, of which it has none,
    so every such run read "0 of 0 timed windows ok: no timed window was recorded" and `--strict` failed."""
    export = _export([], [30, 30, 30])
    export["method"] |= {"scope": "run", "scope_s": 12.34}
    export["run"] = {"t_start_ns": 10**18, "t_end_ns": 10**18 + 12_340_000_000}
    for node in export["nodes"]:
        node["samples"] |= {"coverage_ratio": 0.99, "implausible_intervals": 0}
        node["clock"] = {
            "steps": [{"t_ns": 10**18 - 5 * 10**9, "size_ns": 10**9}]
        }  # before the run: no matter
    quality = judge(export)
    assert quality.sound and quality.line() == "the whole run (12.3 s) on 3 of 3 nodes"
    assert quality.measured and exit_code(0, quality, strict=True) == 0
    export["nodes"][1]["samples"]["coverage_ratio"] = 0.9426  # the run's tail never arrived, say
    export["nodes"][1]["samples"]["implausible_intervals"] = 2
    export["nodes"][2]["system"] = {
        "headline_domain": "wall",
        "domains": [{"domain": "wall", "samples": {"coverage_ratio": 0.5}}],  # the plug stopped answering
    }
    export["nodes"][2]["clock"]["steps"].append({"t_ns": 10**18 + 10**9, "size_ns": -(10**9)})
    export["windows"].append({"id": "r9", "in_scope": True, "verdict": "low_confidence", "phase": "timed"})
    quality = judge(export)  # a window's verdict is its own: the run's figures are not the window's
    assert quality.line() == (
        "the whole run (12.3 s) on 1 of 3 nodes: spark-2: GPU samples cover 0.942 < 0.95; 2 implausible"
        " interval(s) rejected; spark-3: wall covers 0.500 < 0.95; its wall clock stepped 1 time(s)"
    )
    export["method"]["scope_s"] = 0.0
    assert judge(export).problems[0] == "the run has no length to measure" and not judge(export).measured


def test_every_kind_of_problem_is_named() -> None:
    quality = judge(
        _export(["ok", "low_confidence", "incomplete"], [30, 0, 30]),
        nodes_behind=["spark-3"],
        failed_imports=["a.json (aiperf): not an AIPerf file"],
        failed_checks=[
            "lmx-status cross-check FAILED: the proxy has 3 timed window(s), lmx's status lines 1"
        ],
    )
    assert not quality.sound
    assert quality.line() == (
        "1 of 3 timed windows ok on 1 of 3 nodes: 2 timed window(s) not ok (r1, r2);"
        " never caught up: spark-3; no samples from spark-2 in the measured time;"
        " import failed: a.json (aiperf): not an AIPerf file;"
        " lmx-status cross-check FAILED: the proxy has 3 timed window(s), lmx's status lines 1"
    )  # a check that failed is not an import that failed
    assert exit_code(0, quality, strict=False) == 0
    assert exit_code(0, quality, strict=True) == EXIT_NOT_SOUND == 3
    assert exit_code(7, quality, strict=True) == 7  # the command's own failure wins


def test_a_failed_timed_request_is_not_ok_though_it_is_out_of_the_scope() -> None:
    quality = judge(_export(["ok", "failed", "ok"], [30, 30]))
    assert quality.line() == "2 of 3 timed windows ok on 2 of 2 nodes: 1 timed window(s) not ok (r1)"
    every = judge(_export(["failed", "failed"], [0, 0]))
    assert every.problems == ["2 timed window(s) not ok (r0, r1)"]  # recorded, but none measured
    # and so no node vouched for: "0 of 2 timed windows ok on 2 of 2 nodes" was said of all-n/a figures
    assert every.line() == "0 of 2 timed windows ok: 2 timed window(s) not ok (r0, r1)"
    assert not every.measured and every.to_json()["measured"] is False and quality.to_json()["measured"]
    assert every.to_json()["nodes_ok"] is None and quality.to_json()["nodes_ok"] == 2


def test_one_gpu_reported_by_two_nodes_is_a_problem() -> None:
    quality = judge(_export(["ok"], [30, 30, 30], uuids=["GPU-a", "GPU-b", "GPU-a"]))
    assert quality.problems == ["nodes spark-1 and spark-3 share GPU GPU-a: one agent listed twice?"]
    assert quality.nodes_ok == 2


def test_no_timed_window_is_not_sound_and_not_blamed_on_the_nodes() -> None:
    """The export's one window is a warm-up's: the phases the windows do have are named (a phase mistyped,
    `--phases warmp`, said only that no warmp window was recorded)."""
    quality = judge(_export([], [0, 0]))
    hint = "(its windows are warmup; --scope run measures the whole run)"
    assert quality.problems == [f"no timed window was recorded {hint}"]
    assert quality.line() == f"0 of 0 timed windows ok: no timed window was recorded {hint}"  # vouch for none
    assert quality.nodes_ok == 2  # nor blamed
    assert quality.to_json()["nodes_ok"] is None  # and --json vouches for none: nothing was measured
    demo = judge(_export([], [0, 0]), scope_flag=False)  # an interrupted demo, which has no --scope
    assert demo.problems == ["no timed window was recorded (its windows are warmup)"]
    typo = judge({**_export(["ok"], [3]), "method": {"phases": ["warmp"]}}, scope_flag=False)
    assert typo.problems == ["no warmp window was recorded (its windows are timed and warmup)"]
    none = judge({**_export([], [3]), "windows": []}, scope_flag=False)
    assert none.problems == ["no timed window was recorded"]


def test_many_bad_windows_are_listed_up_to_five() -> None:
    quality = judge(_export(["incomplete"] * 8, [5]))
    assert quality.problems == ["8 timed window(s) not ok (r0, r1, r2, r3, r4 and 3 more)"]


def test_settings_come_from_the_named_file_or_the_xdg_default(tmp_path: pathlib.Path) -> None:
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path)}).strict is False  # no file: defaults
    default = tmp_path / "sparkwatch" / "config.toml"
    default.parent.mkdir()
    default.write_text("strict = true\n")
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path)}).strict is True
    named = tmp_path / "other.toml"
    named.write_text("strict = false\n")
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path), "SPARKWATCH_CONFIG": str(named)}).strict is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("strict = 1\n", "strict must be true or false, got 1"),
        ("strict = tru\n", "not valid TOML"),
        ("strict = " + "1" * 5000 + "\n", "not valid TOML: an integer too long to read"),
        ("[run]\nstrict = true\n", "unknown key(s) run"),
    ],
)
def test_a_bad_config_file_is_one_error_naming_it(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=rf"^{path}: .*") as caught:
        load_settings({"SPARKWATCH_CONFIG": str(path)})
    assert message in str(caught.value)
    with pytest.raises(SettingsError, match="no such file"):
        load_settings({"SPARKWATCH_CONFIG": str(tmp_path / "missing.toml")})
    path.write_bytes(b"\xff\xfestrict = true\n")
    with pytest.raises(
        SettingsError, match=rf"^{path}: not valid TOML: not UTF-8 text \(byte 0xff at offset 0\)$"
    ):
        load_settings({"SPARKWATCH_CONFIG": str(path)})


T0 = 1_800_000_000 * 10**9  # 2027-01-15, epoch ns


def test_a_spilled_window_cut_short_stays_unmeasured_when_imported_back(tmp_path: pathlib.Path) -> None:
    """Before, the spill kept a window's own fields only: a client that left mid-stream came back as a
    measured, ok window."""
    cut = {"kind": "proxy", "client_disconnected": True, "client_left_unfinished": True}
    windows = [
        Window(
            id="proxy-a1-000001",
            phase="timed",
            t_start_ns=T0,
            t_end_ns=T0 + 10**8,
            http_status=200,
            source=cut,
        ),
        Window(
            id="proxy-a1-000002", phase="timed", t_start_ns=T0, t_end_ns=T0 + 10**9, source={"kind": "proxy"}
        ),
    ]
    path = tmp_path / "unsent.json"
    write_spill(path, windows)
    back = {w.id: w for w in read_windows("plain", path)}
    assert back["proxy-a1-000001"].source["client_left_unfinished"] is True and back["proxy-a1-000001"].failed
    assert "the client hung up" in (back["proxy-a1-000001"].failure() or "")
    assert not back["proxy-a1-000002"].failed
    # the proxy's again (a harness file of the same requests is compared with them at its import)
    assert {w.source.get("kind") for w in back.values()} == {"proxy"}
    assert {w.source["format"] for w in back.values()} == {"plain"}
    other = tmp_path / "other.json"
    row = {"id": "r-1", "phase": "timed", "t_start_ns": T0, "t_end_ns": T0 + 10**9}
    other.write_text(json.dumps({"origin": "harness run 3", "windows": [row]}))
    assert "kind" not in next(iter(read_windows("plain", other))).source  # another origin: as any file
    other.write_text(json.dumps({"origin": "proxy", "windows": [row]}))  # a harness file calling itself so
    with pytest.raises(Exception, match="id 'r-1' is no proxy window's") as caught:
        list(read_windows("plain", other))
    assert "\n" not in str(caught.value)
    bad = tmp_path / "bad.csv"
    bad.write_text(f"id,phase,t_start_ns,t_end_ns,failure\nx,timed,{T0},{T0 + 1},tired\n")
    with pytest.raises(Exception, match="failure must be one of upstream_broke_off") as caught:
        list(read_windows("plain", bad))
    assert "\n" not in str(caught.value)


def test_spilled_windows_keep_their_clock_so_an_ended_run_judges_them_as_it_judged_the_proxys(
    tmp_path: pathlib.Path,
) -> None:
    """The spill kept a window's own fields only: imported back, a request the run refused live for starting
    after its end (on the coordinator's clock) had a harness's 2 s slack and was taken into the run."""
    ours = {"kind": "proxy", "clock": "coordinator"}
    windows = [
        Window("proxy-a1-000004", "timed", T0, T0 + 10**9, source={**ours, "clock_uncertainty_ns": 400_000}),
        Window("proxy-a1-000005", "timed", T0, T0 + 10**9, source={**ours, "clock_uncertainty_ns": 900_000}),
    ]
    path = tmp_path / "after-end.json"
    write_spill(path, windows)
    assert json.loads(path.read_text())["clock"] == "coordinator"
    back = list(read_windows("plain", path))
    assert [(w.source["clock"], w.source["clock_uncertainty_ns"]) for w in back] == [
        ("coordinator", 900_000)
    ] * 2
    late = dataclasses.replace(back[0], t_start_ns=T0 + 10**9 + 1_000_000, t_end_ns=T0 + 10**9 + 2_000_000)
    assert outside_span([late], T0 - 10**9, T0 + 10**9) == [late]  # 1 ms after the end: past its 0.9 ms
    mixed = [windows[0], Window("proxy-a1-000006", "timed", T0, T0 + 1, source={"kind": "proxy"})]
    write_spill(path, mixed)  # windows of no one clock: none is said
    assert "clock" not in json.loads(path.read_text())


def test_unsent_windows_go_to_the_temporary_folder_when_the_spill_file_cannot_be_written(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    windows = [
        Window(
            id="proxy-a1-000003", phase="timed", t_start_ns=T0, t_end_ns=T0 + 10**9, source={"kind": "proxy"}
        )
    ]
    kept = spill_safely(tmp_path / "missing-folder" / "unsent.json", windows, "run-x")
    assert kept == tmp_path / "sparkwatch-run-x.unsent-windows.json"
    assert [w.id for w in read_windows("plain", kept)] == [
        "proxy-a1-000003"
    ]  # what `import plain` reads back
    (tmp_path / "sparkwatch-run-x.unsent-windows.json").unlink()
    tmp_path.chmod(0o500)  # neither place can be written: said, not raised
    try:
        assert spill_safely(tmp_path / "unsent.json", windows, "run-x") is None or os.geteuid() == 0
    finally:
        tmp_path.chmod(0o700)


def test_a_node_with_samples_but_no_gated_power_is_a_problem() -> None:
    """The headline figure unknown (idle GPUs: a benchmark sent to the wrong endpoint): before, "2 of 2
    timed windows ok on 2 of 2 nodes" and --strict passed, while `attach` refused the export."""
    quality = judge(_export(["ok", "ok"], [30, 30, 30], gated=[True, False, False]))
    assert quality.line() == (
        "2 of 2 timed windows ok on 1 of 3 nodes: no gated GPU power on spark-2, spark-3"
        " (no interval inside the scope with utilisation >= 0.5)"
    )
    assert exit_code(0, quality, strict=True) == EXIT_NOT_SOUND
    silent = judge(_export(["ok"], [30, 0]))  # no samples at all: said once, as that
    assert silent.problems == ["no samples from spark-2 in the measured time"]


def test_the_line_names_the_measured_phases() -> None:
    """`--phases timed,warmup` counts the warm-up's windows too: they were called "timed windows"."""
    both = {**_export(["ok", "bad"], [30]), "method": {"phases": ["timed", "warmup"]}}
    quality = judge(both)
    assert quality.line().startswith("1 of 3 timed and warmup windows ok on 1 of 1 nodes: ")
    assert quality.problems == ["2 timed and warmup window(s) not ok (r1, w0)"]  # w0: out of the scope
    assert judge(_export(["ok"], [30])).line() == "1 of 1 timed window ok on 1 of 1 nodes"  # the default
