"""lmx attach (only three members change, byte for byte elsewhere; refusals change nothing), its lmx CLI
flags, lmx's GiB arithmetic, and the cluster hardware record."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from helpers.attachable import NOTE, attachable_export, sealed
from helpers.synthetic_run import synthetic_export
from sparkwatch.commands.attach import (
    OUR_PARAGRAPH,
    AttachError,
    attach,
    attach_text,
    export_flags,
    merged_notes,
)
from sparkwatch.commands.export_file import ExportFileError
from sparkwatch.commands.hardware import HardwareError, cluster_hardware
from sparkwatch_agent.shared.units import GIB, lmx_gb, round1

PAYLOAD = """{
    "model":   "qwen3-235b",  "gpuPowerWatts": [],
  "nested": {"a": [1, 2,   3], "notes": "not the top-level one"},
  "peakVramGb": null,
  "tokS": 76.0
}
"""


def export(
    verdicts: list[str] | None = None, watts: list[float | None] | None = None, peak_bytes: int | None = None
) -> dict[str, Any]:
    watts = [55.8, 53.8] if watts is None else watts
    peak = 68 * GIB if peak_bytes is None else peak_bytes
    return attachable_export(watts, verdicts or ["ok", "ok"], peak)


def notes_of(export_file: pathlib.Path) -> str:
    """The lmx notes an export file holds (its digest quoted: ``sealed``)."""
    notes: str = json.loads(export_file.read_text())["lmx"]["notes"]
    return notes


def write(tmp: pathlib.Path, exp: Any) -> tuple[pathlib.Path, pathlib.Path]:
    """The export (its notes quoting its digest, as it was set: ``sealed``) and the payload, written."""
    e, p = tmp / "run.json", tmp / "payload.json"
    e.write_text(json.dumps(sealed(exp) if isinstance(exp, dict) and "lmx" in exp else exp))
    p.write_text(PAYLOAD)
    return e, p


def test_attach_changes_only_the_three_members(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export())
    note = notes_of(e)
    attach(e, p, force=False)
    assert p.read_text() == (
        "{\n"
        '    "model":   "qwen3-235b",  "gpuPowerWatts": [55.8, 53.8],\n'
        '  "nested": {"a": [1, 2,   3], "notes": "not the top-level one"},\n'
        '  "peakVramGb": 68.0,\n'
        '  "tokS": 76.0,\n'
        f'    "notes": "{note}"\n'
        "}\n"
    )


def test_attach_into_an_empty_and_a_compact_payload() -> None:
    values = {"gpuPowerWatts": [1.0], "notes": "n"}
    assert json.loads(attach_text("{}", values, "p")) == values
    assert attach_text('{"a":1}', values, "p") == '{"a":1, "gpuPowerWatts": [1.0], "notes": "n"}'


@pytest.mark.parametrize(
    ("exp", "message"),
    [
        (
            export(["ok", "incomplete"]),
            "the measurement is not sound (1 timed window(s) not ok (w1); w1: incomplete, coverage 0.5);"
            " pass --force",
        ),
        (
            export(watts=[55.0, None]),
            "node spark-2 (GPU GPU-1, gpuPowerWatts[1]) has no measured GPU power:"
            " no interval with util >= 0.5",
        ),
        (
            export(watts=[0.0, 55.0]),
            "node spark-1 (GPU GPU-0, gpuPowerWatts[0]) is 0.0 W, not a power in (0,",
        ),
    ],
)
def test_refusals_leave_the_payload_untouched(
    tmp_path: pathlib.Path, exp: dict[str, Any], message: str
) -> None:
    e, p = write(tmp_path, exp)
    with pytest.raises(AttachError, match=re.escape(message)):
        attach(e, p, force=False)
    assert p.read_text() == PAYLOAD


@pytest.mark.parametrize(
    ("exp", "message"),
    [
        ({"schema": "other/1"}, "is not a sparkwatch.run/1 export (schema: 'other/1')"),
        ([export()], "is not a sparkwatch.run/1 export (an array, not a JSON object)"),
        ({"a": 1}, "is not a sparkwatch.run/1 export (it has no 'schema')"),
        (
            {**export(), "nodes": 5},
            "is not a valid sparkwatch.run/1 export: at nodes: 5 is not of type 'array'",
        ),
        (
            {**export(), "totals": [1]},
            "is not a valid sparkwatch.run/1 export: at totals: [1] is not of type",
        ),
    ],
)
def test_an_export_file_of_another_shape_is_one_line_and_changes_nothing(
    tmp_path: pathlib.Path, exp: Any, message: str
) -> None:
    """attach reads its export as report does (schema checked): a file of another shape is refused before
    any of its fields is read (it used to end in a TypeError from ``nodes`` as a number)."""
    e, p = write(tmp_path, exp)
    for act in (lambda: attach(e, p, force=True), lambda: export_flags(e, force=True)):
        with pytest.raises(ExportFileError, match=re.escape(message)):
            act()
    assert p.read_text() == PAYLOAD


def test_crlf_mode_and_the_authors_notes_survive_and_a_reattach_replaces_only_ours(
    tmp_path: pathlib.Path,
) -> None:
    e, p = write(tmp_path, export())
    note = notes_of(e)
    p.write_bytes(b'{\r\n  "model": "m",\r\n  "notes": "TP4, driver 580"\r\n}\r\n')
    p.chmod(0o600)
    attach(e, p, force=False)
    attach(e, p, force=False)  # twice: the second replaces our part, it does not append again
    assert p.read_bytes() == (
        b'{\r\n  "model": "m",\r\n  "notes": "TP4, driver 580\\n\\n' + note.encode() + b'",\r\n'
        b'  "gpuPowerWatts": [55.8, 53.8],\r\n  "peakVramGb": 68.0\r\n}\r\n'
    )
    assert p.stat().st_mode & 0o777 == 0o600


def test_a_payload_with_a_byte_order_mark_is_edited_and_keeps_it(tmp_path: pathlib.Path) -> None:
    """A Windows editor's BOM was refused with Python's own hint ("decode using utf-8-sig")."""
    e, p = write(tmp_path, export())
    p.write_bytes(b'\xef\xbb\xbf{"hfId": "m"}')
    attach(e, p, force=False)
    raw = p.read_bytes()
    assert raw.startswith(b'\xef\xbb\xbf{"hfId": "m", "gpuPowerWatts": [55.8, 53.8]'), raw[:80]
    assert json.loads(raw.decode("utf-8-sig"))["peakVramGb"] == 68.0


def test_unknown_peak_memory_needs_force(tmp_path: pathlib.Path) -> None:
    exp = export()
    exp["lmx"]["peakVramGb"] = exp["totals"]["memory_used_bytes_peak_sum"] = None
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


def test_attach_judges_the_measurement_as_run_strict_does(tmp_path: pathlib.Path) -> None:
    """A warm-up window the figures leave out no longer blocks attach (every window was judged, so a cold
    first request refused a sound export), while one GPU listed under two nodes (its watts counted twice),
    which attach took, is refused: the same verdict as `run --strict` (commands.quality)."""
    warm = export(["incomplete", "ok"])
    warm["windows"][0]["phase"] = "warmup"
    warm["windows"][0]["in_scope"] = False
    e, p = write(tmp_path, warm)
    assert attach(e, p, force=False)["gpuPowerWatts"] == [55.8, 53.8]
    twice = export()
    twice["nodes"][1]["gpus"][0]["uuid"] = twice["nodes"][0]["gpus"][0]["uuid"]
    e, p = write(tmp_path, twice)
    with pytest.raises(AttachError, match=r"not sound \(nodes spark-1 and spark-2 share GPU GPU-0"):
        attach(e, p, force=False)
    assert p.read_text() == PAYLOAD
    out_of_scope = export()
    out_of_scope["windows"][1]["in_scope"] = False  # a timed request the figures lack
    e, p = write(tmp_path, out_of_scope)
    with pytest.raises(AttachError, match=r"1 timed window\(s\) not ok \(w1\); w1: out of scope\)"):
        attach(e, p, force=False)


def test_a_malformed_payload_is_refused(tmp_path: pathlib.Path) -> None:
    """Not JSON, and what Python's json reads but JSON is not (NaN, 1e400 read as inf: they were kept and
    the file rewritten) or cannot hold (nesting past the parser: a RecursionError traceback)."""
    e, p = write(tmp_path, export())
    for text, said in (
        ('{"a": 1,, "b": 2}', "is not JSON (Expecting property name"),
        ('{"x": NaN, "notes": ""}', "contains NaN, not a number JSON allows"),
        ('{"x": 1e400}', "contains 1e400, a number too large to store"),
        ("[" * 100_000 + "]" * 100_000, "is JSON nested too deep to read"),
    ):
        p.write_text(text)
        with pytest.raises(AttachError) as refused:
            attach(e, p, force=False)
        assert str(refused.value).startswith(f"{p} {said}"), refused
        assert p.read_text() == text
    p.write_text("{}")
    e.write_text("[" * 100_000 + "]" * 100_000)  # the export too
    with pytest.raises(ExportFileError, match=r"run\.json is JSON nested too deep to read$"):
        attach(e, p, force=False)
    assert p.read_text() == "{}"


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


def test_cluster_hardware_of_discrete_gpus_has_the_fields_lmx_writes() -> None:
    """Every node's GPUs listed, their count, the first one's name and size, and the total from the summed
    bytes, rounded once (lmx's applyNvidiaSMIHardware: round1(totalVramMb / 1024))."""
    sizes = [80 * GIB + GIB * 6 // 100] * 3  # 80.06 GiB each

    def node(name: str, gpus: list[int]) -> dict[str, Any]:
        facts = [{"name": "NVIDIA H100 80GB HBM3", "memory_total_bytes": b} for b in gpus]
        lmx = {"hwClass": "DISCRETE_GPU", "gpus": [], "cpu": "x", "ramGb": 1.0, "os": "linux"}
        return {"node": name, "hardware": {"lmx": lmx, "gpus": facts, "memory_total_bytes": GIB}}

    hw = cluster_hardware([node("a", sizes[:2]), node("b", sizes[2:])])
    assert hw["gpuCount"] == 3 and hw["gpuName"] == "NVIDIA H100 80GB HBM3"
    assert [g["vramGb"] for g in hw["gpus"]] == [80.1, 80.1, 80.1] and hw["vramGb"] == 80.1
    assert hw["totalVramGb"] == 240.2  # 240.18 GiB rounded once; the rounded figures would sum to 240.3


def test_cluster_hardware_refuses_mixed_chips_and_silent_nodes() -> None:
    other = {**gb10(family="GH200"), "node": "m"}
    with pytest.raises(HardwareError, match=r"nodes differ in chipFamily: GB10 \(n\), GH200 \(m\)$"):
        cluster_hardware([gb10(), other])
    with pytest.raises(HardwareError, match="node quiet: no hardware report: link down"):
        cluster_hardware([gb10(), {"node": "quiet", "hardware": None, "error": "link down"}])
    down = gb10()  # its driver not loaded when it said hello: the class unknown (it said CPU_ONLY)
    down.update(node="d", gpu_reason="DRIVER_NOT_LOADED: nvmlInit failed")
    down["hardware"]["lmx"] = {**down["hardware"]["lmx"], "hwClass": None}
    with pytest.raises(
        HardwareError,
        match=r"^node d: hardware class unknown, no GPU read: DRIVER_NOT_LOADED: nvmlInit failed$",
    ):
        cluster_hardware([gb10(), down])


def test_cluster_hardware_refuses_one_agent_listed_twice() -> None:
    """Two nodes.toml entries that reach one agent (a bad-input sweep: 238.4 GB for one 119.2 GB machine,
    exit 0, while `nodes check` said so): refused as `nodes check` finds it, by the agent's boot id."""
    a, b = ({**gb10(), "node": name, "boot_id": "boot-1"} for name in ("a", "b"))
    with pytest.raises(
        HardwareError, match=r"^nodes a and b share agent boot id boot-1: one agent listed twice"
    ):
        cluster_hardware([a, b])
    assert cluster_hardware([a, {**b, "boot_id": "boot-2"}])["unifiedMemoryGb"] == pytest.approx(243.4)


# ---- lmx's arithmetic: "Gb" is GiB, rounded by round1 ----


def test_round1_rounds_half_away_from_zero_as_lmx_does_where_python_round_does_not() -> None:
    assert (round1(55.65), round(55.65, 1)) == (55.7, 55.6)  # 55.65 * 10 is 556.5 in floats
    assert (round1(0.25), round(0.25, 1)) == (0.3, 0.2)
    assert round1(-0.25) == -0.3 and round1(121.64) == 121.6
    # bytes / 1024**3, never / 1e9: a simulated GB10's 128 000 000 000 bytes are 119.2, not 128.0
    assert lmx_gb(128_000_000_000) == 119.2
    assert lmx_gb(146_028_888_064) == 136.0  # the 4-node demo's summed peak (146.0 if it were GB)


def test_peak_memory_is_the_exports_summed_bytes_in_lmx_gib(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export(peak_bytes=68 * GIB + GIB // 4))  # 68.25 GiB: round() says 68.2
    assert attach(e, p, force=False)["peakVramGb"] == 68.3
    assert json.loads(p.read_text())["peakVramGb"] == 68.3


def test_a_payload_wrapped_as_lmx_saves_runs_is_edited_inside(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export())
    note = notes_of(e)
    p.write_text(
        '{\n  "payload": {\n    "hfId": "Qwen/Qwen3-8B",\n    "notes": "TP4",\n    "peakVramGb": 1\n  },\n'
        '  "notes": "the wrapper\'s own"\n}\n'
    )
    attach(e, p, force=False)
    assert p.read_text() == (
        '{\n  "payload": {\n    "hfId": "Qwen/Qwen3-8B",\n'
        f'    "notes": "TP4\\n\\n{note}",\n    "peakVramGb": 68.0,\n'
        '    "gpuPowerWatts": [55.8, 53.8]\n  },\n'
        '  "notes": "the wrapper\'s own"\n}\n'
    )


def test_lmx_flags_are_the_values_attach_writes(tmp_path: pathlib.Path) -> None:
    e, p = write(tmp_path, export(peak_bytes=68 * GIB + GIB // 4))
    flags = export_flags(e, force=False)
    assert flags == "--gpu-power-watts 55.8,53.8 --peak-vram-gb 68.3"
    attach(e, p, force=False)
    written = json.loads(p.read_text())
    watts = ",".join(map(str, written["gpuPowerWatts"]))
    assert flags == f"--gpu-power-watts {watts} --peak-vram-gb {written['peakVramGb']}"


def test_lmx_flags_refuse_what_attach_refuses_and_never_print_a_zero(tmp_path: pathlib.Path) -> None:
    e, _ = write(tmp_path, export(watts=[55.8, None]))
    with pytest.raises(AttachError, match=r"node spark-2 \(GPU GPU-1, gpuPowerWatts\[1\]\) has no measured"):
        export_flags(e, force=True)  # --force never makes up a power
    e, _ = write(tmp_path, export(["ok", "incomplete"]))
    with pytest.raises(AttachError, match="pass --force"):
        export_flags(e, force=False)
    assert export_flags(e, force=True) == "--gpu-power-watts 55.8,53.8 --peak-vram-gb 68.0"
    exp = export()
    exp["lmx"]["peakVramGb"] = exp["totals"]["memory_used_bytes_peak_sum"] = None
    e, _ = write(tmp_path, exp)
    assert export_flags(e, force=True) == "--gpu-power-watts 55.8,53.8"  # no made-up peak either


def test_watts_that_do_not_match_the_exports_gpus_are_refused(tmp_path: pathlib.Path) -> None:
    exp = export()
    exp["lmx"]["gpuPowerWatts"] = [55.8]
    e, p = write(tmp_path, exp)
    with pytest.raises(AttachError, match=r"does not list one value per GPU of nodes\[\]\.gpus \(2 GPUs\)"):
        attach(e, p, force=True)
    assert p.read_text() == PAYLOAD


def test_cluster_memory_is_rounded_once_from_the_nodes_bytes() -> None:
    nodes = [gb10() for _ in range(4)]
    for node in nodes:
        node["hardware"]["memory_total_bytes"] = 130_631_430_307  # 121.66 GiB: each node says 121.7
    hw = cluster_hardware(nodes)
    assert hw["unifiedMemoryGb"] == hw["ramGb"] == 486.6  # lmx's round1(total / 1024), not 4 x 121.7


def test_a_reattach_replaces_only_sparkwatchs_paragraph_wherever_it_is() -> None:
    """Only a paragraph that begins as an export's notes do (version, run, digest) is sparkwatch's: an
    author's sentence that says "Measured by sparkwatch", or a paragraph added after ours, is theirs."""
    real = synthetic_export(hours=0.02, nodes=1, windows=2, seed=3)["lmx"]["notes"]
    assert OUR_PARAGRAPH.match(real) and OUR_PARAGRAPH.match(NOTE)
    theirs = "Power was Measured by sparkwatch 0.0.9 last week: 60 W. Also a wall meter read 90 W."
    assert merged_notes(theirs, NOTE, "p") == f"{theirs}\n\n{NOTE}"
    old = NOTE.replace("5" * 64, "a" * 64)
    later = f"TP4\r\n\r\n{old}\n\nAdded later by me: fans at 80 %.\nTwo lines.\n\n{old}"
    assert (
        merged_notes(later, NOTE, "p") == f"TP4\r\n\r\n{NOTE}\n\nAdded later by me: fans at 80 %.\nTwo lines."
    )
    assert merged_notes(f"{old}\n\nmine", NOTE, "p") == f"{NOTE}\n\nmine"
    assert merged_notes(merged_notes(theirs, NOTE, "p"), NOTE, "p") == f"{theirs}\n\n{NOTE}"
    too_long = rf"^p: its notes with sparkwatch's \({len(NOTE)} characters\) would be {1952 + len(NOTE)} "
    with pytest.raises(AttachError, match=too_long + "characters, over the 2000 "):
        merged_notes("x" * 1950, NOTE, "p")


@pytest.mark.parametrize(
    ("payload", "force", "says"),
    [
        ('{"benchmarks": [{"id": "b1"}], "metadata": {}}', False, "not an lmx run payload"),  # guidellm's
        ('{"schema": "sparkwatch.run/1", "nodes": []}', True, "is a sparkwatch document (sparkwatch.run/1)"),
        ('{"payload": {"benchmarks": []}}', False, "not an lmx run payload"),
    ],
)
def test_a_file_that_is_no_lmx_payload_is_not_edited(
    tmp_path: pathlib.Path, payload: str, force: bool, says: str
) -> None:
    """Any JSON object was taken for a payload and edited in place: a harness's results, or another run's
    export with the arguments swapped. An export is refused even with --force; an object without any lmx
    payload member (hfId, engineName, benchmarkMode, tokSOut, outputTokens) unless forced."""
    e, p = write(tmp_path, export())
    p.write_text(payload)
    with pytest.raises(AttachError, match=re.escape(says)):
        attach(e, p, force=force)
    assert p.read_text() == payload
    if not force:  # the user who knows better
        attach(e, p, force=True)
        written = json.loads(p.read_text())
        assert written.get("payload", written)["gpuPowerWatts"] == [55.8, 53.8]


@pytest.mark.parametrize(
    ("gated", "said"),
    [
        (None, "but the GPU's gated mean (nodes[].gpus[].power_w_gated_mean) is 54.03 W"),  # lmx alone
        (1.0, "the export was edited since it was made"),  # the node's figure too: its digest is not quoted
    ],
)
def test_an_lmx_power_that_is_not_the_gpus_measured_one_is_refused(
    tmp_path: pathlib.Path, gated: float | None, said: str
) -> None:
    """An export edited by hand (``lmx.gpuPowerWatts`` set to 1.0 W) gave those figures as lmx flags and
    into the payload, while the report of the same file said the digest no longer matched. The lmx part
    is not in the digest, so its watts are held to the nodes' figures, which are."""
    exp = export(watts=[54.03, 53.8])
    exp["lmx"]["gpuPowerWatts"] = [54.0, 53.8]  # one decimal, as the export writes it: taken
    e, p = write(tmp_path, exp)
    assert export_flags(e, force=False) == "--gpu-power-watts 54.0,53.8 --peak-vram-gb 68.0"
    exp["lmx"]["gpuPowerWatts"] = [1.0, 53.8]
    if gated is not None:
        exp["nodes"][0]["gpus"][0]["power_w_gated_mean"] = gated
    e.write_text(json.dumps(exp))
    for make in (lambda: export_flags(e, force=True), lambda: attach(e, p, force=True)):
        with pytest.raises(AttachError, match=re.escape(said)):
            make()
    assert p.read_text() == PAYLOAD


def test_a_lone_surrogate_in_an_export_is_one_line_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    """The schema takes any string, and a lone \\ud800 passed it: `report` then failed writing its page
    with a traceback, leaving staged figures behind. An emoji's escaped pair is text, and is read."""
    fine = export()
    fine["run"]["name"] = "bench \U0001f600"  # json writes it as the pair \ud83d\ude00
    e, p = write(tmp_path, fine)
    assert "\\ud83d\\ude00" in e.read_text()
    export_flags(e, force=True)
    e, p = write(tmp_path, {**fine, "run": {**fine["run"], "name": "bench \ud800"}})
    said = "holds a \\uD800–\\uDFFF escape without the other half of its surrogate pair"
    for act in (lambda: attach(e, p, force=True), lambda: export_flags(e, force=True)):
        with pytest.raises(ExportFileError, match=re.escape(f"{e} {said}")):
            act()
    assert p.read_text() == PAYLOAD
