"""Reading an export file a command takes as input (`report`, `attach`): JSON without NaN or Infinity,
the ``sparkwatch.run/1`` schema on its structure, a series whose lines are whole; else one line."""

from __future__ import annotations

import re
import reprlib
from pathlib import Path
from typing import Any

import orjson

from sparkwatch.defaults import EXPORT_SCHEMA
from sparkwatch_agent.shared.strict_text import TextFormatError, loads_json
from sparkwatch_agent.shared.user_files import read_file_bytes


class ExportFileError(Exception):
    """An export file that cannot be read as a ``sparkwatch.run/1`` export: one line saying why."""


#: Where a lone surrogate may be: a \uD800–\uDFFF escape (a pair's two halves match too: then checked).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _encodable(export: dict[str, Any]) -> bool:
    """Whether every string of ``export`` is text UTF-8 can carry: a lone surrogate passed the schema and
    made `report` fail writing its page, with a traceback."""
    try:
        orjson.dumps(export)
    except TypeError:
        return False
    return True


def load_export(path: Path) -> dict[str, Any]:
    """The export at ``path`` or a one-line reason: JSON without NaN or Infinity, the ``sparkwatch.run/1``
    schema on its structure (every part, and its first and last ``CHECKED_WINDOWS`` windows: checking all
    10 000 windows of a long run takes jsonschema seconds), and a series whose lines are whole."""
    import jsonschema  # noqa: PLC0415 — only for the commands that read an export file

    from sparkwatch.core.export_schema import run_schema  # noqa: PLC0415

    try:
        raw = read_file_bytes(path)
        export = loads_json(raw)
    except OSError as exc:
        raise ExportFileError(f"cannot read {path}: {exc.strerror}") from None
    except TextFormatError as exc:
        raise ExportFileError(f"{path} {exc}") from None
    if _SURROGATE_ESCAPE.search(raw) and not _encodable(export):
        raise ExportFileError(
            f"{path} holds a \\uD800–\\uDFFF escape without the other half of its surrogate pair: it stands"
            " for no character, and no export of sparkwatch's holds one (was it edited?)"
        )
    if not isinstance(export, dict):  # what JSON calls it: a list read as "schema: 'list'"
        kind = (
            "an array" if isinstance(export, list) else "a string" if isinstance(export, str) else "a value"
        )
        raise ExportFileError(f"{path} is not a {EXPORT_SCHEMA} export ({kind}, not a JSON object)")
    if export.get("schema") != EXPORT_SCHEMA:
        found = export.get("schema")
        said = "it has no 'schema'" if found is None else f"schema: {found!r}"
        raise ExportFileError(f"{path} is not a {EXPORT_SCHEMA} export ({said})")
    schema = run_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(_sample(export)))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        said = _said(error.message, error.instance)
        raise ExportFileError(f"{path} is not a valid {EXPORT_SCHEMA} export: at {where}: {said}")
    for node in (export.get("series") or {}).get("nodes", []):
        for line in node["lines"]:
            if len(line["t_s"]) != len(line["v"]):
                raise ExportFileError(
                    f"{path}: series line {node['node']}/{line['key']} has unequal t_s and v"
                )
    if (problem := _disagreement(export)) is not None:
        raise ExportFileError(f"{path}: {problem}: was it edited?")
    return export


def _disagreement(export: dict[str, Any]) -> str | None:
    """Where the export's parts do not fit together as sparkwatch writes them: the series and every window
    list the nodes of ``nodes[]``, in its order (a report reads them side by side: a node taken out of
    ``nodes[]`` alone labelled each column with the next node's name), and no window ends before it starts."""
    names = [node["node"] for node in export["nodes"]]
    series = export.get("series")
    if series is not None and (listed := [n["node"] for n in series["nodes"]]) != names:
        return f"series.nodes lists {_names(listed)} where nodes[] lists {_names(names)}"
    for n, window in enumerate(export["windows"]):  # past the schema's sample too: no field is trusted
        if not isinstance(window, dict):
            return f"windows[{n}] is not a JSON object"
        said, entries = f"window {window.get('id')!r}", window.get("nodes")
        listed = [e.get("node") for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        if listed != names:
            return f"{said} lists nodes {_names(listed)} where nodes[] lists {_names(names)}"
        start, end = window.get("t_start_ns"), window.get("t_end_ns")
        if isinstance(start, int) and isinstance(end, int) and end < start:
            return f"{said} ends before it starts"
    return None


def _names(names: list[Any]) -> str:
    return reprlib.repr(names) if names else "none"


CHECKED_WINDOWS = 100


def _sample(export: dict[str, Any]) -> dict[str, Any]:
    windows = export.get("windows")
    if isinstance(windows, list) and len(windows) > 2 * CHECKED_WINDOWS:
        return {**export, "windows": windows[:CHECKED_WINDOWS] + windows[-CHECKED_WINDOWS:]}
    return export


def _said(message: str, instance: Any) -> str:
    """jsonschema's message with the value it quotes shortened, so the reason after a long value ("is too
    long") is not the part cut off."""
    quoted = repr(instance)
    if len(quoted) > 60 and quoted in message:
        message = message.replace(quoted, reprlib.repr(instance))
    return message if len(message) <= 200 else message[:199] + "…"
