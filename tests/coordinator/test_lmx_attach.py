"""lmx attach (only three members change, byte for byte elsewhere; refusals change nothing) and the
cluster hardware record."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from sparkwatch.commands.attach import AttachError, attach, attach_text
from sparkwatch.commands.hardware import HardwareError, cluster_hardware

PAYLOAD = """{
    "model":   "qwen3-235b",  "gpuPowerWatts": [],
  "nested": {"a": [1, 2,   3], "notes": "not the top-level one"},
  "peakVramGb": null,
  "tokS": 76.0
}
"""


def export(verdicts: list[str] | None = None, watts: list[float | None] | None = None) -> dict[str, Any]:
    return {
        "schema": "sparkwatch.run/1",
        "windows": [
            {"id": f"w{i}", "in_scope": True, "verdict": v, "reasons": [] if v == "ok" else ["coverage 0.5"]}
            for i, v in enumerate(verdicts or ["ok", "ok"])
        ],
        "lmx": {
            "gpuPowerWatts": [55.8, 53.8] if watts is None else watts,
            "peakVramGb": 68.0,
            "notes": "Measured by sparkwatch",
        },
    }


def write(tmp: pathlib.Path, exp: dict[str, Any]) -> tuple[pathlib.Path, pathlib.Path]:
    e, p = tmp / "run.json", tmp / "payload.json"
    e.write_text(json.dumps(exp))
    p.write_text(PAYLOAD)
    return e, p


def test_attach_changes_only_the_three_members(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export())
    attach(e, p, force=False)
    assert p.read_text() == (
        "{\n"
        '    "model":   "qwen3-235b",  "gpuPowerWatts": [55.8, 53.8],\n'
        '  "nested": {"a": [1, 2,   3], "notes": "not the top-level one"},\n'
        '  "peakVramGb": 68.0,\n'
        '  "tokS": 76.0,\n'
        '    "notes": "Measured by sparkwatch"\n'
        "}\n"
    )


def test_attach_into_an_empty_and_a_compact_payload() -> None:
    values = {"gpuPowerWatts": [1.0], "notes": "n"}
    assert json.loads(attach_text("{}", values, "p")) == values
    assert attach_text('{"a":1}', values, "p") == '{"a":1, "gpuPowerWatts": [1.0], "notes": "n"}'


@pytest.mark.parametrize(
    ("exp", "message"),
    [
        (export(["ok", "incomplete"]), "1 window(s) are not ok (e.g. w1: incomplete, coverage 0.5)"),
        (export(watts=[55.0, None]), "gpuPowerWatts [55.0, None] is not a list of values in (0, 10000]"),
        ({"schema": "other/1"}, "not a sparkwatch run export"),
    ],
)
def test_refusals_leave_the_payload_untouched(
    tmp_path: pathlib.Path, exp: dict[str, Any], message: str
) -> None:
    e, p = write(tmp_path, exp)
    with pytest.raises(AttachError, match=re.escape(message)):
        attach(e, p, force=False)
    assert p.read_text() == PAYLOAD


def test_crlf_mode_and_the_authors_notes_survive_and_a_reattach_replaces_only_ours(
    tmp_path: pathlib.Path,
) -> None:
    e, p = write(tmp_path, export())
    p.write_bytes(b'{\r\n  "model": "m",\r\n  "notes": "TP4, driver 580"\r\n}\r\n')
    p.chmod(0o600)
    attach(e, p, force=False)
    attach(e, p, force=False)  # twice: the second replaces our part, it does not append again
    assert p.read_bytes() == (
        b'{\r\n  "model": "m",\r\n  "notes": "TP4, driver 580\\n\\nMeasured by sparkwatch",\r\n'
        b'  "gpuPowerWatts": [55.8, 53.8],\r\n  "peakVramGb": 68.0\r\n}\r\n'
    )
    assert p.stat().st_mode & 0o777 == 0o600


def test_unknown_peak_memory_needs_force(tmp_path: pathlib.Path) -> None:
    exp = export()
    exp["lmx"]["peakVramGb"] = None
    e, p = write(tmp_path, exp)
    with pytest.raises(AttachError, match="peak memory is unknown"):
        attach(e, p, force=False)
    attach(e, p, force=True)
    assert json.loads(p.read_text())["peakVramGb"] is None  # the payload's own value, untouched


def test_force_attaches_despite_windows_not_ok_and_the_cli_says_one_line(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export(["low_confidence"]))
    cli = [sys.executable, "-m", "sparkwatch", "attach", str(e), "--lmx", str(p)]
    refused = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--force" in refused.stderr
    forced = subprocess.run([*cli, "--force"], capture_output=True, text=True, timeout=60)
    assert forced.returncode == 0, forced.stderr
    assert json.loads(p.read_text())["gpuPowerWatts"] == [55.8, 53.8]


def test_a_malformed_payload_is_refused(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export())
    p.write_text('{"a": 1,, "b": 2}')
    with pytest.raises(AttachError, match=r"payload\.json: not valid JSON"):
        attach(e, p, force=False)
    assert p.read_text() == '{"a": 1,, "b": 2}'


def gb10(memory_gb: float = 121.7, family: str = "GB10") -> dict[str, Any]:
    lmx = {
        "hwClass": "UNIFIED",
        "chipVendor": "NVIDIA",
        "chipFamily": family,
        "chipVariant": "DGX Spark",
        "unifiedMemoryGb": memory_gb,
        "cpu": "Cortex-X925 + Cortex-A725 (20 cores)",
        "ramGb": memory_gb,
        "os": "Ubuntu 24.04.3 LTS (kernel 6.11.0-1016-nvidia)",
        "driverVersion": "580.95.05",
    }
    return {"node": "n", "hardware": {"lmx": lmx}}


def test_cluster_hardware_sums_memory_and_keeps_what_nodes_agree_on() -> None:
    hw = cluster_hardware([gb10() for _ in range(4)])
    assert hw["hwClass"] == "UNIFIED" and hw["chipFamily"] == "GB10"
    assert hw["unifiedMemoryGb"] == pytest.approx(486.8) and hw["ramGb"] == pytest.approx(486.8)
    assert hw["os"] == "Ubuntu 24.04.3 LTS (kernel 6.11.0-1016-nvidia)"


def test_cluster_hardware_refuses_mixed_chips_and_silent_nodes() -> None:
    with pytest.raises(HardwareError, match="nodes differ in chipFamily: GB10, GH200"):
        cluster_hardware([gb10(), gb10(family="GH200")])
    with pytest.raises(HardwareError, match="node quiet: no hardware report: link down"):
        cluster_hardware([gb10(), {"node": "quiet", "hardware": None, "error": "link down"}])
