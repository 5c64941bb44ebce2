"""`sparkwatch attach` as users run it: `--lmx-flags` on a real demo export prints the flags for lmx's own
CLI (the values `--lmx` writes), writes nothing, and refuses in one line."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from helpers.attachable import attachable_export
from helpers.cli import sparkwatch
from sparkwatch_agent.shared.units import lmx_gb


def files_in(folder: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_lmx_flags_of_a_demo_export_are_what_attach_writes(tmp_path: pathlib.Path) -> None:
    run = tmp_path / "run.json"
    quick = ("--nodes", "2", "--max-tokens", "64", "--tokens-per-s", "200")  # 0.3 s windows: 7 s, not 20
    demo = sparkwatch("demo", *quick, "-o", str(run), timeout=120)
    assert demo.returncode == 0, demo.stderr
    export = json.loads(run.read_text())
    before = files_in(tmp_path)

    result = sparkwatch("attach", "--lmx-flags", str(run), timeout=60)
    assert result.returncode == 0, result.stderr
    assert files_in(tmp_path) == before  # nothing written
    watts = [g["power_w_gated_mean"] for n in export["nodes"] for g in n["gpus"]]
    assert len(watts) == 2 and all(w > 0 for w in watts)
    peak = lmx_gb(export["totals"]["memory_used_bytes_peak_sum"])  # GiB, like lmx
    assert result.stdout == (
        f"--gpu-power-watts {','.join(str(w) for w in export['lmx']['gpuPowerWatts'])}"
        f" --peak-vram-gb {peak}\n"
    )

    payload = tmp_path / "payload.json"
    payload.write_text('{\n  "payload": {\n    "hfId": "Qwen/Qwen3-8B",\n    "tokSOut": 76.0\n  }\n}\n')
    attached = sparkwatch("attach", str(run), "--lmx", str(payload), timeout=60)
    assert attached.returncode == 0, attached.stderr
    written = json.loads(payload.read_text())["payload"]
    flags = result.stdout.split()
    assert flags[1] == ",".join(json.dumps(w) for w in written["gpuPowerWatts"])
    assert flags[3] == json.dumps(written["peakVramGb"])
    said = ", ".join(json.dumps(w) for w in written["gpuPowerWatts"])  # its line shows what it wrote
    assert attached.stdout == (
        f"attached to {payload}: gpuPowerWatts [{said}], peakVramGb {json.dumps(written['peakVramGb'])}\n"
    )


def export_with(watts: list[float | None], verdict: str = "ok") -> dict[str, Any]:
    return attachable_export(watts, [verdict], 146_028_888_064, 136.0)


def refusal(result: Any) -> str:
    assert result.returncode == 2 and result.stdout == "", (result.returncode, result.stdout)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return str(result.stderr)


def test_lmx_flags_refusals_are_one_line_and_name_the_node(tmp_path: pathlib.Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(export_with([55.7, None])))
    line = refusal(sparkwatch("attach", "--lmx-flags", str(run), "--force", timeout=60))
    assert line.startswith("sparkwatch: error: ") and "node spark-2 (GPU GPU-1" in line

    run.write_text(json.dumps(export_with([55.7, 53.7], verdict="low_confidence")))
    assert "pass --force" in refusal(sparkwatch("attach", "--lmx-flags", str(run), timeout=60))
    forced = sparkwatch("attach", "--lmx-flags", str(run), "--force", timeout=60)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == "--gpu-power-watts 55.7,53.7 --peak-vram-gb 136.0\n"


def test_exactly_one_of_lmx_and_lmx_flags(tmp_path: pathlib.Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(export_with([55.7])))
    neither = sparkwatch("attach", str(run), timeout=60)
    assert neither.returncode == 2 and "one of the arguments --lmx --lmx-flags is required" in neither.stderr
    both = sparkwatch("attach", str(run), "--lmx", str(tmp_path / "p.json"), "--lmx-flags", timeout=60)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    out = sparkwatch("attach", "--lmx-flags", str(run), "-o", str(tmp_path / "x.json"), timeout=60)
    assert out.returncode == 2 and "--lmx-flags prints to stdout" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_attach_with_an_unknown_peak_says_the_payloads_value_was_left(tmp_path: pathlib.Path) -> None:
    exp = attachable_export([55.7, 53.7], peak_bytes=None, peak_gb=None)
    run, payload = tmp_path / "run.json", tmp_path / "payload.json"
    run.write_text(json.dumps(exp))
    payload.write_text('{"peakVramGb": 12.5}\n')
    done = sparkwatch("attach", str(run), "--lmx", str(payload), "--force", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"attached to {payload}: gpuPowerWatts [55.7, 53.7],"
        " peakVramGb left as it was (unknown in the export)\n"
    )
    assert json.loads(payload.read_text())["peakVramGb"] == 12.5


def test_an_output_in_a_missing_folder_is_refused_as_every_command_refuses_it(tmp_path: pathlib.Path) -> None:
    """A new user read `…/p.json: cannot write (No such file or directory)` from attach alone; the others say
    which folder is missing. The payload is left as it was."""
    run, payload = tmp_path / "run.json", tmp_path / "payload.json"
    run.write_text(json.dumps(export_with([55.7])))
    payload.write_text('{"peakVramGb": 12.5}\n')
    target = tmp_path / "nope" / "p.json"
    line = refusal(sparkwatch("attach", str(run), "--lmx", str(payload), "-o", str(target), timeout=60))
    assert f"cannot write {target}: folder {target.parent} does not exist" in line, line
    assert payload.read_text() == '{"peakVramGb": 12.5}\n' and not target.parent.exists()


def test_a_demo_whose_output_cannot_be_written_keeps_its_export_in_the_temporary_folder(
    tmp_path: pathlib.Path,
) -> None:
    """`demo -o /dev/full` ran the whole demo, then threw its export away with the usage error's code 2;
    `run` already kept its export in the temporary folder, and now the demo does too."""
    quick = ("--nodes", "2", "--max-tokens", "64", "--tokens-per-s", "200")
    demo = sparkwatch("demo", *quick, "-o", "/dev/full", timeout=120, env={"TMPDIR": str(tmp_path)})
    spare = tmp_path / "sparkwatch-demo.json"
    assert demo.returncode == 0, demo.stderr
    said = f"sparkwatch: cannot write /dev/full (No space left on device); the export is in {spare}"
    assert said in demo.stderr and f"export written to {spare}" in demo.stderr
    assert json.loads(spare.read_text())["schema"] == "sparkwatch.run/1"
