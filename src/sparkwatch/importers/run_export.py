"""A ``sparkwatch.run/1`` export → its windows, as the run took them: a coordinator's run measured again
elsewhere (`export --prometheus` over a fleet's engine, with the windows the coordinator's proxy or imports
took; `sparkwatch runs export ID -o run.json` writes the file).

Each window keeps its own fields; its ``source`` is this file's (``format`` export, ``run_id``) with the
exported window's own source under ``taken`` (where it came from: the proxy, a harness file) and its notes
of a request cut short on top, so a failed request stays unmeasured. The figures the export computed for it
(``nodes``, ``verdict``, …) are left behind, to be computed again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from sparkwatch.core.windows import (
    CUT_SHORT,
    OPTIONAL_INT_FIELDS,
    OPTIONAL_STR_FIELDS,
    REQUIRED_FIELDS,
    Window,
)
from sparkwatch.defaults import OPEN_RUN_NOTE, SCOPES, ScopeKind, check_phases, command_outcome
from sparkwatch.importers.common import (
    ClockAnchor,
    ImportFormatError,
    Problem,
    as_int,
    as_list,
    as_number,
    as_object,
    as_str,
    base_source,
    checked,
    looks_like,
    read_json,
)

FORMAT = "export"
MAPPING: dict[str, object] = {"kind": "identity", "rule": "the exported run's windows as it stored them"}
SCHEMA = "sparkwatch.run/1"
_INTS = frozenset({"t_start_ns", "t_end_ns", *OPTIONAL_INT_FIELDS})


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> list[Window]:
    return windows_of(export_of(read_json(path)), path.name)


def windows_of(data: dict[str, Any], label: str) -> list[Window]:
    """The windows of an export (``export_of``'s), ``label`` naming where it came from: a file's name, or
    the coordinator's route that answered it."""
    run_id = as_str(as_object(data.get("run"), "run").get("id"), "run.id")
    windows = []
    for index, item in enumerate(as_list(data.get("windows"), "windows")):
        where = f"windows[{index}]"
        windows.append(_window(as_object(item, where), where, run_id, label))
    return windows


@dataclass(frozen=True, slots=True)
class ExportedRun:
    """What the exported run was measured with: its span (``t_end_ns`` None: still open when exported), gate
    threshold, scope and phases, and the command it wrapped. Measured again from elsewhere, these are the
    defaults, as `export --db` takes a stored run's (and the command is the run's again)."""

    id: str
    name: str
    t_start_ns: int
    t_end_ns: int | None
    gate_threshold: float
    scope: ScopeKind
    phases: tuple[str, ...]
    command: dict[str, Any] | None = None  # the benchmark's argv and exit code, where the run knew them
    #: the nodes the run measured (none known: a run stored before it kept them), measured again from
    #: elsewhere by default: a fleet's engine holds other nodes' series over the same span
    nodes: tuple[str, ...] = ()


def exported_run(path: Path) -> ExportedRun:
    """The run of the export in ``path``; ImportFormatError (one line naming the file) if it is not one."""
    try:
        return run_of(export_of(read_json(path)))
    except Problem as problem:
        raise ImportFormatError(str(path), str(problem)) from None


def run_of(data: dict[str, Any]) -> ExportedRun:
    """The run of an export (``export_of``'s); a Problem says what is wrong with it. A run exported while
    it was open (its notes say so) has no end: the export's time stood in for it there."""
    run, method = as_object(data.get("run"), "run"), as_object(data.get("method"), "method")
    gate = as_object(method.get("gate"), "method.gate")
    settings = (gate.get("threshold_ratio"), method.get("scope"), method.get("phases"))
    exported = _run(run, settings, ("method.gate.threshold_ratio", "method.scope", "method.phases"))
    entries = as_list(data.get("nodes"), "nodes")
    nodes = tuple(as_str(as_object(n, "nodes[]").get("node"), "nodes[].node") for n in entries)
    notes = run.get("notes")
    opened = OPEN_RUN_NOTE.partition(":")[0] + ":"  # its first word: a later wording still reads as open
    open_run = isinstance(notes, list) and any(isinstance(n, str) and n.startswith(opened) for n in notes)
    return replace(exported, nodes=nodes, t_end_ns=None if open_run else exported.t_end_ns)


def stored_run_of(data: dict[str, Any]) -> ExportedRun:
    """The run of a coordinator's ``GET /v1/runs/{id}/windows`` answer, whose ``run`` is the run as stored
    (its gate threshold, scope and phases beside its span); a Problem says what is wrong with it."""
    run = as_object(data.get("run"), "run")
    settings = (run.get("gate_threshold"), run.get("scope"), run.get("phases"))
    stored = _run(run, settings, ("run.gate_threshold", "run.scope", "run.phases"))
    listed = run.get("nodes")  # null: a run stored before runs kept their nodes
    nodes = () if listed is None else tuple(as_str(n, "run.nodes[]") for n in as_list(listed, "run.nodes"))
    return replace(stored, nodes=nodes)


def _run(run: dict[str, Any], settings: tuple[Any, Any, Any], names: tuple[str, str, str]) -> ExportedRun:
    """The run's span from ``run``, and its gate threshold, scope and phases from ``settings`` (read from
    where ``names`` say, for the Problem that says which is wrong)."""
    threshold_name, scope_name, phases_name = names
    threshold = as_number(settings[0], threshold_name)
    scope, phases = settings[1], as_list(settings[2], phases_name)
    if scope not in SCOPES:
        raise Problem(f"{scope_name} must be one of {', '.join(SCOPES)}, found {scope!r:.40}")
    if not 0 <= threshold <= 1:
        raise Problem(f"{threshold_name} must be from 0 to 1, found {threshold}")
    try:
        checked_phases = tuple(check_phases([as_str(p, f"{phases_name}[]") for p in phases]))
    except ValueError as exc:
        raise Problem(f"{phases_name}: {exc}") from None
    end = run.get("t_end_ns")
    return ExportedRun(
        id=as_str(run.get("id"), "run.id"),
        name=as_str(run.get("name"), "run.name"),
        t_start_ns=as_int(run.get("t_start_ns"), "run.t_start_ns"),
        t_end_ns=None if end is None else as_int(end, "run.t_end_ns"),
        gate_threshold=threshold,
        scope=cast(ScopeKind, scope),
        phases=checked_phases,
        command=command_outcome(run.get("command")),
    )


def export_of(data: Any) -> dict[str, Any]:
    """``data`` if it is a ``sparkwatch.run/1`` export, else a Problem saying what it is."""
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(schema, str) or not schema.startswith("sparkwatch.run/"):
        raise Problem("not a sparkwatch export: no 'schema' of sparkwatch.run/1" + looks_like(data))
    if schema != SCHEMA:
        raise Problem(f"an export of schema {schema!r:.40}; this sparkwatch reads {SCHEMA}")
    return data  # type: ignore[no-any-return]


def _window(item: dict[str, Any], where: str, run_id: str, label: str) -> Window:
    for key in REQUIRED_FIELDS:
        if item.get(key) is None:
            raise Problem(f"{where}: missing {key}")
    fields: dict[str, Any] = {}
    for key in (*REQUIRED_FIELDS, *OPTIONAL_INT_FIELDS, *OPTIONAL_STR_FIELDS):
        value = item.get(key)
        if value is not None:
            fields[key] = as_int(value, f"{where}.{key}") if key in _INTS else as_str(value, f"{where}.{key}")
    taken = as_object(item.get("source", {}), f"{where}.source")
    source = base_source(FORMAT, Path(label), "unix_ns", MAPPING, 1e-9)
    source["file"] = label  # a file's name, or the route that answered (a URL is no path)
    source.update(run_id=run_id, taken=taken)
    source.update({note: True for note in CUT_SHORT if taken.get(note) is True})  # still not measured
    return checked(where, Window(**fields, source=source))
