"""sparkwatch's own plain window file, for any harness without an importer: CSV or JSON, epoch ns integers.

The two spellings carry the same keys (docs/importers.md). Unknown keys are refused rather than ignored:
a misspelt ``t_frist_token_ns`` must not silently import as "no first token".
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import (
    CUT_SHORT,
    OPTIONAL_INT_FIELDS,
    OPTIONAL_STR_FIELDS,
    REQUIRED_FIELDS,
    Window,
)
from sparkwatch.importers.common import (
    ClockAnchor,
    Problem,
    as_int,
    as_list,
    as_object,
    as_str,
    base_source,
    checked,
    looks_like,
    read_json,
    reading,
)
from sparkwatch_agent.shared.strict_text import TextFormatError, cut_short, whole_number

FORMAT = "plain"
#: Why the request did not complete (a source note of core.windows.CUT_SHORT): the proxy's spill file
#: keeps it, so a window that did not complete stays unmeasured when it is imported back.
FAILURE = "failure"
#: The window's own fields (core.windows), all but ``source``, which the importer writes; and ``failure``.
KEYS = (*REQUIRED_FIELDS, *OPTIONAL_INT_FIELDS, *OPTIONAL_STR_FIELDS, FAILURE)
INTS = ("t_start_ns", "t_end_ns", *OPTIONAL_INT_FIELDS)
MAPPING: dict[str, object] = {"kind": "identity", "rule": "Unix epoch ns integers as written"}
#: A JSON file's ``origin`` when the proxy spilled its windows (proxy/spill.py): imported back, they are the
#: proxy's (``source.kind``), so a harness file of the same requests is compared with them too.
PROXY_ORIGIN = "proxy"
#: ... and the ids its windows carry (proxy/proxy.py: ``proxy-<instance>-<arrival>``).
PROXY_ID_PREFIX = "proxy-"
_UNSIGNED = re.compile(r"[0-9]+")


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> Iterator[Window]:
    suffix = path.suffix.lower()
    rows: Iterable[tuple[str, dict[str, Any]]]
    if path.is_dir():
        raise Problem("is a directory, not a file")
    if suffix == ".csv":
        rows = _csv_rows(path)
    elif suffix == ".json":
        data = read_json(path)
        rows = _json_rows(data)
        spilled = data.get("origin") == PROXY_ORIGIN
        clock = _spill_clock(data) if spilled else {}
    else:
        raise Problem(f"plain windows must be a .csv or .json file, not {path.suffix or 'no extension'!r}")
    for where, row in rows:
        window = _window(path, suffix[1:], where, row)
        if suffix == ".json" and spilled:
            if not window.id.startswith(PROXY_ID_PREFIX):  # only the proxy's windows are the proxy's
                raise Problem(
                    f"{where}: id {window.id!r:.80} is no proxy window's, in a file whose origin is"
                    f" {PROXY_ORIGIN!r} (a proxy's spill file; leave origin out for any other)"
                )
            window.source["kind"] = PROXY_ORIGIN
            window.source.update(clock)
        yield window


def _spill_clock(data: dict[str, Any]) -> dict[str, Any]:
    """A spill file's ``clock`` and ``clock_uncertainty_ns`` (proxy/spill.py), for its windows' sources."""
    out: dict[str, Any] = {}
    if "clock" in data:
        out["clock"] = as_str(data["clock"], "clock")
    if "clock_uncertainty_ns" in data:
        out["clock_uncertainty_ns"] = as_int(data["clock_uncertainty_ns"], "clock_uncertainty_ns", minimum=0)
    return out


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Row by row as the file is read; a cell over the csv module's limit (128 KiB) is a Problem."""
    with reading(path, newline="") as handle:
        reader = csv.reader(handle)
        try:
            yield from _csv_table(reader)
        except csv.Error as exc:
            raise Problem(f"CSV line {reader.line_num}: {exc}") from None


def _csv_table(reader: Iterator[list[str]]) -> Iterator[tuple[str, dict[str, Any]]]:
    first = next(reader, None)
    if first is None or not any(cell.strip() for cell in first):
        raise Problem("CSV has no header row")
    header = [cell.strip() for cell in first]
    _check_keys(header, "header")
    if len(set(header)) != len(header):
        raise Problem(f"header names a column twice: {', '.join(header)}")
    for number, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        where = f"row {number}"
        if len(cells) != len(header):
            raise Problem(f"{where}: {len(cells)} cells for {len(header)} columns")
        row: dict[str, Any] = {}
        for key, cell in zip(header, cells, strict=True):
            value = cell.strip()
            if not value:
                continue  # an empty optional cell is "unknown"; a required one is reported as missing below
            if key in INTS:
                if not _UNSIGNED.fullmatch(value):
                    raise Problem(
                        f"{where}: {key} must be a non-negative integer, found {cut_short(value)!r}"
                        + _unit_hint(key, value)
                    )
                try:
                    row[key] = whole_number(value)
                except TextFormatError as exc:
                    raise Problem(f"{where}: {key} is {exc}") from None
            else:
                row[key] = value
        yield where, row


def _json_rows(data: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(data, dict) or "windows" not in data or "schema" in data:
        raise Problem("plain JSON must be an object with a 'windows' list" + looks_like(data))
    rows: list[tuple[str, dict[str, Any]]] = []
    for index, item in enumerate(as_list(data["windows"], "windows")):
        where = f"windows[{index}]"
        entry = as_object(item, where)
        _check_keys(list(entry), where)
        row: dict[str, Any] = {}
        for key, value in entry.items():
            if value is None:
                continue
            if key in INTS and isinstance(value, float):
                raise Problem(f"{where}.{key} must be an integer, found a float" + _unit_hint(key, value))
            row[key] = as_int(value, f"{where}.{key}") if key in INTS else as_str(value, f"{where}.{key}")
        rows.append((where, row))
    return rows


#: Epoch stamps in a coarser unit, by their size now: (below, unit, to ns).
_UNITS = ((1e11, "seconds", 9), (1e14, "milliseconds", 6), (1e17, "microseconds", 3))


def _unit_hint(key: str, value: str | float) -> str:
    """A time given with a fraction (``1796689475.569``): in which unit it reads, and the factor to ns."""
    try:
        number = float(value)
    except ValueError:
        return ""
    if not (key.startswith("t_") and key.endswith("_ns")) or not 0 < number < _UNITS[-1][0]:
        return ""
    unit, power = next((u, k) for below, u, k in _UNITS if number < below)
    return f" ({key} is Unix epoch nanoseconds, an integer; this reads as {unit}: × 10^{power})"


def _check_keys(keys: list[str], where: str) -> None:
    unknown = [key for key in keys if key not in KEYS]
    if unknown:
        raise Problem(f"{where}: unknown column(s) {', '.join(map(repr, unknown))}; known: {', '.join(KEYS)}")


def _window(path: Path, kind: str, where: str, row: dict[str, Any]) -> Window:
    for key in REQUIRED_FIELDS:
        if key not in row:
            raise Problem(f"{where}: missing {key}")
    source = base_source(FORMAT, path, "unix_ns", MAPPING, 1e-9)
    source.update(plain_kind=kind, request_id=row["id"])
    failure = row.get(FAILURE)
    if failure is not None:
        if failure not in CUT_SHORT:
            raise Problem(f"{where}: {FAILURE} must be one of {', '.join(CUT_SHORT)}, found {failure!r:.80}")
        source[failure] = True
    optional = {key: row.get(key) for key in (*OPTIONAL_INT_FIELDS, *OPTIONAL_STR_FIELDS)}
    return checked(
        where,
        Window(
            id=row["id"],
            phase=row["phase"],
            t_start_ns=row["t_start_ns"],
            t_end_ns=row["t_end_ns"],
            source=source,
            **optional,
        ),
    )
