"""How `run` and `demo` end: the table for people, the measurement's quality in words, and with ``--json``
one JSON object on stdout (the table then goes to stderr), so a script reads the result, not the text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from sparkwatch.commands.quality import Quality
from sparkwatch.commands.summary import summary_table, system_watts
from sparkwatch.report.doubt import export_doubtful_share, share_doubtful

#: The shape of the ``--json`` object (docs/cli.md); bumped when a key changes meaning or goes away (a key
#: added leaves it as it is: a script reads the keys it knows).
OUTCOME_SCHEMA = "sparkwatch.outcome/1"


def outcome_json(
    export: dict[str, Any], quality: Quality, output: Path, exit_code: int, interrupted: bool
) -> dict[str, Any]:
    """The figures a script wants from a finished run, with where the whole export is."""
    command = export["run"].get("command")
    share = export_doubtful_share(export)  # the windows read once
    return {
        "schema": OUTCOME_SCHEMA,
        "run_id": export["run"]["id"],
        "export": str(output),
        "exit_code": exit_code,
        "command_exit_code": None if command is None else command["exit_code"],
        "interrupted": interrupted,
        "quality": quality.to_json(),
        # the table's (and the report's) mark on the power and energy figures, for a script to read
        "figures_doubtful": share_doubtful(share),
        "doubtful_share_ratio": share,
        "nodes": [
            {
                "node": node["node"],
                "power_w_gated_mean": node["power_w"]["gated_mean"],
                "system_power_w_gated_mean": system_watts(node),
                "energy_j": node["energy_j"],
                "memory_used_bytes_peak": node["memory_used_bytes"]["peak"],
                "memory_page_cache_bytes_peak": (node.get("memory_page_cache_bytes") or {}).get("peak"),
                "coverage_ratio": node["samples"]["coverage_ratio"],
            }
            for node in export["nodes"]
        ],
        "totals": export["totals"],
    }


def no_export_json(
    run_id: str, exit_code: int, command_code: int | None, interrupted: bool
) -> dict[str, Any]:
    """``--json``'s object when the run could not be ended or exported: the same keys, nothing measured."""
    return {
        "schema": OUTCOME_SCHEMA,
        "run_id": run_id or None,
        "export": None,
        "exit_code": exit_code,
        "command_exit_code": command_code,
        "interrupted": interrupted,
        "quality": None,
        "figures_doubtful": None,
        "doubtful_share_ratio": None,
        "nodes": [],
        "totals": None,
    }


def quality_line(quality: Quality) -> str:
    """``measurement: …``, marked when the measurement is not sound: the line a table ends with."""
    return f"{'' if quality.sound else 'WARNING: '}measurement: {quality.line()}"


def print_outcome(
    export: dict[str, Any],
    quality: Quality,
    *,
    output: Path,
    exit_code: int,
    interrupted: bool,
    json_out: bool,
    stdout: TextIO,
    stderr: TextIO,
    notes: Sequence[str] = (),
) -> None:
    """The table and ``notes`` (to stderr under ``--json``), the quality line, and the JSON object."""
    text = stderr if json_out else stdout
    text.write(summary_table(export) + "\n")
    for note in notes:
        text.write(note + "\n")
    text.write(quality_line(quality) + "\n")
    if json_out:
        stdout.write(json.dumps(outcome_json(export, quality, output, exit_code, interrupted)) + "\n")
    stdout.flush()
