"""The printed table: a system W column only when a node has a whole-node domain (n/a for one without), and
a warning when a measured window ran throttled."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from sparkwatch.commands.outcome import no_export_json, outcome_json
from sparkwatch.commands.quality import Quality
from sparkwatch.commands.summary import summary_table
from sparkwatch.report import facts


def node(name: str, gated_w: float, system_w: float | None) -> dict[str, Any]:
    system = None
    if system_w is not None:
        domains = [
            {"domain": "gpu", "power_w": {"gated_mean": 41.0}},
            {"domain": "dc_input", "power_w": {"gated_mean": system_w}},
        ]
        system = {"headline_domain": "dc_input", "domains": domains}
    return {
        "node": name,
        "power_w": {"gated_mean": gated_w},
        "energy_j": 100.0,
        "memory_used_bytes": {"peak": 2**34},
        "samples": {"coverage_ratio": 1.0},
        "system": system,
    }


def export(nodes: list[dict[str, Any]], throttle: list[str]) -> dict[str, Any]:
    window = {
        "id": "w1",
        "phase": "timed",
        "in_scope": True,
        "verdict": "low_confidence" if throttle else "ok",
        "t_start_ns": 0,
        "t_end_ns": 3 * 10**9,
    }
    window |= {"reasons": [f"spark-1: {t}" for t in throttle], "nodes": [{"throttle": throttle}]}
    totals = {
        "power_w_gated_mean_sum": sum(n["power_w"]["gated_mean"] or 0.0 for n in nodes),
        "energy_j": 200.0,
        "memory_used_bytes_peak_sum": 2**35,
        "memory_used_bytes_peak_of_sum": 2**35,
        "completion_tokens": 100,
        "joules_per_token": 2.0,
        "system_energy_j": None,
        "system_joules_per_token": None,
        "null_reasons": {},
    }
    method = {"scope": "request", "scope_s": 3.0, "gate": {"source": "util", "threshold_ratio": 0.5}}
    return {
        "run": {"id": "run-1", "name": "t", "command": None},
        "method": {**method, "interval_s": 0.1},
        "nodes": nodes,
        "windows": [window],
        "totals": totals,
    }


def test_the_system_column_shows_the_headline_domain_and_n_a_for_a_node_without_one() -> None:
    text = summary_table(export([node("spark-1", 55.7, 86.1), node("spark-2", 53.7, None)], []))
    header = next(line for line in text.splitlines() if line.startswith("node"))
    assert "gated GPU W  system W  GPU energy J" in header  # GPU, beside the whole node
    assert any(line.startswith("spark-1") and " 86.1 " in line for line in text.splitlines())
    assert any(line.startswith("spark-2") and " n/a " in line for line in text.splitlines())
    assert "never added to it" in text and "WARNING" not in text


def test_a_node_whose_whole_node_domain_covers_a_sliver_is_not_summed_as_the_clusters_draw() -> None:
    """A new user's table summed a node at coverage 0.020 into "sum 170.6" system W, a figure that read as
    publishable: the sum is n/a, and the line under the table says whose coverage made it so."""
    cut = node("spark-2", 52.1, 84.1)
    cut["system"]["domains"][1]["samples"] = {"coverage_ratio": 0.02}
    whole = node("spark-1", 55.7, 86.5)
    whole["system"]["domains"][1]["samples"] = {"coverage_ratio": 1.0}
    lines = summary_table(export([whole, cut], [])).splitlines()
    total = next(line for line in lines if line.startswith("sum"))
    assert total.split()[1:3] == ["107.8", "n/a"]  # GPU W from the totals (the core's own rule), system n/a
    assert (
        "  n/a sum system W: the whole-node domain of spark-2 (0.020) covers less than 0.95 of the scope"
        in lines
    )
    whole_again = summary_table(export([whole, node("spark-3", 52.1, 84.1)], [])).splitlines()
    assert next(line for line in whole_again if line.startswith("sum")).split()[2] == "170.6"
    # just short of the threshold (exported floored, 0.9499): not summed, and not said as "0.950 < 0.95"
    cut["system"]["domains"][1]["samples"] = {"coverage_ratio": 0.9499}
    cut["samples"]["coverage_ratio"] = 0.9999  # and the table's coverage column never rounds it up to whole
    lines = summary_table(export([whole, cut], [])).splitlines()
    assert "(0.949) covers less than 0.95 of the scope" in next(line for line in lines if "n/a sum" in line)
    assert next(line for line in lines if line.startswith("spark-2")).split()[-1] == "0.999"


def test_no_system_column_without_a_domain_and_a_warning_for_a_throttled_window() -> None:
    text = summary_table(
        export([node("spark-1", 55.7, None)], ["throttled:hw_power_brake (40% of the window's samples)"])
    )
    assert "system W" not in text
    assert "WARNING: 1 of 1 measured window(s) ran throttled" in text
    assert "window w1 (timed): low_confidence: spark-1: throttled:hw_power_brake" in text


def test_the_columns_stay_aligned_for_long_node_names() -> None:
    long_name = "a-very-long-node-name-in-rack-7"
    table = summary_table(export([node(long_name, 55.8, 86.1), node("n1", 53.8, None)], [])).splitlines()
    header = next(line for line in table if line.startswith("node "))
    rows = [line for line in table if line.startswith((long_name, "n1 ", "sum "))]
    end = header.index("gated GPU W") + len("gated GPU W")  # right-aligned numbers end under their heading
    assert [row[end - 4 : end] for row in rows] == ["55.8", "53.8", "09.6"]


def test_each_n_a_in_a_nodes_row_says_why() -> None:
    """The totals' reason points at the node ("see its null_reasons"): the node's own reason is printed."""
    idle = node("spark-2", 0.0, None) | {"energy_j": None}
    idle["power_w"] = {"gated_mean": None}
    idle["null_reasons"] = {
        "power_w.gated_mean": "no interval inside the scope with utilisation >= 0.5",
        "energy_j": "no valid sample interval inside the scope",
    }
    data = export([node("spark-1", 55.7, None), idle], [])
    text = summary_table(data)
    assert "  n/a spark-2 gated GPU W: no interval inside the scope with utilisation >= 0.5" in text
    assert "  n/a spark-2 GPU energy J: no valid sample interval inside the scope" in text
    assert "n/a spark-1" not in text


def test_a_system_w_n_a_says_why_from_its_headline_domain() -> None:
    """`export --gate-threshold 0.88 --table` showed system W n/a on two nodes and explained only their
    gated W. The headline domain's own reason is printed; a node without a domain says no more than n/a."""
    high = node("spark-2", 50.0, 0.0)
    high["system"]["domains"][1]["power_w"]["gated_mean"] = None
    why = "no interval inside the scope with the node's GPU utilisation >= 0.88"
    high["null_reasons"] = {"system.dc_input.power_w.gated_mean": why, "system.gpu.power_w.gated_mean": "x"}
    text = summary_table(export([node("spark-1", 55.7, 86.1), high, node("spark-3", 50.0, None)], []))
    assert f"  n/a spark-2 system W: {why}" in text.splitlines()
    assert "spark-2 system W: x" not in text and "n/a spark-3" not in text  # not a rail's; no sensor: n/a


def test_a_total_unknown_for_the_reason_of_another_says_that_reason_once() -> None:
    """The export's reasons stand alone (``needs system_energy_j, which is unknown: <its reason>``); the
    table and the report say each root reason once (a new user read one sentence three times)."""
    data = export([node("spark-1", 55.7, None)], [])
    root = "no whole-node power domain on spark-1"
    tokens = "no measured window reports completion tokens"
    data["totals"]["null_reasons"] = {
        "completion_tokens": tokens,
        "system_energy_j": root,
        "joules_per_token": f"the completion token count is unknown ({tokens}); the energy covers all",
        "system_joules_per_token": f"needs system_energy_j, which is unknown: {root}",
    }
    lines = [line for line in summary_table(data).splitlines() if line.startswith("  n/a ")]
    assert lines == [
        f"  n/a completion_tokens: {tokens}",
        f"  n/a system_energy_j: {root}",
        "  n/a joules_per_token: the completion token count is unknown (above); the energy covers all",
        "  n/a system_joules_per_token: needs system_energy_j, which is unknown (above)",
    ]
    assert [f"  n/a {r}" for r in facts.null_reasons(data)] == lines  # the report's list, the same


def test_the_wrapped_command_is_printed_as_a_shell_would_take_it_back() -> None:
    """`sh -c 'sleep 1; exit 5'` printed as ``sh -c sleep 1; exit 5`` read as two commands."""
    data = export([node("spark-1", 55.7, None)], [])
    data["run"]["command"] = {"argv": ["sh", "-c", "sleep 1; exit 5", "\x1b[2J"], "exit_code": 5}
    line = next(line for line in summary_table(data).splitlines() if line.startswith("command"))
    assert line == "command FAILED with exit code 5: sh -c 'sleep 1; exit 5' '\\x1b[2J'"


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (0, "succeeded"),
        (1, "FAILED with exit code 1"),
        (128, "FAILED with exit code 128"),
        (130, "ended by SIGINT (exit code 130)"),  # Ctrl-C: an interruption, not the command failing
        (143, "ended by SIGTERM (exit code 143)"),
        (137, "FAILED with exit code 137 (killed by SIGKILL)"),  # the OOM killer's: a failure
        (139, "FAILED with exit code 139 (killed by SIGSEGV)"),
        (250, "FAILED with exit code 250"),  # 128 + 122: no such signal
    ],
)
def test_a_command_ended_by_a_signal_is_not_said_to_have_failed(code: int, said: str) -> None:
    data = export([node("spark-1", 55.7, None)], [])
    data["run"]["command"] = {"argv": ["sleep", "30"], "exit_code": code}
    line = next(line for line in summary_table(data).splitlines() if line.startswith("command"))
    assert line == f"command {said}: sleep 30"


def test_a_failed_import_names_its_file_once(tmp_path: Any) -> None:
    """`import failed: nofile.json (plain): nofile.json: no such file` said the file twice."""
    from sparkwatch.commands.run_lmx import import_failure
    from sparkwatch.importers import ImportFormatError, read_windows

    missing = tmp_path / "nofile.json"
    try:
        list(read_windows("plain", missing))
    except ImportFormatError as exc:
        shown, why = import_failure(missing, exc, None)
    assert (shown, why) == (str(missing), "no such file")
    capture = tmp_path / "lmx-status.jsonl"  # CMD's stderr, of which the capture keeps status lines only
    capture.write_text("")
    try:
        list(read_windows("lmx-status", capture))
    except ImportFormatError as exc:  # "it is empty" was said of a stderr of 100 kB without a status line
        said = import_failure(capture, exc, capture)
    assert said == ("the command's stderr", "it held no lmx status line (lmx writes them with --json-status)")


def test_the_json_outcome_carries_each_nodes_peak_page_cache_and_null_where_unread() -> None:
    measured = {**node("spark-1", 55.7, None), "memory_page_cache_bytes": {"peak": 3 * 2**30}}
    unread = {**node("spark-2", 50.0, None), "memory_page_cache_bytes": {"peak": None}}
    data = export([measured, unread, node("spark-3", 50.0, None)], [])  # spark-3: an older export's node
    data["run"]["command"] = {"argv": ["true"], "exit_code": 0}
    out = outcome_json(data, Quality(1, 1, 3, 3), pathlib.Path("run.json"), 0, False)
    assert [n["memory_page_cache_bytes_peak"] for n in out["nodes"]] == [3 * 2**30, None, None]
    assert [n["memory_used_bytes_peak"] for n in out["nodes"]] == [2**34] * 3


def timed(wid: str, length_s: float, verdict: str) -> dict[str, Any]:
    reasons = [] if verdict == "ok" else ["shorter (0.062 s) than 2 sampling intervals (0.1 s each)"]
    window = {"id": wid, "phase": "timed", "in_scope": True, "verdict": verdict, "reasons": reasons}
    return window | {"t_start_ns": 0, "t_end_ns": int(length_s * 1e9), "nodes": [{"throttle": []}]}


def test_figures_resting_mostly_on_windows_not_ok_are_marked_and_said_so() -> None:
    """A demo of 4-token requests (each window shorter than two samples) printed 26.6 gated W against
    56 W of truth with nothing in the table to say so; the figures are now marked where the windows not
    ok hold most of the measured time, and not where they are a sliver of it."""
    data = export([node("spark-1", 26.6, 59.4), node("spark-2", 26.3, None)], [])
    data["windows"] = [timed("a", 0.063, "low_confidence"), timed("b", 0.062, "low_confidence")]
    lines = summary_table(data).splitlines()
    row = next(line for line in lines if line.startswith("spark-1"))
    assert row.split()[1:4] == ["26.6*", "59.4*", "100.0*"]
    assert next(line for line in lines if line.startswith("spark-2")).split()[1:4] == [
        "26.3*",
        "n/a",
        "100.0*",
    ]
    assert next(line for line in lines if line.startswith("sum")).split()[1] == "52.9*"
    assert "GPU J/token 2.000*," in "\n".join(lines)
    assert (
        "* low confidence: 2 of 2 measured window(s), 100% of their time, are not ok (below), and these"
        " figures are mostly theirs: do not quote them as measured"
    ) in lines
    header, row = next(line for line in lines if line.startswith("node ")), lines[lines.index(row)]
    assert len(row) <= len(header)  # the marks keep the columns
    data["windows"] = [timed("long", 30.0, "ok"), timed("short", 0.063, "low_confidence")]
    text = summary_table(data)
    assert "*" not in text.replace("window short", "") and "low confidence:" not in text
    assert "window short (timed): low_confidence: shorter (0.062 s)" in text  # still listed below


def test_the_mark_follows_the_scope_and_needs_more_than_half() -> None:
    """In the ``run`` scope the figures are the whole run's, not the windows': no mark. In ``decode`` what
    is measured of a window is first to last token. Exactly half of the time not ok is not "mostly"."""
    data = export([node("spark-1", 26.6, None)], [])
    data["windows"] = [timed("a", 1.0, "low_confidence"), timed("b", 1.0, "ok")]
    assert "*" not in summary_table(data)  # half
    data["windows"][1]["t_end_ns"] = int(0.9e9)
    assert "26.6*" in summary_table(data)  # more than half
    data["method"]["scope"] = "run"
    assert "*" not in summary_table(data)
    data["method"]["scope"] = "decode"
    for window, tokens_s in zip(data["windows"], (0.1, 0.8), strict=True):
        window |= {"t_first_token_ns": 0, "t_last_token_ns": int(tokens_s * 1e9)}
    assert "*" not in summary_table(data)  # 0.1 s of 0.9 s decoding not ok


def test_the_json_outcome_says_whether_the_figures_are_marked_and_the_share_they_rest_on() -> None:
    """A script read the 27 W the table marked as a figure like any other: ``figures_doubtful`` says what the
    mark says, ``doubtful_share_ratio`` the share of the measured time in windows not ok (null in the
    ``run`` scope, whose figures are the whole run's, and where no window was measured)."""
    data = export([node("spark-1", 26.6, 59.4)], [])

    def outcome() -> dict[str, Any]:
        return outcome_json(data, Quality(0, 2, 0, 1), pathlib.Path("run.json"), 0, False)

    data["windows"] = [timed("a", 0.063, "low_confidence"), timed("b", 0.062, "low_confidence")]
    assert (outcome()["figures_doubtful"], outcome()["doubtful_share_ratio"]) == (True, 1.0)
    assert "26.6*" in summary_table(data)
    data["windows"] = [timed("long", 3.0, "ok"), timed("short", 1.0, "low_confidence")]
    assert (outcome()["figures_doubtful"], outcome()["doubtful_share_ratio"]) == (False, 0.25)
    assert "*" not in summary_table(data)
    data["windows"] = [timed("a", 1.0, "ok"), timed("b", 1.0, "low_confidence")]
    assert (outcome()["figures_doubtful"], outcome()["doubtful_share_ratio"]) == (False, 0.5)  # not "mostly"
    data["windows"][0]["verdict"] = "incomplete"
    data["method"]["scope"] = "run"
    assert (outcome()["figures_doubtful"], outcome()["doubtful_share_ratio"]) == (False, None)
    data["windows"][0]["verdict"] = "ok"
    data["method"]["scope"] = "decode"  # what is measured of a window: first to last token
    for window, tokens_s in zip(data["windows"], (0.1, 0.9), strict=True):
        window |= {"t_first_token_ns": 0, "t_last_token_ns": int(tokens_s * 1e9)}
    said = json.loads(json.dumps(outcome()))
    assert said["figures_doubtful"] is True and said["doubtful_share_ratio"] == pytest.approx(0.9)
    data["windows"] = [{**timed("out", 1.0, "incomplete"), "in_scope": False}]  # none measured: no share
    assert (outcome()["figures_doubtful"], outcome()["doubtful_share_ratio"]) == (False, None)


def test_the_json_outcome_without_an_export_has_the_same_keys_with_nothing_judged() -> None:
    data = export([node("spark-1", 55.7, None)], [])
    full = outcome_json(data, Quality(1, 1, 1, 1), pathlib.Path("run.json"), 0, False)
    bare = no_export_json("run-1", 4, 0, False)
    assert list(bare) == list(full)
    assert (bare["figures_doubtful"], bare["doubtful_share_ratio"]) == (None, None)
    assert (full["figures_doubtful"], full["doubtful_share_ratio"]) == (False, 0.0)
