"""lmx under `sparkwatch run`, the pure parts: the ``{proxy}`` placeholder, the warm-up mismatch warning, the
cross-check of lmx's status windows against the proxy's, run-level notes in the export, and payload files
that cannot be used (token counts unknown, never a failure)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from test_core_export import build  # this folder's core export tests (pytest puts it on sys.path)

from sparkwatch.commands.run_lmx import check_capture, not_through_proxy, warmup_mismatch, with_proxy_url
from sparkwatch.core.export import digest, with_run_notes
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.window_rows import plain
from sparkwatch.core.windows import Window
from sparkwatch.importers.lmx_check import TOLERANCE_NS, cross_check
from sparkwatch.importers.lmx_payload import locate, read_payload

MS = 1_000_000
T0 = 1_759_522_430_000_000_000


def window(wid: str, phase: str, first_ms: float | None, **source: object) -> Window:
    first = None if first_ms is None else T0 + round(first_ms * MS)
    return Window(wid, phase, T0, T0 + 10_000 * MS, t_first_token_ns=first, source=dict(source))


PROXY = [
    window("proxy-a-1", "warmup", 100, clock_uncertainty_ns=200_000),
    window("proxy-a-2", "timed", 1000, clock_uncertainty_ns=200_000),
    window("proxy-a-3", "timed", 2000, clock_uncertainty_ns=200_000),
]


def test_the_placeholder_is_replaced_whole_or_inside_an_argument() -> None:
    argv = ["lmx", "--base-url", "{proxy}", "--base-url={proxy}/v1", "--notes", "no placeholder"]
    assert with_proxy_url(argv, "http://127.0.0.1:8899") == [
        "lmx", "--base-url", "http://127.0.0.1:8899", "--base-url=http://127.0.0.1:8899/v1",
        "--notes", "no placeholder",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("listening", "given"),
    [
        ("http://0.0.0.0:8899", "http://127.0.0.1:8899/v1"),  # was http://0.0.0.0:8899: no address to dial
        ("http://[::]:8899", "http://[::1]:8899/v1"),
        ("http://10.0.0.1:8899", "http://10.0.0.1:8899/v1"),
        ("http://[fe80::1]:8899", "http://[fe80::1]:8899/v1"),
    ],
)
def test_a_proxy_on_every_address_is_given_to_the_command_as_loopback(listening: str, given: str) -> None:
    assert with_proxy_url(["--base-url={proxy}/v1"], listening) == [f"--base-url={given}"]


@pytest.mark.parametrize(
    ("listening", "named"),
    [  # the note named http://0.0.0.0:8899, where no request can be sent
        ("http://0.0.0.0:8899", "at http://127.0.0.1:8899 (or this host's other addresses, port 8899) ("),
        ("http://[::]:8899", "proxy at http://[::1]:8899 (or this host's other addresses, port 8899) ("),
        ("http://10.0.0.1:8899", "proxy at http://10.0.0.1:8899 (from its own configuration)"),
    ],
)
def test_the_note_of_a_command_without_the_placeholder_names_an_address_to_send_to(
    listening: str, named: str
) -> None:
    assert named in not_through_proxy(listening)


@pytest.mark.parametrize(
    ("argv", "proxy_warmup", "warns"),
    [
        (["lmx", "speed-test", "run", "vllm"], 0, True),  # lmx's default is one warm-up
        (["lmx", "speed-test", "run", "vllm"], 1, False),
        (["/opt/bin/lmx", "speed-test", "--warmup", "2"], 2, False),
        (["lmx", "speed-test", "--warmup=0"], 1, True),
        (["guidellm", "benchmark", "--warmup", "0.1"], 0, False),  # another harness's --warmup
    ],
)
def test_a_warmup_count_that_differs_from_lmx_s_is_a_warning(
    argv: list[str], proxy_warmup: int, warns: bool
) -> None:
    warning = warmup_mismatch(argv, proxy_warmup)
    assert (warning is not None) == warns
    if warning:
        assert f"the proxy's --warmup is {proxy_warmup}" in warning


def test_the_cross_check_passes_when_counts_match_and_first_tokens_agree() -> None:
    status = [window("lmx-warmup-1", "warmup", 101), window("lmx-it1-r1", "timed", 1003),
              window("lmx-it2-r1", "timed", 2001.5)]  # fmt: skip
    check = cross_check(PROXY, status)
    assert check.ok
    assert check.notes[0] == (
        "lmx-status cross-check passed: 2 timed window(s) from the proxy and from lmx's status lines;"
        " first tokens agree within 3.0 ms (lmx's line later by a median 2.2 ms; tolerance 50.2 ms)"
    )
    assert "keeps the proxy's windows" in check.notes[1]


def test_a_capture_that_cannot_be_read_fails_the_check_naming_the_commands_stderr(tmp_path: Path) -> None:
    """The capture is a temporary file, gone once the run ends: the failure named it, and its line count."""
    capture = tmp_path / "sparkwatch-capture-x" / "lmx-status.jsonl"
    capture.parent.mkdir()
    status = {"event": "endpoint_warmup_request", "index": "x", "time": "2025-10-03T20:13:50Z"}
    capture.write_text(json.dumps({"t_arrival_ns": 1759522430000000000, "status": status}) + "\n")
    check = check_capture(capture, [window("p1", "timed", 10.0)])
    (said,) = check.notes
    assert said.startswith("lmx-status cross-check FAILED: the command's stderr could not be read: line 1 (")
    assert str(capture.parent) not in said and "lmx-status.jsonl" not in said


def test_the_cross_check_fails_on_a_late_first_token() -> None:
    late = TOLERANCE_NS / MS + 1
    status = [window("lmx-it1-r1", "timed", 1000), window("lmx-it2-r1", "timed", 2000 + late)]
    check = cross_check(PROXY, status)
    assert not check.ok
    assert "first tokens differ by up to 51.0 ms (tolerance 50.2 ms)" in check.notes[0]


def test_the_cross_check_fails_on_counts_and_names_the_warmup_fix() -> None:
    status = [window("lmx-warmup-1", "warmup", 100), window("lmx-it1-r1", "timed", 2000)]
    proxy = [window("proxy-a-1", "timed", 100), *PROXY[1:]]  # the proxy took lmx's warm-up for timed
    check = cross_check(proxy, status)
    assert not check.ok
    assert check.notes[0] == (
        "lmx-status cross-check FAILED: the proxy has 3 timed window(s), lmx's status lines 1;"
        " the proxy counted 0 warm-up request(s), lmx 1: give sparkwatch run --warmup 1"
    )


def test_run_notes_are_added_and_the_lmx_notes_sha256_still_names_the_export() -> None:
    export = json.loads(json.dumps(plain(build())))  # the core tests' export, as the client receives it
    before = digest(export)
    assert before in export["lmx"]["notes"]
    noted = with_run_notes(export, ["lmx-status cross-check passed: …"])
    assert noted["run"]["notes"][-1] == "lmx-status cross-check passed: …"
    assert digest(noted) != before and digest(noted) in noted["lmx"]["notes"]
    assert before not in noted["lmx"]["notes"]
    jsonschema.validate(plain(noted), run_schema())
    assert with_run_notes(export, []) is export


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "payload.json: file is not JSON"),
        ("[1, 2]", "payload.json is not an lmx payload (not a JSON object)"),
        ("", "payload.json: file is empty"),
    ],
)
def test_a_payload_that_cannot_be_read_is_a_reason_not_a_failure(
    tmp_path: Path, content: str, why: str
) -> None:
    path = tmp_path / "payload.json"
    path.write_text(content)
    result = read_payload(path)
    assert isinstance(result, str) and result.startswith(why)


def test_payload_samples_with_junk_are_skipped_and_counts_read_as_go_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    samples = [{"iteration": 1, "request": 1, "outputTokens": 256.0, "ttftMs": 20.5, "tokSOut": 99.5},
               {"iteration": "1"}, {"iteration": 1, "outputTokens": -3, "ttftMs": "x"}, 7]  # fmt: skip
    path.write_text(json.dumps({"payload": {"samples": samples, "outputTokens": 1.5}}))  # a saved run file
    payload = read_payload(path)
    assert not isinstance(payload, str)
    assert payload.output_tokens is None  # 1.5 is no count
    first, junk = payload.samples[1]
    assert (first.output_tokens, first.ttft_ms, first.tok_s_out) == (256, 20.5, 99.5)
    assert (junk.output_tokens, junk.ttft_ms) == (None, None)
    assert payload.match(1, 20.5, 2)[0] == first
    assert payload.match(2, 20.5, 1) == (None, "run.json has no samples[] entry for iteration 2")


def test_the_payload_is_found_from_the_working_directory_then_by_its_absolute_path(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.json").write_text("{}")
    assert locate("runs/a.json", "/elsewhere/a.json", tmp_path) == (tmp_path / "runs" / "a.json", "")
    assert locate("gone.json", str(tmp_path / "runs" / "a.json"), tmp_path)[0] == tmp_path / "runs" / "a.json"
    found, why = locate("gone.json", "/elsewhere/gone.json", tmp_path)
    assert found is None and why.startswith("payload file not found")
    assert locate(None, 5, tmp_path) == (None, "the payload event names no path")
