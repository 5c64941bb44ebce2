"""Harness result files → request windows: exact windows from realistic fixtures, and one-line refusals.

Fixture provenance: tests/fixtures/harness/README.md. Times in the fixtures are chosen so the expected
nanoseconds can be checked by hand (dyadic fractions of a second are exact in a float).
"""

from __future__ import annotations

import copy
import json
import math
import os
import threading
import tracemalloc
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from sparkwatch.coordinator.api.bodies import window_batch
from sparkwatch.core.windows import SPAN_SLACK_NS, Window, scope_for
from sparkwatch.importers import (
    FORMATS,
    ClockAnchor,
    ImportFormatError,
    common,
    genai_perf,
    guidellm,
    lmx_status,
    load_windows,
    read_windows,
    vllm,
)
from sparkwatch.importers.common import Problem, parse_json

HARNESS = Path(__file__).parents[1] / "fixtures" / "harness"
MS = 1_000_000
S = 1_000_000_000
ANCHOR = ClockAnchor(wall_ns=1_759_522_400 * S, mono_ns=8_100 * S, uncertainty_ns=2_000)

GOOD = [
    ("guidellm", "guidellm/benchmarks.json"),
    ("guidellm", "guidellm/benchmarks_v0.2.json"),
    ("genai-perf", "genai-perf/profile_export.json"),
    ("aiperf", "aiperf/profile_export.jsonl"),
    ("aiperf", "aiperf/profile_export_v0.1.jsonl"),
    ("aiperf", "aiperf/profile_export_0.13_one_token.jsonl"),
    ("vllm", "vllm/bench_serve_detailed.json"),
    ("lmx-status", "lmx-status/status.jsonl"),
    ("plain", "plain/windows.csv"),
    ("plain", "plain/windows.json"),
    ("export", "export/demo-run.json"),
]

Row = tuple[Any, ...]


def row(w: Window) -> Row:
    """Everything but the source, in a form a failing assert prints readably."""
    return (
        w.id,
        w.phase,
        w.t_start_ns,
        w.t_end_ns,
        w.t_first_byte_ns,
        w.t_first_token_ns,
        w.t_last_token_ns,
        w.prompt_tokens,
        w.completion_tokens,
        w.cached_tokens,
        w.reasoning_tokens,
        w.http_status,
        w.finish_reason,
    )


def load(fmt: str, rel: str, anchor: ClockAnchor | None = None) -> list[Window]:
    return load_windows(fmt, HARNESS / rel, clock_anchor=anchor)


def refused(fmt: str, path: Path, anchor: ClockAnchor | None = None) -> str:
    """The one line an import of ``path`` fails with; it must name the file as it was given (its name alone
    was ``win.json`` for runs/a/win.json and runs/b/win.json alike, ``tmp`` for /tmp)."""
    with pytest.raises(ImportFormatError) as info:
        load_windows(fmt, path, clock_anchor=anchor)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert "\n" not in message
    assert info.value.file == str(path)
    return message


def rewrite(tmp_path: Path, rel: str, change: Callable[[Any], Any], name: str | None = None) -> Path:
    """A copy of a JSON fixture with one thing changed."""
    data = copy.deepcopy(json.loads((HARNESS / rel).read_text()))
    changed = change(data)
    out = tmp_path / (name or Path(rel).name)
    out.write_text(json.dumps(data if changed is None else changed))
    return out


def rewrite_lines(tmp_path: Path, rel: str, change: Callable[[list[Any]], None]) -> Path:
    """A copy of a JSON-lines fixture with its records changed in place."""
    records = [json.loads(line) for line in (HARNESS / rel).read_text().splitlines() if line.strip()]
    change(records)
    out = tmp_path / Path(rel).name
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


# ---- registry and anchor ----


def test_registry_lists_every_format_and_only_vllm_needs_an_anchor() -> None:
    assert set(FORMATS) == {"guidellm", "genai-perf", "aiperf", "vllm", "lmx-status", "plain", "export"}
    assert [name for name, imp in FORMATS.items() if imp.needs_clock_anchor] == ["vllm"]
    with pytest.raises(TypeError):
        FORMATS["extra"] = FORMATS["plain"]  # type: ignore[index]


def test_a_clock_anchor_read_here_is_the_tightest_of_five_reads() -> None:
    mono = iter([100, 110, 200, 205, 300, 330, 400, 402, 500, 520]).__next__  # around each wall read
    wall = iter(range(10**18, 10**18 + 5)).__next__
    assert ClockAnchor.read_now(wall, mono) == ClockAnchor(10**18 + 3, 401, 1)  # 400..402: the fourth


def test_clock_anchor_parses_two_or_three_integers() -> None:
    assert ClockAnchor.parse("1759522400000000000:8100000000000") == ClockAnchor(
        1759522400000000000, 8100000000000, 0
    )
    assert ClockAnchor.parse(" 1759522400000000000:8100000000000:2000\n") == ANCHOR


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1759522400000000000", "expected WALL_NS:MONO_NS"),
        ("1759522400000000000:-5", "expected WALL_NS:MONO_NS"),
        ("1759522400.5:8100", "expected WALL_NS:MONO_NS"),
        ("1:2:3:4", "expected WALL_NS:MONO_NS"),
        ("1759522400:8100000000000", "not Unix epoch nanoseconds"),  # seconds, not ns
        # int()'s digit limit said "use sys.set_int_max_str_digits()", and the text was quoted in full
        ("9" * 5000 + ":1", "clock anchor '99999999999999999999999…': value out of the 64-bit range"),
    ],
)
def test_clock_anchor_refuses_bad_text_in_one_line(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as info:
        ClockAnchor.parse(text)
    assert "\n" not in str(info.value)


# ---- guidellm ----


def test_guidellm_report_gives_exact_windows_with_warmup_and_cooldown() -> None:
    windows = load("guidellm", "guidellm/benchmarks.json")
    t = 1_759_522_400 * S
    assert [row(w) for w in windows] == [
        ("guidellm-0-5b0e6a5e-7f3c-4b8e-9a41-0c2d8e4f1a01", "warmup", t, t + 1500 * MS, t + 125 * MS,
         t + 250 * MS, t + 1375 * MS, 128, 64, None, None, None, None),
        ("guidellm-0-9d2a41c7-3e55-4f0a-8b6e-2a7c9e0d5b02", "timed", t + 1250 * MS, t + 2562_500_000,
         t + 1312_500_000, t + 1375 * MS, t + 2500 * MS, 128, 96, None, None, None, None),
        ("guidellm-0-c4e7b0a2-61d9-4c3b-a5f8-7e1b2d9c0f03", "timed", t + 2625 * MS, t + 3875 * MS,
         t + 2687_500_000, t + 2750 * MS, t + 3750 * MS, 130, 80, None, None, None, None),
        ("guidellm-0-e1f3a9d4-0b6c-47e2-9d15-8c4a7b3e2f04", "cooldown", t + 3500 * MS, t + 5500 * MS,
         t + 3562_500_000, t + 3625 * MS, t + 5250 * MS, 128, 128, None, None, None, None),
        ("guidellm-0-7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c05", "timed", t + 1500 * MS, t + 1625 * MS,
         None, None, None, 128, None, None, None, None, None),
    ]  # fmt: skip
    assert windows[1].source == {
        "format": "guidellm",
        "file": "benchmarks.json",
        "clock_domain": "unix_s",
        "mapping": guidellm.MAPPING,
        "resolution_s": math.ulp(1759522401.25),
        "guidellm_schema": ">=0.4",
        "measure_start_ns": t + 1 * S,
        "measure_end_ns": t + 4 * S,
        "benchmark_index": 0,
        "status": "successful",
        "request_id": "9d2a41c7-3e55-4f0a-8b6e-2a7c9e0d5b02",
    }
    assert windows[4].source["status"] == "errored"
    assert str(windows[4].source["error"]).startswith("HTTPStatusError: Server error '500")
    assert [w.failed for w in windows] == [False, False, False, False, True]  # kept, not measured


def test_windows_outside_the_time_a_run_was_open_are_refused() -> None:
    """`run --import`'s rule (the harness ran while the run was open): a window before the run opened or
    after now, beyond SPAN_SLACK_NS, fails the file; within it, the file is read."""
    path = HARNESS / "plain/windows.csv"  # windows 1759522500 .. 1759522507 s
    first, last = 1_759_522_500 * S, 1_759_522_507 * S

    def read(since_ns: int, now_ns: int) -> list[Window]:
        return list(read_windows("plain", path, since_ns=since_ns, now_ns=lambda: now_ns))

    assert len(read(first - SPAN_SLACK_NS, last + SPAN_SLACK_NS)) == 3
    with pytest.raises(ImportFormatError, match=r"window 'w-0' \(.*\) lies outside this run \(open from"):
        read(first + SPAN_SLACK_NS + 1, last)  # an earlier run's file
    with pytest.raises(ImportFormatError, match="or a harness clock that is off"):
        read(first, last - SPAN_SLACK_NS - 1)  # stamped ahead of now


def test_a_malformed_row_is_said_before_a_window_outside_the_run(tmp_path: Path) -> None:
    """A file whose first window lies outside the run and whose third row is malformed: the user was told
    "outside this run", fixed the clock or the file, and only then met the format error. The file is read
    through first; what is wrong with it comes first, the run's span after."""
    rows = (HARNESS / "plain/windows.csv").read_text().splitlines()
    path = tmp_path / "windows.csv"
    path.write_text("\n".join([*rows[:3], "w-9,timed,not-a-number,1759522507000000000", *rows[3:]]) + "\n")
    first = 1_759_522_500 * S
    with pytest.raises(ImportFormatError) as info:
        list(read_windows("plain", path, since_ns=first + SPAN_SLACK_NS + 1, now_ns=lambda: first + 10 * S))
    assert "row 4" in str(info.value) and "outside this run" not in str(info.value), info.value


def test_a_real_guidellm_081_report_gives_every_request_with_its_tokens() -> None:
    """What guidellm 0.8.1 itself wrote (fixture README): every request of the 12 it made, timed, its stamps
    in order and its usage, cached tokens included."""
    windows = load("guidellm", "guidellm/benchmarks_v0.8.1.json")
    assert len(windows) == 12 and {w.phase for w in windows} == {"timed"}
    assert {(w.prompt_tokens, w.completion_tokens, w.cached_tokens) for w in windows} == {(9, 50, 3)}
    for w in windows:
        stamps = [w.t_start_ns, w.t_first_byte_ns, w.t_first_token_ns, w.t_last_token_ns, w.t_end_ns]
        assert None not in stamps and stamps == sorted(stamps), w.id
        assert not w.failed and w.source["guidellm_schema"] == ">=0.4"
    assert scope_for(windows, "request", (0, 0)).seconds == pytest.approx(1.688, abs=0.001)


@pytest.mark.parametrize(
    ("rel", "key"),
    [
        ("guidellm/benchmarks.json", "sample_requests"),
        ("guidellm/benchmarks_v0.8.1.json", "sample_size"),
        ("guidellm/benchmarks_v0.2.json", "request_samples"),
    ],
)
def test_a_guidellm_report_that_kept_a_sample_of_its_requests_is_refused(
    tmp_path: Path, rel: str, key: str
) -> None:
    """guidellm's --sample-requests (20 by default in some versions) keeps that many requests per status:
    the windows of a sample are not the load, and their J/token came out 2.6x the whole run's in a trial.
    0.2-0.3 records the sample in ``request_samples`` (null: none), later versions the limit in their
    config."""

    def sampled(data: dict[str, Any]) -> None:
        bench = data["benchmarks"][0]
        del bench["requests"]["successful"][1:]  # 1 kept of those made
        if key == "request_samples":
            bench["request_samples"] = {"successful": 1, "incomplete": 0, "errored": 1, "total": None}
        else:
            bench["config"][key] = 1
        made = (bench.get("scheduler_metrics") or {}).get("requests_made") or bench["request_totals"]
        assert made["successful"] > 1

    message = refused("guidellm", rewrite(tmp_path, rel, sampled), ANCHOR)
    assert "holds 1 of the " in message and "successful requests guidellm made: a random sample" in message
    assert "--sample-requests" in message


def test_a_guidellm_request_cancelled_at_the_end_is_the_benchmarks_tail_not_an_error(tmp_path: Path) -> None:
    """guidellm's `incomplete`: cancelled when its limit was reached. Not measured (a partial request), and
    not a timed window that failed either (`run --strict` would fail every --max-seconds run)."""

    def cancelled(data: dict[str, Any]) -> None:
        requests = data["benchmarks"][0]["requests"]
        requests["incomplete"], requests["errored"] = requests["errored"], []
        data["benchmarks"][0]["scheduler_metrics"]["requests_made"].update(errored=0, incomplete=1)

    windows = load_windows("guidellm", rewrite(tmp_path, "guidellm/benchmarks.json", cancelled))
    (tail,) = [w for w in windows if w.source["status"] == "incomplete"]
    assert tail.phase == "cooldown" and tail.failed
    assert [w.phase for w in windows if w is not tail] == ["warmup", "timed", "timed", "cooldown"]


def test_a_guidellm_report_that_kept_fewer_than_its_limit_kept_every_request(tmp_path: Path) -> None:
    """Fewer requests listed than made but fewer than the sampling limit too: nothing was sampled away (a
    cancelled request that never started is counted as made, not listed), so the report is read."""

    def fewer(data: dict[str, Any]) -> None:
        data["benchmarks"][0]["scheduler_metrics"]["requests_made"]["errored"] = 3  # 1 listed, limit 20

    assert len(load_windows("guidellm", rewrite(tmp_path, "guidellm/benchmarks.json", fewer))) == 5


def test_guidellm_warmup_and_cooldown_stay_out_of_the_measured_scope() -> None:
    windows = load("guidellm", "guidellm/benchmarks.json")
    t = 1_759_522_400 * S
    # the three timed requests; the errored one lies inside the first and merges into it
    assert scope_for(windows, "request", (0, 0)).to_json() == [
        [t + 1250 * MS, t + 2562_500_000],
        [t + 2625 * MS, t + 3875 * MS],
    ]
    assert scope_for(windows, "request", (0, 0), phases=frozenset({"warmup"})).to_json() == [
        [t, t + 1500 * MS]
    ]


def test_guidellm_02_report_is_all_timed_and_keeps_the_float_exactly() -> None:
    windows = load("guidellm", "guidellm/benchmarks_v0.2.json")
    first_start = round(Fraction(1745526100.365982) * S)  # the float's own value, not the decimal's
    assert abs(first_start - 1_745_526_100_365_982_000) <= math.ulp(1745526100.365982) / 2 * S
    assert [row(w) for w in windows] == [
        ("guidellm-0-a1b2c3d4-0000-4000-8000-000000000001", "timed", first_start, 1_745_526_101_312_500_000,
         None, 1_745_526_100_500_000_000, 1_745_526_101_250_000_000, 256, 32, None, None, None, None),
        ("guidellm-0-a1b2c3d4-0000-4000-8000-000000000002", "timed", 1_745_526_102_500_000_000,
         1_745_526_103_750_000_000, None, 1_745_526_102_625_000_000, 1_745_526_103_500_000_000, 256, 32,
         None, None, None, None),
        ("guidellm-0-a1b2c3d4-0000-4000-8000-000000000003", "timed", 1_745_526_101_500_000_000,
         1_745_526_101_625_000_000, None, None, None, 256, 0, None, None, None, None),
    ]  # fmt: skip
    assert windows[0].source["guidellm_schema"] == "0.2-0.3"
    assert windows[2].source["status"] == "errored"
    assert windows[2].source["error"] == "ReadTimeout"
    assert [w.failed for w in windows] == [False, False, True]


def test_guidellm_02_unset_token_stamps_are_unknown_not_before_the_request(tmp_path: Path) -> None:
    """guidellm 0.3.1 writes a successful request's token stamps as ``first_iter_time or -1.0``: -1.0 when
    no chunk held text (an empty answer, a reasoning model's answer). The whole file was refused."""
    report = json.loads((HARNESS / "guidellm" / "benchmarks_v0.2.json").read_text())
    request = report["benchmarks"][0]["requests"]["successful"][1]
    request["first_token_time"] = request["last_token_time"] = -1.0
    (tmp_path / "b.json").write_text(json.dumps(report))
    windows = load_windows("guidellm", tmp_path / "b.json")
    assert (windows[1].t_first_token_ns, windows[1].t_last_token_ns) == (None, None)
    assert windows[1].t_end_ns == 1_745_526_103_750_000_000 and not windows[1].failed
    assert windows[1].source["unset_token_stamps"] == ["first_token_time -1", "last_token_time -1"]
    assert "unset_token_stamps" not in windows[0].source


def test_a_real_aiperf_013_run_counts_the_servers_tokens_and_keeps_its_errors() -> None:
    """The AIPerf 0.13.0 CLI's own records (fixture README): the server's usage counts are the window's
    (AIPerf's tokenizer counted 20 and 12 for the server's 7 and 6), and its HTTP 500s are kept, failed, with
    the end AIPerf could not know said to be unknown."""
    windows = load("aiperf", "aiperf/profile_export_0.13_run.jsonl")
    assert [w.phase for w in windows] == ["warmup"] * 3 + ["timed"] * 12
    failed = [w for w in windows if w.failed]
    assert [windows.index(w) for w in failed] == [3, 7, 11]
    assert {
        (w.http_status, w.prompt_tokens, w.completion_tokens, w.t_end_ns - w.t_start_ns) for w in failed
    } == {(500, 20, None, 0)}
    assert all(w.source["end"].startswith("unknown") for w in failed)
    answered = [w for w in windows if not w.failed]
    assert {(w.prompt_tokens, w.completion_tokens) for w in answered} == {(7, 6)}
    assert {tuple(sorted(w.source["aiperf_counts"].items())) for w in answered} == {
        (("input_sequence_length", 20), ("output_sequence_length", 12))
    }
    first = json.loads((HARNESS / "aiperf/profile_export_0.13_run.jsonl").read_text().splitlines()[0])
    meta = first["metadata"]
    assert (windows[0].t_start_ns, windows[0].t_first_byte_ns, windows[0].t_end_ns) == (
        meta["request_start_ns"],
        meta["request_ack_ns"],
        meta["request_end_ns"],
    )
    ttft_ns = round(first["metrics"]["time_to_first_token"]["value"] * 1e6)
    assert abs(windows[0].t_first_token_ns - (meta["request_start_ns"] + ttft_ns)) <= 1  # type: ignore[operator]
    assert "end" not in windows[0].source


def test_aiperf_reasoning_tokens_are_the_servers_too(tmp_path: Path) -> None:
    """Completion tokens from the server's usage and reasoning tokens from AIPerf's tokenizer could say a
    request reasoned more than it answered: both are the server's where it counted them."""
    first = json.loads((HARNESS / "aiperf/profile_export_0.13_run.jsonl").read_text().splitlines()[0])
    first["metrics"]["usage_reasoning_tokens"] = {"value": 4, "unit": "tokens"}
    first["metrics"]["reasoning_token_count"] = {"value": 9, "unit": "tokens"}
    (tmp_path / "r.jsonl").write_text(json.dumps(first) + "\n")
    (window,) = load_windows("aiperf", tmp_path / "r.jsonl")
    assert (window.completion_tokens, window.reasoning_tokens) == (6, 4)
    assert window.source["aiperf_counts"]["reasoning_token_count"] == 9


# ---- genai-perf ----


@pytest.mark.parametrize(("name", "requests", "tokens"), [("run", 10, (None, None)), ("usage", 4, (7, 6))])
def test_real_genai_perf_runs_give_their_stamps_and_usage_when_asked(
    name: str, requests: int, tokens: tuple[int | None, int | None]
) -> None:
    """genai-perf 0.0.16's own files (fixture README): start = the send, first byte = the role chunk, first
    token = the first content chunk after it, end = [DONE]; token counts only from a usage chunk, which
    genai-perf asks for only with --extra-inputs stream_options."""
    rel = f"genai-perf/profile_export_0.0.16_{name}.json"
    windows = load("genai-perf", rel)
    raw = json.loads((HARNESS / rel).read_text())["experiments"][0]["requests"]
    assert len(windows) == len(raw) == requests and {w.phase for w in windows} == {"timed"}
    for w, r in zip(windows, raw, strict=True):
        stamps = r["response_timestamps"]
        assert (w.t_start_ns, w.t_first_byte_ns, w.t_first_token_ns, w.t_end_ns) == (
            r["timestamp"],
            stamps[0],
            stamps[1],
            stamps[-1],
        )
        assert (w.prompt_tokens, w.completion_tokens) == tokens


def test_genai_perf_export_gives_exact_windows_and_keeps_unanswered_requests_as_failed() -> None:
    windows = load("genai-perf", "genai-perf/profile_export.json")
    t = 1_759_522_410 * S
    t1, t2, t3 = t + 5 * MS, t + 600 * MS, t + 2000 * MS
    assert [row(w) for w in windows] == [
        # role-only chunk = first byte; "Hello" = first token; " world" = last token; [DONE] = end
        ("genai-perf-0-0", "timed", t, t + 212 * MS, t + 120 * MS, t + 150 * MS, t + 180 * MS,
         17, 2, 16, None, None, "stop"),
        # reasoning text counts as a token; two SSE events arrived as one response
        ("genai-perf-0-1", "timed", t1, t1 + 421 * MS, t1 + 130 * MS, t1 + 400 * MS, t1 + 420 * MS,
         21, 3, None, 2, None, "length"),
        # experiments[0].requests[2] never got a response: a failed request, of no length (it was dropped)
        ("genai-perf-0-2", "timed", t2, t2, None, None, None, None, None, None, None, None, None),
        ("genai-perf-1-0", "timed", t3, t3 + 96 * MS, t3 + 90 * MS, t3 + 90 * MS, t3 + 90 * MS,
         None, None, None, None, None, "stop"),
    ]  # fmt: skip
    assert windows[0].source == {
        "format": "genai-perf",
        "file": "profile_export.json",
        "clock_domain": "unix_ns",
        "mapping": genai_perf.MAPPING,
        "resolution_s": 1e-9,
        "service_kind": "openai",
        "responses": 6,
        "experiment_index": 0,
        "request_index": 0,
        "experiment_mode": "concurrency",
        "experiment_value": 2,
        "first_token": "first response with content or reasoning text",
    }
    failed = windows[2]
    assert failed.source["harness_failed"] is True and failed.source["responses"] == 0
    assert failed.source["end"] == genai_perf.NO_RESPONSE_END and failed.failed
    assert windows[3].source["experiment_mode"] == "request_rate"


@pytest.mark.parametrize("reason", ["abort", "error"])
def test_a_genai_perf_request_the_server_gave_up_is_failed(tmp_path: Path, reason: str) -> None:
    """vLLM's and SGLang's finish reason for a request they gave up: it was measured as a completed one."""

    def give_up(data: dict[str, Any]) -> None:
        outputs = data["experiments"][0]["requests"][0]["response_outputs"]
        (last,) = [o for o in outputs if '"finish_reason":"stop"' in o["response"]]
        last["response"] = last["response"].replace('"finish_reason":"stop"', f'"finish_reason":"{reason}"')

    windows = load_windows("genai-perf", rewrite(tmp_path, "genai-perf/profile_export.json", give_up))
    assert windows[0].finish_reason == reason and windows[0].source["upstream_aborted"] is True
    assert "gave the request up" in str(windows[0].failure())
    assert [w.failed for w in windows] == [True, False, True, False]  # the others as before


def test_genai_perf_without_readable_bodies_takes_the_first_response_as_first_token(tmp_path: Path) -> None:
    def drop_kind(data: dict[str, Any]) -> None:
        del data["service_kind"]

    windows = load_windows("genai-perf", rewrite(tmp_path, "genai-perf/profile_export.json", drop_kind))
    t = 1_759_522_410 * S
    assert row(windows[0])[2:7] == (t, t + 212 * MS, t + 120 * MS, t + 120 * MS, t + 212 * MS)
    assert windows[0].prompt_tokens is None  # usage is read only from bodies known to be OpenAI
    assert "not determinable" in str(windows[0].source["first_token"])


# ---- AIPerf ----


def test_aiperf_records_give_exact_windows_with_phases_and_errors() -> None:
    windows = load("aiperf", "aiperf/profile_export.jsonl")
    a = 1_759_813_200 * S
    b = a + 1000 * MS
    assert [row(w) for w in windows] == [
        ("aiperf-0d7c6e1a-55b2-4b8e-a1f0-3c9d2e7b6a01", "warmup", a, a + 900 * MS, a + 100 * MS,
         a + 250 * MS, a + 400 * MS, 550, 4, None, None, None, None),
        # TTFT 255.886568 ms and inter-chunk gaps 4.898437 + 5.316006 ms, back to integer ns
        ("aiperf-7609a2e7-aa53-4ab1-98f4-f35ecafefd25", "timed", b, a + 1500 * MS, a + 1080 * MS,
         b + 255_886_568, b + 255_886_568 + 4_898_437 + 5_316_006, 550, 12, None, 3, None, None),
        ("aiperf-c35e4b1b-6775-4750-b875-94cd68e5ec15", "timed", a + 1200 * MS, a + 1200 * MS + 624_928,
         None, None, None, 550, None, None, None, 499, None),
    ]  # fmt: skip
    source = windows[1].source
    assert source["clock_domain"] == "unix_ns" and source["resolution_s"] == 1e-9
    assert source["request_id"] == source["x_request_id"] == "7609a2e7-aa53-4ab1-98f4-f35ecafefd25"
    assert source["aiperf_phase"] == "profiling" and source["session_num"] == 45
    assert windows[2].source["error_type"] == "RequestCancellationError"
    assert windows[2].source["was_cancelled"] is True


def test_older_aiperf_records_are_read_and_their_endless_error_records_skipped() -> None:
    windows = load("aiperf", "aiperf/profile_export_v0.1.jsonl")
    start = 1_759_522_419_159_192_408
    first = start + 1_680_543_782
    assert [row(w) for w in windows] == [
        ("aiperf-1ed40a0d-e708-434d-bb8e-fb1b44cb8717", "timed", start, 1_759_522_427_096_160_677, None,
         first, first + 134_440_792 + 141_307_763 + 22_443_198, 550, 193, None, 132, None, None),
    ]  # fmt: skip
    assert windows[0].source["aiperf_schema"] == "timestamp_ns"


def test_an_aiperf_error_without_an_http_code_is_kept_but_not_measured(tmp_path: Path) -> None:
    """AIPerf 0.13 writes a transport error (the server disconnected) with ``code: null`` and a normal end
    stamp: before, a measured ``ok`` window with no completion tokens, which left the run without J/token."""

    def disconnected(records: list[Any]) -> None:
        records[2]["metadata"]["was_cancelled"] = False
        records[2]["error"] = {
            "code": None,
            "type": "ServerDisconnectedError",
            "message": "Server disconnected",
        }

    windows = load_windows("aiperf", rewrite_lines(tmp_path, "aiperf/profile_export.jsonl", disconnected))
    assert windows[2].http_status is None and windows[2].source["error_type"] == "ServerDisconnectedError"
    assert windows[2].failed and "the harness recorded the request as failed" in (windows[2].failure() or "")
    assert not windows[1].failed


def test_aiperf_other_phases_keep_their_name_and_are_not_measured(tmp_path: Path) -> None:
    def ramp(records: list[Any]) -> None:
        records[1]["metadata"]["benchmark_phase"] = "ramp_up"

    windows = load_windows("aiperf", rewrite_lines(tmp_path, "aiperf/profile_export.jsonl", ramp))
    assert [w.phase for w in windows] == ["warmup", "ramp_up", "timed"]


def test_aiperf_013_one_token_answer_has_its_last_token_at_request_latency() -> None:
    """Lines written by AIPerf 0.13.0's own metric pipeline and serializer (fixture README): a one-token
    answer has no inter_chunk_latency, and its token is not at request_end_ns (the [DONE] message)."""
    one, three = load("aiperf", "aiperf/profile_export_0.13_one_token.jsonl")
    start = 1_764_825_600_123_456_789
    assert row(one) == (
        "aiperf-5b0e77aa-b305-423f-88d5-c00da1892599", "timed", start, start + 48_866_510,
        start + 47_650_221, start + 48_734_116, start + 48_734_116, 550, 1, None, None, None, None,
    )  # fmt: skip
    assert "request_latency" in one.source["last_token"]
    # three tokens: the gaps are read; they land exactly on AIPerf's request_latency, 74.11573299999999 ms
    start3 = start + 200 * MS
    assert (three.t_first_token_ns, three.t_last_token_ns) == (start3 + 48_734_116, start3 + 74_115_733)
    assert "last_token" not in three.source


def test_aiperf_last_token_without_gaps_needs_the_013_request_latency(tmp_path: Path) -> None:
    def no_latency(records: list[Any]) -> None:
        del records[0]["metrics"]["request_latency"]

    def shorter(records: list[Any]) -> None:
        records[0]["metrics"]["request_latency"]["value"] = 40.0

    rel = "aiperf/profile_export_0.13_one_token.jsonl"
    assert load_windows("aiperf", rewrite_lines(tmp_path, rel, no_latency))[0].t_last_token_ns is None
    message = refused("aiperf", rewrite_lines(tmp_path, rel, shorter))
    assert "line 1: metrics: request_latency is shorter than time_to_first_token" in message

    def wrong_type(records: list[Any]) -> None:
        records[0]["metadata"]["request_start_ns"] = "soon"

    # was "line 1.metadata.request_start_ns must be …": the line and the field ran together
    assert ": line 1: metadata.request_start_ns " in refused(
        "aiperf", rewrite_lines(tmp_path, rel, wrong_type)
    )


def test_older_aiperf_request_latency_is_not_a_token_stamp(tmp_path: Path) -> None:
    """AIPerf ≤ 0.1 ended request_latency at the last raw response: start + it = max_response_timestamp."""

    def one_chunk(records: list[Any]) -> None:
        del records[1]["metrics"]["inter_chunk_latency"]

    (window,) = load_windows("aiperf", rewrite_lines(tmp_path, "aiperf/profile_export_v0.1.jsonl", one_chunk))
    assert window.t_start_ns + 7_936_968_269 == window.t_end_ns  # the fixture's own request_latency
    assert window.t_first_token_ns is not None and window.t_last_token_ns is None


# ---- vLLM ----


def test_vllm_result_is_placed_on_the_wall_clock_by_the_anchor() -> None:
    windows = load("vllm", "vllm/bench_serve_detailed.json", ANCHOR)
    # wall = 1759522400 s + (perf_counter − 8100 s): 8123.5 s → 1759522423.5 s, 8124.0 s → 1759522424.0 s
    s0, s1, s2 = 1_759_522_423_500_000_000, 1_759_522_423_507_812_500, 1_759_522_424_000_000_000
    assert [row(w) for w in windows] == [
        ("vllm-0", "timed", s0, s0 + 343_750_000, s0 + 250 * MS, None, s0 + 343_750_000, 512, 4,
         None, None, None, None),
        # request 1 failed (errors[1] is set) before any chunk: vLLM left its latency 0; kept, not measured
        ("vllm-1", "timed", s1, s1, None, None, None, 512, None, None, None, None, None),
        ("vllm-2", "timed", s2, s2 + 500 * MS, s2 + 375 * MS, None, s2 + 500 * MS, 512, 5,
         None, None, None, None),
    ]  # fmt: skip
    assert [w.failed for w in windows] == [False, True, False]
    assert (
        windows[1].source["error"] == "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"
    )
    assert windows[1].source["end"] == vllm.UNKNOWN_END and windows[0].source["end"] == vllm.END_NOTE
    assert windows[0].source == {
        "format": "vllm",
        "file": "bench_serve_detailed.json",
        "clock_domain": "perf_counter_s",
        "mapping": {
            "kind": "anchor",
            "rule": "wall = wall_ns + (perf_counter_ns - mono_ns)",
            "wall_ns": 1_759_522_400 * S,
            "mono_ns": 8_100 * S,
            "uncertainty_ns": 2_000,
        },
        "resolution_s": 1e-9,
        "uncertainty_ns": 2_002,  # the anchor's 2 µs plus the float seconds' rounding at ~8124 s (2 ns)
        "float_rounding_ns": 2,
        "anchor_distance_s": 23.5,
        "request_index": 0,
        **vllm.NOTES,
        "backend": "openai-chat",
    }


def test_vllm_completions_ttft_is_the_first_token(tmp_path: Path) -> None:
    """A completions stream (backend vllm or openai) has no role chunk: vLLM's ttft, the first chunk with
    choices, is its first token. A chat file's ttft may be the role chunk (vLLM <= 0.15): first byte only."""

    def completions(data: dict[str, Any]) -> None:
        data["backend"] = data["endpoint_type"] = "vllm"

    path = rewrite(tmp_path, "vllm/bench_serve_detailed.json", completions)
    first, _, last = load_windows("vllm", path, clock_anchor=ANCHOR)
    s0 = 1_759_522_423_500_000_000
    assert (first.t_first_byte_ns, first.t_first_token_ns) == (s0 + 250 * MS, s0 + 250 * MS)
    assert first.source["first_token"] == vllm.COMPLETIONS_NOTES["first_token"]
    assert last.t_first_token_ns == last.t_first_byte_ns is not None


def test_vllm_an_unnamed_failure_and_an_odd_backend_are_read(tmp_path: Path) -> None:
    """vLLM writes an HTTP error with an empty reason as errors[i] == "" (ttft and latency 0): a failure, not
    an answered zero-length request; a backend that is not a string is no backend, not a traceback."""

    def odd(data: dict[str, Any]) -> None:
        data["errors"][1] = ""
        data["backend"] = data["endpoint_type"] = []

    path = rewrite(tmp_path, "vllm/bench_serve_detailed.json", odd)
    windows = load_windows("vllm", path, clock_anchor=ANCHOR)
    assert [w.failed for w in windows] == [False, True, False]
    assert windows[1].source["error"] == vllm.NO_ERROR_TEXT and "backend" not in windows[0].source


def test_vllm_windows_move_with_the_anchor_and_nothing_else() -> None:
    base = load("vllm", "vllm/bench_serve_detailed.json", ANCHOR)
    later = ClockAnchor(wall_ns=ANCHOR.wall_ns + 7 * S + 3, mono_ns=ANCHOR.mono_ns, uncertainty_ns=2_000)
    moved = load("vllm", "vllm/bench_serve_detailed.json", later)
    for a, b in zip(base, moved, strict=True):
        assert b.t_start_ns - a.t_start_ns == b.t_end_ns - a.t_end_ns == 7 * S + 3
        if a.failed:  # no stamps but its start and end
            continue
        assert b.t_first_byte_ns is not None and a.t_first_byte_ns is not None
        assert b.t_first_byte_ns - a.t_first_byte_ns == 7 * S + 3


def test_vllm_without_an_anchor_is_refused_with_the_way_to_get_one() -> None:
    message = refused("vllm", HARNESS / "vllm/bench_serve_detailed.json")
    assert "perf_counter" in message and "WALL_NS:MONO_NS" in message
    # another harness's report is named as such, not asked for an anchor it does not need (with one given
    # it was named; without, the user fetched an anchor only to be told the file was not vLLM's)
    message = refused("vllm", HARNESS / "guidellm/benchmarks_v0.2.json")
    assert message == (
        f"{HARNESS / 'guidellm/benchmarks_v0.2.json'}: not a vllm bench serve result: no 'start_times' list"
        " (this looks like a guidellm benchmarks report)"
    )
    missing = HARNESS / "vllm/none.json"
    assert refused("vllm", missing) == f"{missing}: no such file"  # nor a missing one


def test_vllm_without_an_anchor_reads_a_file_nested_too_deep_as_one_line(tmp_path: Path) -> None:
    """The file is read to say what it is before the anchor is asked for: outside the importers' guard, a
    RecursionError would have ended `run` before its run was ended."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    assert refused("vllm", deep) == f"{deep}: file is JSON nested too deep to read"


def test_numbers_past_a_double_and_deep_nesting_are_one_short_line_in_every_format(tmp_path: Path) -> None:
    """Python's json reads ``1e400`` as inf, ``10**300`` as an integer that ``float()`` and the window
    checks quoted in full (301 digits of error), 5000 digits as a ValueError telling the user to call
    ``sys.set_int_max_str_digits``, and a few thousand brackets as a RecursionError: each a short line."""

    def plain_start(value: Any) -> Callable[[Any], None]:
        return lambda data: data["windows"][0].__setitem__("t_start_ns", value)

    def vllm_start(data: dict[str, Any]) -> None:
        data["start_times"][0] = 10**300

    def guidellm_start(data: dict[str, Any]) -> None:
        data["benchmarks"][0]["scheduler_metrics"]["measure_start_time"] = 10**300

    cases = [
        ("plain", "plain/windows.json", plain_start(10**300), "64-bit range: 1000000000… (301 digits)"),
        ("vllm", "vllm/bench_serve_detailed.json", vllm_start, "t_start_ns: 1000000000… (310 digits) is not"),
        ("guidellm", "guidellm/benchmarks.json", guidellm_start, "measure_end_time (1759522404.0) is before"),
    ]
    for fmt, rel, change, words in cases:
        path = rewrite(tmp_path, rel, change)
        message = refused(fmt, path, ANCHOR)
        assert words in message and len(message) - len(str(path)) < 200, message  # short, past the path
    texts = {
        "inf.json": '{"windows": [{"id": "a", "t_start_ns": 1e400}]}',
        "digits.json": '{"windows": [{"id": "a", "t_start_ns": ' + "1" * 5000 + "}]}",
        "deep.json": "[" * 5000 + "]" * 5000,
    }
    said = {
        "inf.json": "inf.json: file contains 1e400, a number too large to store",
        "digits.json": "digits.json: file contains an integer of 5000 digits, a number too large to store",
        "deep.json": "deep.json: file is JSON nested too deep to read",
    }
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
        for fmt in ("plain", "guidellm", "genai-perf", "export"):
            assert refused(fmt, tmp_path / name) == f"{tmp_path}/{said[name]}", fmt
    cells = tmp_path / "w.csv"
    cells.write_text(f"id,phase,t_start_ns,t_end_ns\na,timed,1759522500000000000,{'9' * 5000}\n")
    assert (
        refused("plain", cells)
        == f"{cells}: row 2: t_end_ns is an integer of 5000 digits, a number too large to store"
    )


def test_vllm_without_latencies_ends_each_request_at_ttft_plus_its_itls(tmp_path: Path) -> None:
    def no_latencies(data: dict[str, Any]) -> None:
        del data["latencies"]

    path = rewrite(tmp_path, "vllm/bench_serve_detailed.json", no_latencies)
    with_latencies = load("vllm", "vllm/bench_serve_detailed.json", ANCHOR)
    assert [row(w) for w in load_windows("vllm", path, clock_anchor=ANCHOR)] == [
        row(w) for w in with_latencies
    ]


# ---- lmx status capture ----

LMX = HARNESS / "lmx-status"
LMX_T0 = 1_759_522_430_000_000_000


def lmx_ms(w: Window) -> Row:
    """A window's stamps in ms after the fixture's first line, then its counts."""
    ms = [None if t is None else (t - LMX_T0) / MS for t in (w.t_start_ns, w.t_first_token_ns,
          w.t_last_token_ns, w.t_end_ns)]  # fmt: skip
    return (w.id, w.phase, *ms, w.prompt_tokens, w.completion_tokens)


def test_lmx_status_capture_rebuilds_windows_from_lmx_real_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """--warmup 1 --iterations 2 --concurrency 2: the warm-up ends where the first timed request starts;
    timed k is the k-th first token to arrive, matched to its payload sample by ttftMs, not by order."""
    monkeypatch.chdir(LMX)  # where lmx wrote payload.json (the event's relative path)
    windows = load("lmx-status", "lmx-status/status.jsonl")
    assert [lmx_ms(w) for w in windows] == [
        ("lmx-warmup-1", "warmup", 10.0, 410.0, None, 2510 - 250.5, None, None),
        ("lmx-it1-r1", "timed", 2510 - 250.5, 2510.0, 2510 + 204 / 102 * 1e3, 5010.0, 305, 205),
        ("lmx-it1-r2", "timed", 2530 - 268.75, 2530.0, 2530 + 240 / 120 * 1e3, 5010.0, 305, 241),
        ("lmx-it2-r1", "timed", 5262 - 240.25, 5262.0, 5262 + 255 / 102 * 1e3, 7900.0, 305, 256),
        ("lmx-it2-r2", "timed", 5270 - 250, 5270.0, 5270 + 192 / 96 * 1e3, 7900.0, 305, 193),
    ]
    source = windows[2].source
    assert source["kind"] == "lmx-status" and source["clock_domain"] == "arrival_ns"
    assert source["tokens_from"] == "payload.json samples[] iteration 1 request 1 (matched by ttftMs)"
    assert source["lmx"] == {"iteration": 1, "requests_in_iteration": 2, "ttftMs": 268.75, "tokSOut": 120.0}
    assert source["lmx_output_token_source"] == "endpoint_usage"
    assert "upper bound" in source["method"]["t_end_ns"]
    assert source["uncertainty"]["t_last_token_rounding_ns"] == round(2.0 * 0.05 / 120 * 1e9)
    assert "first timed request's start" in windows[0].source["method"]["t_end_ns"]


def test_two_requests_with_one_ttft_leave_their_counts_unknown_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent requests whose first tokens came at the same ttftMs (to lmx's 0.01 ms: a loaded machine
    made it so): no payload sample is either one's, so neither gets counts or a last token."""
    payload = json.loads((LMX / "payload.json").read_text())
    for sample in payload["samples"]:
        if sample["iteration"] == 1:
            sample["ttftMs"] = 250.5
    (tmp_path / "payload.json").write_text(json.dumps(payload))
    status = (LMX / "status.jsonl").read_text().replace('"ttftMs":268.75', '"ttftMs":250.5')
    (tmp_path / "status.jsonl").write_text(status)
    monkeypatch.chdir(tmp_path)
    windows = {w.id: w for w in load_windows("lmx-status", tmp_path / "status.jsonl")}
    for wid in ("lmx-it1-r1", "lmx-it1-r2"):
        w = windows[wid]
        assert w.completion_tokens is None and w.t_last_token_ns is None and w.t_first_token_ns is not None
        assert w.source["tokens_from"] == "several samples have ttftMs 250.5 in iteration 1 of payload.json"
    assert windows["lmx-it2-r1"].completion_tokens == 256  # the other iteration is matched as before


def test_lmx_status_without_its_payload_file_leaves_token_counts_unknown_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # neither path nor pathAbsolute exists from here
    windows = load("lmx-status", "lmx-status/status.jsonl")
    timed = [w for w in windows if w.phase == "timed"]
    assert len(timed) == 4 and all(w.completion_tokens is None and w.t_last_token_ns is None for w in timed)
    assert timed[0].source["tokens_from"].startswith("payload file not found")
    assert timed[0].source["method"]["t_last_token_ns"].startswith("unknown: no output token count")


def test_lmx_single_request_takes_the_payload_top_level_counts(tmp_path: Path) -> None:
    """iterations = concurrency = 1: lmx writes no samples[]; the top-level outputTokens is the request's."""
    lines = [
        _lmx(0, event="endpoint_warmup_request", index=1, warmup=1),
        _lmx(100, event="first_token_received", ttftMs=90),
        _lmx(300, event="first_token_received", ttftMs=50.5),
        _lmx(900, event="endpoint_iteration_complete", iteration=1, iterations=1, concurrency=1, tokSOut=100),
        _lmx(901, event="speed_test_payload_file_written", path="out.json", pathAbsolute="/nowhere/out.json"),
    ]
    path = _lmx_file(tmp_path, lines)
    (tmp_path / "out.json").write_text(json.dumps({"outputTokens": 51.0, "tokSOut": 100, "promptTokens": 12}))
    windows = list(lmx_status.read_capture(path, tmp_path))
    assert [lmx_ms(w) for w in windows] == [
        ("lmx-warmup-1", "warmup", 0.0, 100.0, None, 300 - 50.5, None, None),
        ("lmx-it1-r1", "timed", 300 - 50.5, 300.0, 800.0, 900.0, 12, 51),
    ]
    assert "top-level outputTokens" in windows[1].source["tokens_from"]


def test_lmx_benchmark_run_shape_and_unknown_events_are_read(tmp_path: Path) -> None:
    """The old ``lmx benchmark run`` line ({iteration, iterations, tokSOut, ttftMs}, no concurrency) and
    events sparkwatch does not know (counted in the source, never fatal)."""
    lines = [
        _lmx(0, event="first_token_received", ttftMs=20),
        _lmx(10, event="gpu_sampler_started", interval=1),
        _lmx(15, event="gpu_sampler_started", interval=1),
        {"t_arrival_ns": LMX_T0 + 20 * MS, "status": {"tokSOut": 121.4}},  # other JSON the command printed
        _lmx(500, event="endpoint_iteration_complete", iteration=1, iterations=2, tokSOut=50, ttftMs=20),
        _lmx(600, event="error", code="endpoint_benchmark_failed", message="HTTP 500", hints=["retry"]),
    ]
    path = _lmx_file(tmp_path, lines)
    windows = list(lmx_status.read_capture(path, tmp_path))
    assert [lmx_ms(w) for w in windows] == [("lmx-it1-r1", "timed", -20.0, 0.0, None, 500.0, None, None)]
    assert windows[0].source["unknown_events"] == {"gpu_sampler_started": 2}
    summary = lmx_status.survey(path)
    assert lmx_status.notes(summary, None, "no payload") == [
        "lmx-status: token counts unknown: no payload",
        "lmx-status: status lines with events sparkwatch does not know were ignored: gpu_sampler_started x2",
        "lmx-status: 1 JSON line(s) without an event name were ignored",
        "lmx-status: lmx reported: error endpoint_benchmark_failed: HTTP 500",
    ]


def test_lmx_requests_without_an_end_or_first_token_get_no_window_and_are_counted(tmp_path: Path) -> None:
    lines = [
        _lmx(0, event="first_token_received", ttftMs=20),
        _lmx(500, event="endpoint_iteration_complete", iteration=1, iterations=3, concurrency=2, tokSOut=50),
        _lmx(600, event="first_token_received", ttftMs=20),  # iteration 2 never completes
    ]
    path = _lmx_file(tmp_path, lines)
    assert [w.id for w in load_windows("lmx-status", path)] == ["lmx-it1-r1"]
    summary = lmx_status.survey(path)
    assert (summary.without_first_token, summary.unfinished) == (1, 1)


def test_lmx_without_any_first_token_says_why(tmp_path: Path) -> None:
    lines = [
        _lmx(0, event="endpoint_warmup_request", index=1, warmup=1),
        _lmx(500, event="endpoint_iteration_complete", iteration=1, iterations=1, concurrency=1),
    ]
    assert "lmx printed no first_token_received (was it run with --no-stream" in refused(
        "lmx-status", _lmx_file(tmp_path, lines)
    )


def test_lmx_arrival_stamps_that_go_back_are_a_damaged_capture(tmp_path: Path) -> None:
    """The lines are stamped as they arrive: one 32.5 s before the line above (a capture spliced or edited)
    made a 35 s window of a time no request took. Under a second back is a clock's refit or slew: read."""
    lines = [
        _lmx(0, event="first_token_received", ttftMs=20),
        _lmx(400, event="first_token_received", ttftMs=20),
        _lmx(399.5, event="gpu_sampler_started", interval=1),  # half a millisecond back: read
        _lmx(450, event="endpoint_iteration_complete", iteration=1, iterations=1, concurrency=2, tokSOut=50),
    ]
    windows = load_windows("lmx-status", _lmx_file(tmp_path, lines))
    assert [w.id for w in windows] == ["lmx-it1-r1", "lmx-it1-r2"]
    lines[1] = _lmx(-32_500, event="first_token_received", ttftMs=20)
    said = refused("lmx-status", _lmx_file(tmp_path, lines))
    assert "line 2: t_arrival_ns is 32.500 s before line 1's" in said and "spliced or damaged" in said
    lines[1] = _lmx(400, event="first_token_received", ttftMs=20)
    lines[2] = _lmx(-1_000, event="gpu_sampler_started", interval=1)  # judged against the latest line
    said = refused("lmx-status", _lmx_file(tmp_path, lines))
    assert "line 3: t_arrival_ns is 1.400 s before line 2's" in said


def _lmx(ms: float, **status: Any) -> dict[str, Any]:
    return {"t_arrival_ns": LMX_T0 + round(ms * MS), "status": {"time": "2025-10-03T20:13:50Z", **status}}


def _lmx_file(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "status.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# ---- plain ----


def test_plain_csv_gives_exact_windows_with_empty_cells_unknown() -> None:
    windows = load("plain", "plain/windows.csv")
    p = 1_759_522_500 * S
    assert [row(w) for w in windows] == [
        ("w-0", "warmup", p, p + 2 * S, None, None, None, None, None, None, None, None, None),
        ("r-1", "timed", p + 3 * S, p + 6500 * MS, p + 3100 * MS, p + 3250 * MS, p + 6400 * MS,
         512, 300, 256, 40, None, None),
        ("r-2", "timed", p + 3500 * MS, p + 7 * S, None, p + 3900 * MS, p + 6900 * MS, 512, None,
         None, None, None, None),
    ]  # fmt: skip
    assert windows[1].source == {
        "format": "plain",
        "file": "windows.csv",
        "clock_domain": "unix_ns",
        "mapping": {"kind": "identity", "rule": "Unix epoch ns integers as written"},
        "resolution_s": 1e-9,
        "plain_kind": "csv",
        "request_id": "r-1",
    }


def test_plain_json_gives_exact_windows() -> None:
    windows = load("plain", "plain/windows.json")
    p = 1_759_522_500 * S
    assert [row(w) for w in windows] == [
        (
            "req-a",
            "timed",
            p,
            p + 1500 * MS,
            None,
            p + 200 * MS,
            p + 1450 * MS,
            128,
            64,
            None,
            None,
            200,
            "stop",
        ),
        ("req-b", "timed", p + 100 * MS, p + 150 * MS, None, None, None, None, None, None, None, 503, None),
    ]
    assert windows[0].source["plain_kind"] == "json"


# ---- what every good import promises ----


@pytest.mark.parametrize(("fmt", "rel"), GOOD)
def test_every_window_is_one_the_coordinator_api_accepts(fmt: str, rel: str) -> None:
    windows = load(fmt, rel, ANCHOR)
    assert len({w.id for w in windows}) == len(windows)
    for window in windows:
        json.dumps(window.source, allow_nan=False)
        for key in ("format", "file", "clock_domain", "mapping", "resolution_s"):
            assert key in window.source, key
        assert window.source["format"] == fmt and window.source["file"] == Path(rel).name
        body = json.dumps({"windows": [window.to_body()]})  # as the client posts it
        assert window_batch(body.encode()).windows == [window]


# ---- refusals: malformed files ----


def _guidellm_end_before_start(d: Any) -> None:
    d["benchmarks"][0]["requests"]["successful"][2]["info"]["timings"]["request_end"] = 1759522402.5


def _guidellm_no_start(d: Any) -> None:
    timings = d["benchmarks"][0]["requests"]["successful"][0]["info"]["timings"]
    timings["request_start"] = timings["resolve_start"] = None


def _guidellm_string_time(d: Any) -> None:
    d["benchmarks"][0]["requests"]["successful"][1]["info"]["timings"]["first_token_iteration"] = "soon"


def _guidellm_no_period(d: Any) -> None:
    del d["benchmarks"][0]["scheduler_metrics"]


def _guidellm_period_ends_before_it_starts(d: Any) -> None:
    d["benchmarks"][0]["scheduler_metrics"]["measure_end_time"] = 1.5


def _genai_float_timestamp(d: Any) -> None:
    d["experiments"][0]["requests"][0]["timestamp"] = 1759522410.0


def _genai_out_of_order(d: Any) -> None:
    d["experiments"][0]["requests"][1]["response_timestamps"].reverse()


def _genai_negative(d: Any) -> None:
    d["experiments"][1]["requests"][0]["response_timestamps"][0] = -1


def _vllm_short_list(d: Any) -> None:
    d["ttfts"].pop()


def _vllm_negative_latency(d: Any) -> None:
    d["latencies"][2] = -0.5


def _vllm_latency_before_ttft(d: Any) -> None:
    d["latencies"][0] = 0.125


def _vllm_no_input_lens(d: Any) -> None:
    del d["input_lens"]


def _plain_json_float(d: Any) -> None:
    d["windows"][0]["t_end_ns"] = 1.5e18


def _plain_json_token_after_end(d: Any) -> None:
    d["windows"][0]["t_last_token_ns"] = d["windows"][0]["t_end_ns"] + 1


def _plain_json_bad_phase(d: Any) -> None:
    d["windows"][1]["phase"] = "Timed!"


@pytest.mark.parametrize(
    ("fmt", "rel", "change", "says"),
    [
        (
            "guidellm",
            "guidellm/benchmarks.json",
            _guidellm_end_before_start,
            "requests.successful[2]: t_end_ns: ends before",
        ),
        ("guidellm", "guidellm/benchmarks.json", _guidellm_no_start, "needs request_start/request_end"),
        (
            "guidellm",
            "guidellm/benchmarks.json",
            _guidellm_string_time,
            "first_token_iteration must be a number",
        ),
        ("guidellm", "guidellm/benchmarks.json", _guidellm_no_period, "missing field 'scheduler_metrics'"),
        (
            "guidellm",
            "guidellm/benchmarks.json",
            _guidellm_period_ends_before_it_starts,
            "measure_end_time (1.5) is before measure_start_time",
        ),
        (
            "genai-perf",
            "genai-perf/profile_export.json",
            _genai_float_timestamp,
            "timestamp must be an integer",
        ),
        ("genai-perf", "genai-perf/profile_export.json", _genai_out_of_order, "not in arrival order"),
        (
            "genai-perf",
            "genai-perf/profile_export.json",
            _genai_negative,
            "response_timestamps[0] must be >= 0",
        ),
        (
            "vllm",
            "vllm/bench_serve_detailed.json",
            _vllm_short_list,
            "'ttfts' has 2 entries but 'start_times' has 3",
        ),
        ("vllm", "vllm/bench_serve_detailed.json", _vllm_negative_latency, "latencies[2] is negative"),
        ("vllm", "vllm/bench_serve_detailed.json", _vllm_latency_before_ttft, "shorter than its ttft"),
        (
            "vllm",
            "vllm/bench_serve_detailed.json",
            _vllm_no_input_lens,
            "missing per-request list 'input_lens'",
        ),
        ("plain", "plain/windows.json", _plain_json_float, "t_end_ns must be an integer"),
        ("plain", "plain/windows.json", _plain_json_token_after_end, "t_last_token_ns"),
        ("plain", "plain/windows.json", _plain_json_bad_phase, "phase: 'Timed!' must match"),
    ],
)
def test_malformed_json_files_are_refused_whole(
    tmp_path: Path, fmt: str, rel: str, change: Callable[[Any], None], says: str
) -> None:
    assert refused(fmt, rewrite(tmp_path, rel, change), ANCHOR).count(says) == 1


def _aiperf_negative_start(records: list[Any]) -> None:
    records[1]["metadata"]["request_start_ns"] = -5


def _aiperf_no_phase(records: list[Any]) -> None:
    del records[0]["metadata"]["benchmark_phase"]


def _aiperf_bad_unit(records: list[Any]) -> None:
    records[1]["metrics"]["time_to_first_token"]["unit"] = "tokens"


def _aiperf_duplicate_id(records: list[Any]) -> None:
    records[2]["metadata"]["x_request_id"] = records[1]["metadata"]["x_request_id"]


def _lmx_iteration_lost(records: list[Any]) -> None:
    del records[6]  # iteration 1's endpoint_iteration_complete


def _lmx_warmup_after_timed(records: list[Any]) -> None:
    records[7]["status"] = {"event": "endpoint_warmup_request", "index": 2, "warmup": 2}


def _lmx_ttft_text(records: list[Any]) -> None:
    records[4]["status"]["ttftMs"] = "250.5"


def _lmx_too_many_first_tokens(records: list[Any]) -> None:
    records[6]["status"]["concurrency"] = 1


def _lmx_monotonic_arrival(records: list[Any]) -> None:
    records[6]["t_arrival_ns"] = 8_123_500_000_000


@pytest.mark.parametrize(
    ("fmt", "rel", "change", "says"),
    [
        ("aiperf", "aiperf/profile_export.jsonl", _aiperf_negative_start, "request_start_ns must be >= 0"),
        ("aiperf", "aiperf/profile_export.jsonl", _aiperf_no_phase, "benchmark_phase must be a string"),
        ("aiperf", "aiperf/profile_export.jsonl", _aiperf_bad_unit, "unit 'tokens' is not a time unit"),
        ("aiperf", "aiperf/profile_export.jsonl", _aiperf_duplicate_id, "two requests share the window id"),
        (
            "lmx-status",
            "lmx-status/status.jsonl",
            _lmx_iteration_lost,
            "line 9 (endpoint_iteration_complete): iteration 2 follows iteration 0 (lines lost?)",
        ),
        (
            "lmx-status",
            "lmx-status/status.jsonl",
            _lmx_warmup_after_timed,
            "line 8 (endpoint_warmup_request): a warm-up after timed requests",
        ),
        (
            "lmx-status",
            "lmx-status/status.jsonl",
            _lmx_ttft_text,
            "line 5 (first_token_received): ttftMs must",
        ),
        (
            "lmx-status",
            "lmx-status/status.jsonl",
            _lmx_too_many_first_tokens,
            "line 7 (endpoint_iteration_complete): 2 first tokens for a concurrency of 1",
        ),
        ("lmx-status", "lmx-status/status.jsonl", _lmx_monotonic_arrival, "is not Unix epoch nanoseconds"),
    ],
)
def test_malformed_json_lines_files_are_refused_whole(
    tmp_path: Path, fmt: str, rel: str, change: Callable[[list[Any]], None], says: str
) -> None:
    assert says in refused(fmt, rewrite_lines(tmp_path, rel, change))


PLAIN_HEADER = "id,phase,t_start_ns,t_end_ns"
P0, P1, P2 = "1759522500000000000", "1759522501000000000", "1759522499000000000"


@pytest.mark.parametrize(
    ("header", "rows", "says"),
    [
        ("id,phase,t_start_ns", [f"r,timed,{P0}"], "row 2: missing t_end_ns"),
        (PLAIN_HEADER + ",t_frist_token_ns", [], "unknown column(s) 't_frist_token_ns'"),
        (PLAIN_HEADER, [f"r,timed,{P0},1759522500.5e9"], "row 2: t_end_ns must be a non-negative integer"),
        (PLAIN_HEADER, [f"r,timed,{P0},-1"], "row 2: t_end_ns must be a non-negative integer"),
        (  # seconds with a fraction (a user's CSV): which unit it reads in, not only that it is no integer
            PLAIN_HEADER,
            ["r,timed,1759522500.25,1759522501.5"],
            "row 2: t_start_ns must be a non-negative integer, found '1759522500.25' (t_start_ns is Unix"
            " epoch nanoseconds, an integer; this reads as seconds: × 10^9)",
        ),
        (PLAIN_HEADER, [f"r,timed,{P0},{P2}"], "row 2: t_end_ns: ends before it starts"),
        (PLAIN_HEADER, ["r,timed,1759522500,1759522501"], "not Unix epoch nanoseconds"),
        (PLAIN_HEADER, [f"r,timed,{P0},{P1},9"], "row 2: 5 cells for 4 columns"),
        (PLAIN_HEADER, [f"r,timed,{P0},{P1}", f"r,timed,{P0},{P1}"], "two requests share the window id 'r'"),
        (PLAIN_HEADER, [f"r,Timed,{P0},{P1}"], "phase: 'Timed' must match"),
    ],
)
def test_malformed_plain_csv_is_refused_whole(
    tmp_path: Path, header: str, rows: list[str], says: str
) -> None:
    path = tmp_path / "windows.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    assert says in refused("plain", path)


def test_a_json_time_in_fractional_milliseconds_says_its_unit(tmp_path: Path) -> None:
    path = tmp_path / "windows.json"
    window = {"id": "r", "phase": "timed", "t_start_ns": 1759522500250.5, "t_end_ns": int(P1)}
    path.write_text(json.dumps({"windows": [window]}))
    assert refused("plain", path).endswith(
        "windows[0].t_start_ns must be an integer, found a float (t_start_ns is Unix epoch nanoseconds, an"
        " integer; this reads as milliseconds: × 10^6)"
    )


def test_a_csv_cell_over_the_csv_modules_limit_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "windows.csv"
    path.write_text(
        f"{PLAIN_HEADER}\nr,timed,{P0},{P1}\n" + '"' + "x" * (129 * 1024) + f'",timed,{P0},{P1}\n'
    )
    assert "CSV line 3: field larger than field limit (131072)" in refused("plain", path)


def test_line_formats_are_read_as_they_go_not_held_whole(tmp_path: Path) -> None:
    """A 30 MB capture is read with a few MB at most in memory (a 200 MB one took 2.2 GB when held whole):
    each iteration's windows are handed on when its endpoint_iteration_complete is read."""
    t0 = 1_759_522_430_000_000_000
    lines = []
    for i in range(10_000):
        statuses = [
            {"event": "first_token_received", "ttftMs": 20.5, "time": "2025-10-03T20:13:50Z"},
            {"event": "endpoint_iteration_complete", "iteration": i + 1, "iterations": 10_000,
             "concurrency": 1, "tokSOut": 99.5, "time": "2025-10-03T20:13:50Z", "pad": "p" * 2500},
        ]  # fmt: skip
        for k, status in enumerate(statuses):
            lines.append(json.dumps({"t_arrival_ns": t0 + i * 10**7 + k * 10**6, "status": status}))
    path = tmp_path / "status.jsonl"
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_windows("lmx-status", path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 10_000 and size > 25_000_000
    assert peak < size / 2, (peak, size)  # the ids it must keep to refuse a repeated one, not the file


def test_a_bad_last_line_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "profile_export.jsonl"
    path.write_text((HARNESS / "aiperf/profile_export.jsonl").read_text() + "{not json\n")
    assert "line 4 is not JSON" in refused("aiperf", path)


def test_nan_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    text = (HARNESS / "vllm/bench_serve_detailed.json").read_text()
    path.write_text(text.replace('"ttfts": [\n    0.25', '"ttfts": [\n    NaN'))
    assert "NaN" in path.read_text()
    assert "NaN" in refused("vllm", path, ANCHOR)


# ---- refusals: another harness's file, or no file at all ----


@pytest.mark.parametrize(
    ("fmt", "rel", "says"),
    [
        ("guidellm", "genai-perf/profile_export.json", "not a guidellm benchmarks report"),
        ("guidellm", "vllm/bench_serve_detailed.json", "looks like a vllm bench serve result"),
        ("genai-perf", "guidellm/benchmarks.json", "looks like a guidellm benchmarks report"),
        ("genai-perf", "plain/windows.json", "not a genai-perf profile_export.json"),
        ("aiperf", "genai-perf/profile_export.json", "one JSON document (this looks like a genai-perf"),
        ("aiperf", "lmx-status/status.jsonl", "looks like a sparkwatch lmx-status capture"),
        ("vllm", "guidellm/benchmarks_v0.2.json", "not a vllm bench serve result"),
        ("vllm", "aiperf/profile_export.jsonl", "JSON Lines, not one document (this looks like an AIPerf"),
        (
            "genai-perf",
            "aiperf/profile_export.jsonl",
            "JSON Lines, not one document (this looks like an AIPerf",
        ),
        (
            "guidellm",
            "lmx-status/status.jsonl",
            "JSON Lines, not one document (this looks like a sparkwatch lmx",
        ),
        ("lmx-status", "aiperf/profile_export.jsonl", "looks like an AIPerf profile_export.jsonl record"),
        ("lmx-status", "vllm/bench_serve_detailed.json", "one JSON document (this looks like a vllm"),
        ("plain", "genai-perf/profile_export.json", "plain JSON must be an object with a 'windows' list"),
        ("plain", "aiperf/profile_export.jsonl", "must be a .csv or .json file"),
    ],
)
def test_another_harness_file_is_refused_and_named(fmt: str, rel: str, says: str) -> None:
    assert says in refused(fmt, HARNESS / rel, ANCHOR)


def test_a_vllm_result_saved_without_detail_says_how_to_save_it(tmp_path: Path) -> None:
    def summary_only(data: dict[str, Any]) -> None:
        del data["start_times"]

    message = refused("vllm", rewrite(tmp_path, "vllm/bench_serve_detailed.json", summary_only), ANCHOR)
    assert "--save-detailed" in message


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_missing_empty_and_directory_paths_are_one_line(tmp_path: Path, fmt: str) -> None:
    suffix = ".csv" if fmt == "plain" else ".json"
    assert "no such file" in refused(fmt, tmp_path / f"absent{suffix}", ANCHOR)
    empty = tmp_path / f"empty{suffix}"
    empty.write_text("")
    refused(fmt, empty, ANCHOR)
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    assert "is a directory" in refused(fmt, folder, ANCHOR)
    bare = tmp_path / "folder"  # no suffix either: a directory, not a file with the wrong extension
    bare.mkdir()
    assert "is a directory" in refused(fmt, bare, ANCHOR)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_device_is_refused_before_it_is_read(tmp_path: Path, fmt: str) -> None:
    """``/dev/zero`` never ends: it was read into memory until the machine ran out (`sparkwatch import
    aiperf /dev/zero` grew without bound). A device is refused, in one line, before a byte is read; by a
    name with the format's extension too (plain's check of the extension comes first)."""
    suffix = ".csv" if fmt == "plain" else ".json"
    for device in ("zero", "null"):
        named = tmp_path / f"{device}{suffix}"
        named.symlink_to(f"/dev/{device}")
        assert refused(fmt, named, ANCHOR).endswith(
            "is a character device, not a file (a regular file or a pipe is read)"
        ), device


def test_a_pipe_is_still_read(tmp_path: Path) -> None:
    """What ``--import plain:<(cmd)`` gives: a pipe, which ends, is read like the file it carries."""
    fifo = tmp_path / "windows.csv"
    os.mkfifo(fifo)
    text = (HARNESS / "plain/windows.csv").read_text()
    writer = threading.Thread(target=fifo.write_text, args=(text,))
    writer.start()
    try:
        piped = load_windows("plain", fifo, clock_anchor=ANCHOR)
    finally:
        writer.join(timeout=10)
    assert [row(w) for w in piped] == [row(w) for w in load("plain", "plain/windows.csv", ANCHOR)]
    assert len(piped) > 1


def test_a_file_without_any_request_is_refused(tmp_path: Path) -> None:
    def no_requests(data: dict[str, Any]) -> None:
        for status in ("successful", "incomplete", "errored"):
            data["benchmarks"][0]["requests"][status] = []

    assert "no requests found" in refused(
        "guidellm", rewrite(tmp_path, "guidellm/benchmarks.json", no_requests)
    )


def test_an_unknown_format_is_refused_naming_the_known_ones() -> None:
    message = refused("llmperf", HARNESS / "plain/windows.csv")
    assert "unknown format 'llmperf'" in message and "genai-perf" in message


def test_unexpected_structure_is_still_one_line(tmp_path: Path) -> None:
    path = rewrite(tmp_path, "genai-perf/profile_export.json", lambda d: {**d, "experiments": [[1, 2]]})
    assert "experiments[0] must be a JSON object" in refused("genai-perf", path)


def test_nan_in_a_json_lines_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "profile_export.jsonl"
    lines = (HARNESS / "aiperf/profile_export.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"value":255.886568', '"value":NaN')
    path.write_text("\n".join(lines) + "\n")
    assert "line 2 contains NaN" in refused("aiperf", path)


def test_lmx_capture_ignores_other_json_the_command_printed(tmp_path: Path) -> None:
    def noise(records: list[Any]) -> None:
        records.insert(3, {"t_arrival_ns": records[3]["t_arrival_ns"], "status": {"tokSOut": 121.4}})

    path = rewrite_lines(tmp_path, "lmx-status/status.jsonl", noise)
    assert [row(w) for w in load_windows("lmx-status", path)] == [
        row(w) for w in load("lmx-status", "lmx-status/status.jsonl")
    ]


def test_a_json_error_says_where_once() -> None:
    with pytest.raises(Problem) as caught:
        parse_json('{"a": "x', "benchmarks.json")
    assert str(caught.value) == (
        "benchmarks.json is not JSON (Unterminated string starting at line 1 column 7)"
    )


@pytest.mark.parametrize("fmt", ["aiperf", "lmx-status"])
def test_a_line_longer_than_any_record_is_refused_before_it_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """``tr '\\0' a </dev/zero | sparkwatch import aiperf /dev/stdin`` read one endless line into memory
    until a MemoryError's traceback; a line is read up to the bound (made small here) and no further."""
    monkeypatch.setattr(common, "MAX_LINE_CHARS", 1000)
    path = tmp_path / "one-line.jsonl"
    path.write_text("a" * 5000)
    assert "line 1 is longer than 1,000 characters: no harness record is" in refused(fmt, path)
    path.write_text("a" * 999 + "\n")  # at the bound: read (and no record)
    assert "longer than" not in refused(fmt, path)
