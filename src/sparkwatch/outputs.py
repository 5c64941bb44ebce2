"""Files sparkwatch writes for people (exports, hardware.json, edited lmx payloads): whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson


class OutputError(Exception):
    """An output path that cannot be written; one line naming it and why."""


def check_output(path: Path) -> None:
    """Refuse before anything starts when a file could not be written at the end."""
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {path}: folder {folder} is not writable")
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder")


def write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write beside ``path`` and rename over it, so a reader never sees half a file; ``mode`` (permission
    bits) is set before the rename. The temporary file is removed when anything fails."""
    tmp = path.with_name(f".{path.name}.sparkwatch-tmp")
    try:
        tmp.write_bytes(data)
        if mode is not None:
            os.chmod(tmp, mode)
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, text.encode())


def export_text(export: dict[str, Any]) -> str:
    """The export as people read it: indented, except its ``series`` block (the plot data: tens of
    thousands of numbers), which stays on one line at the end instead of one number per line (2.6× the
    bytes). orjson writes it (json's indenting encoder is pure Python: 5 s for an 8 h run's 10 000
    windows); an export with a non-ASCII character (a run's name) is written by json, escaped as before."""
    body = {k: v for k, v in export.items() if k != "series"}
    text = orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
    if not text.isascii():
        text = json.dumps(body, indent=2)
    series = export.get("series")
    if series is None or text == "{}":
        return text + "\n"
    plot = orjson.dumps(series, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return f'{text[:-2]},\n  "series": {plot}\n}}\n'


def write_export(path: Path, export: dict[str, Any]) -> None:
    write_text_atomically(path, export_text(export))
