"""A run as the ``runs`` table holds it, and its row read back with every column checked.

Why check what the store wrote itself: the file is the user's, and a row edited or damaged outside
sparkwatch (``interval_s = 'abc'``, a gate of 7) would otherwise reach the export as a traceback or as a
figure gated at a threshold no API accepts. A damaged row is refused with one line that names the column.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from sparkwatch.defaults import (
    DEFAULT_PHASES,
    MAX_INTERVAL_S,
    MAX_RUN_NAME_CHARS,
    MIN_INTERVAL_S,
    SCOPES,
    check_phases,
    command_outcome,
)
from sparkwatch.store.row_values import is_integer, shown_value
from sparkwatch.store.tx import Damaged

RUN_COLUMNS = "id, name, t_start_ns, t_end_ns, interval_s, gate_threshold, scope, command, phases"
#: The columns with the nodes the run was opened with (schema 11; a file of an older schema: ``NULL``).
RUN_COLUMNS_NODES = RUN_COLUMNS + ", nodes"


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    name: str
    t_start_ns: int
    t_end_ns: int | None
    interval_s: float
    gate_threshold: float
    scope: str
    command: str | None = None  # JSON: what `sparkwatch run` wrapped (argv, exit code), None otherwise
    phases: tuple[str, ...] = DEFAULT_PHASES  # the window phases the run measures
    nodes: tuple[str, ...] | None = None  # the nodes it was opened with; None: stored before they were kept

    @property
    def open(self) -> bool:
        return self.t_end_ns is None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "t_start_ns": self.t_start_ns,
            "t_end_ns": self.t_end_ns,
            "interval_s": self.interval_s,
            "gate_threshold": self.gate_threshold,
            "scope": self.scope,
            "phases": list(self.phases),
            "open": self.open,
            "command": json.loads(self.command) if self.command else None,
            # the nodes its export measures (a node added or removed since changes nothing of it)
            "nodes": list(self.nodes) if self.nodes is not None else None,
        }


def run_row(row: tuple[Any, ...]) -> RunRow:
    """A ``runs`` row (columns as ``RUN_COLUMNS``, or ``RUN_COLUMNS_NODES``: its nodes checked too, see
    :func:`run_nodes`), checked as the API checks a new run; its phases are stored as a JSON array of names,
    its command as a JSON object."""
    run_id, name, t_start_ns, t_end_ns, interval_s, gate, scope, command, phases, *nodes = row
    try:
        names = json.loads(phases)
    except (TypeError, ValueError):
        names = None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise Damaged(f"run {run_id} has unreadable phases {phases!r}")
    try:  # "Timed": no window's phase, every figure null
        check_phases(tuple(names))
    except ValueError as exc:
        said = shown_value(phases)
        raise Damaged(f"run {run_id} is damaged in the database: phases {said}: {exc}") from None
    problem = _problem(row[:9])
    if problem is not None:
        raise Damaged(f"run {run_id} is damaged in the database: {problem}")
    kept = run_nodes(run_id, nodes[0]) if nodes else None
    return RunRow(
        run_id,
        name,
        t_start_ns,
        t_end_ns,
        interval_s,
        gate,
        scope,
        command,
        tuple(names),
        None if kept is None else tuple(kept),
    )


def run_nodes(run_id: str, stored: Any) -> list[str] | None:
    """A run's ``nodes`` column: a JSON array of distinct node names, or NULL (a run stored before it)."""
    if stored is None:
        return None
    try:
        names = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        names = None
    if names is None or len(set(names)) < len(names):
        shown = shown_value(stored)
        raise Damaged(
            f"run {run_id} is damaged in the database: nodes {shown} is not a JSON array of node names"
        )
    return names


def _problem(row: tuple[Any, ...]) -> str | None:
    """What is wrong with a run row's columns (but its phases), or ``None``."""
    _, name, t_start_ns, t_end_ns, interval_s, gate, scope, command, _ = row
    if not isinstance(name, str) or not 0 < len(name) <= MAX_RUN_NAME_CHARS:
        return f"name {shown_value(name)} is not a name of 1-{MAX_RUN_NAME_CHARS} characters"
    if not is_integer(t_start_ns):
        return f"t_start_ns {shown_value(t_start_ns)} is not an integer"
    if t_end_ns is not None and (not is_integer(t_end_ns) or t_end_ns < t_start_ns):
        return f"t_end_ns {shown_value(t_end_ns)} is not an integer at or after t_start_ns"
    if not _number(interval_s) or not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        return f"interval_s {shown_value(interval_s)} is not in [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}] seconds"
    if not _number(gate) or not 0 <= gate <= 1:
        return f"gate_threshold {shown_value(gate)} is not a number in [0, 1]"
    if scope not in SCOPES:
        return f"scope {shown_value(scope)} is not one of {', '.join(SCOPES)}"
    if command is not None and not _command(command):
        return f"command {shown_value(command)} is not a JSON object of argv (text) and exit_code (integer)"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _command(text: Any) -> bool:
    """A wrapped command as the API takes it (defaults.command_outcome): what the export's schema requires."""
    try:
        return command_outcome(json.loads(text) if isinstance(text, str) else None) is not None
    except ValueError:
        return False
