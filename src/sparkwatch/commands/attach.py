"""`sparkwatch attach run.json --lmx payload.json`: put the measured figures into an lmx run payload, or
`--lmx-flags`: print them as the flags of lmx's own CLI.

Only ``gpuPowerWatts``, ``peakVramGb`` and ``notes`` change; every other byte of the payload stays as it
was (the payload object is edited as text, value by value, never re-serialised), so a reviewer's diff
shows exactly what sparkwatch contributed. A saved lmx run may wrap the payload as ``{"payload": {...}}``
(lmx edits the inner object then, ``persistBenchmarkSubmission``); both forms are accepted.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

from sparkwatch.commands.export_file import load_export
from sparkwatch.commands.quality import judge
from sparkwatch.core.export import LMX_NOTES_MAX_CHARS
from sparkwatch.outputs import write_atomically
from sparkwatch_agent.shared.strict_text import TextFormatError, decode_utf8, loads_json
from sparkwatch_agent.shared.units import lmx_gb
from sparkwatch_agent.shared.user_files import read_file_bytes

LMX_FIELDS = ("gpuPowerWatts", "peakVramGb", "notes")
#: lmx's CLI checks only > 0 (parseGpuPowerWatts); this ceiling is sparkwatch's own sanity bound.
MAX_GPU_WATTS = 10_000
#: How far lmx's one-decimal GPU power may lie from the node entry's three-decimal one: half a tenth and
#: half a thousandth (rounded twice), and a float's error.
LMX_ROUNDING_W = 0.0505 + 1e-9
#: How sparkwatch's paragraph of an lmx payload's notes begins (core.export's lmx notes): the version, the
#: run and the export's digest, so a sentence of the author's that merely says "Measured by sparkwatch" is
#: never taken for ours.
OUR_PARAGRAPH = re.compile(r"\s*Measured by sparkwatch \S+ \(run .+?, export sha256 [0-9a-f]{64}\)")
#: Paragraphs of notes: a blank line (LF or CRLF) between them.
PARAGRAPH_BREAK = re.compile(r"(\r?\n[ \t]*\r?\n\s*)")
WRAPPER = "payload"  # a saved lmx run file: {"payload": {...}, ...}
#: Members of lmx's run payload (``benchmarkPayload.ToMap``, tests/fixtures/harness/README.md), one of
#: which a payload to attach to must have at its top level (or in its wrapper); the three sparkwatch writes
#: count too (an attached one). Any JSON object was edited in place: a harness's results, another export.
PAYLOAD_MEMBERS = ("hfId", "engineName", "benchmarkMode", "tokSOut", "outputTokens", *LMX_FIELDS)


class AttachError(Exception):
    """The export or the payload cannot be attached; one line saying which file and why."""


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def top_level_spans(text: str, name: str) -> dict[str, tuple[int, int]]:
    """Where each top-level member's value lies in the JSON text: key → (start, end) character offsets."""
    decoder = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if i >= len(text) or text[i] != "{":
        raise AttachError(f"{name}: not a JSON object")
    spans: dict[str, tuple[int, int]] = {}
    i = _skip_ws(text, i + 1)
    if i < len(text) and text[i] == "}":
        return spans
    try:
        while True:
            key, i = decoder.raw_decode(text, i)
            i = _skip_ws(text, i)
            if not isinstance(key, str) or text[i] != ":":
                raise ValueError("expected a member name and ':'")
            start = _skip_ws(text, i + 1)
            _value, end = decoder.raw_decode(text, start)
            spans[key] = (start, end)
            i = _skip_ws(text, end)
            if text[i] == "}":
                break
            if text[i] != ",":
                raise ValueError("expected ',' or '}'")
            i = _skip_ws(text, i + 1)
    except (ValueError, IndexError) as exc:
        raise AttachError(f"{name}: not valid JSON ({exc})") from None
    if _skip_ws(text, i + 1) != len(text):
        raise AttachError(f"{name}: text after the JSON object")
    return spans


def lmx_values(export: dict[str, Any], name: str, force: bool) -> dict[str, Any]:
    """The three lmx fields from an export, refusing windows that are not ``ok`` unless forced."""
    if not isinstance(export, dict) or not str(export.get("schema", "")).startswith("sparkwatch.run/"):
        raise AttachError(f"{name}: not a sparkwatch run export")
    lmx = export.get("lmx")
    if not isinstance(lmx, dict) or any(k not in lmx for k in LMX_FIELDS):
        raise AttachError(f"{name}: the export has no lmx section")
    _check_digest(export, lmx["notes"], name)
    watts = gpu_watts(export, lmx["gpuPowerWatts"], name)  # --force never makes up a power
    unsound = None if force else _unsound(export, name)
    if unsound:
        raise AttachError(f"{name}: the measurement is not sound ({unsound}); pass --force to attach anyway")
    peak = peak_gb(export, lmx["peakVramGb"])
    if peak is None and not force:
        raise AttachError(
            f"{name}: peak memory is unknown (see totals.null_reasons); pass --force to attach the power"
            " alone and keep the payload's own peakVramGb"
        )
    values = {"gpuPowerWatts": watts, "peakVramGb": peak, "notes": lmx["notes"]}
    if peak is None:
        del values["peakVramGb"]
    return values


def _check_digest(export: dict[str, Any], notes: Any, name: str) -> None:
    """The notes published quote the export's sha256 (core.export.digest): one edited since it was made
    (its figures, its windows) no longer has it, and its notes would vouch for what it no longer holds."""
    from sparkwatch.core.export import digest, quoted_digest  # noqa: PLC0415 — numpy and the core, attach alone

    quoted, sha = quoted_digest(notes), digest(export)
    if quoted != sha:
        said = f"quote {quoted}" if quoted else "quote no export sha256"
        raise AttachError(
            f"{name}: its lmx notes {said}, but the export's sha256 is {sha}: the export was edited since it"
            " was made; export the run again"
        )


def _unsound(export: dict[str, Any], name: str) -> str | None:
    """Why the figures are not fit to publish, as `run --strict` judges them (commands.quality: a window of
    the measured phases not ok or out of scope, one GPU under two nodes, a silent node), with the first such
    window's reasons; None when sound. A warm-up window is not judged: the figures do not include it."""
    try:
        quality = judge(export)
    except (KeyError, TypeError, AttributeError):  # past the windows the schema check samples
        raise AttachError(f"{name}: a window lacks the fields every export window has") from None
    if quality.sound:
        return None
    first = quality.not_ok[0] if quality.not_ok else None
    bad = next((w for w in export["windows"] if w.get("id") == first), None)
    detail = ""
    if bad is not None and not bad.get("in_scope"):
        detail = f"; {bad.get('id')}: out of scope"
    elif bad is not None:
        detail = f"; {bad.get('id')}: {bad.get('verdict')}, {'; '.join(bad.get('reasons') or [])}"
    return "; ".join(quality.problems) + detail


def gpu_watts(export: dict[str, Any], watts: Any, name: str) -> list[float]:
    """``lmx.gpuPowerWatts``: one measured value per physical GPU in node order, then GPU order (how
    ``nodes[].gpus[]`` lists them); an unknown or non-positive one is refused, naming its node."""
    owners = [(n, g) for n in export.get("nodes", []) for g in n.get("gpus", [])]
    if not isinstance(watts, list) or not watts or len(watts) != len(owners):
        raise AttachError(
            f"{name}: lmx.gpuPowerWatts {watts} does not list one value per GPU of nodes[].gpus"
            f" ({len(owners)} GPUs)"
        )
    for i, (w, (node, gpu)) in enumerate(zip(watts, owners, strict=True)):
        where = f"node {node.get('node')} (GPU {gpu.get('uuid')}, gpuPowerWatts[{i}])"
        if isinstance(w, int | float) and not isinstance(w, bool) and 0 < w <= MAX_GPU_WATTS:
            _as_measured(w, gpu.get("power_w_gated_mean"), f"{name}: {where}")
            continue
        if w is None:
            reasons = node.get("null_reasons") or {}
            why = reasons.get("power_w.gated_mean") or reasons.get("power_w") or "see the node's null_reasons"
            raise AttachError(f"{name}: {where} has no measured GPU power: {why}; lmx needs one per GPU")
        raise AttachError(f"{name}: {where} is {w} W, not a power in (0, {MAX_GPU_WATTS}] W")
    return list(watts)


def _as_measured(watts: float, gated: Any, where: str) -> None:
    """``watts`` (lmx's, one decimal) is the GPU's gated mean (the node's entry, three decimals) rounded, or
    the export was edited since it was made: published, a hand-set 1.0 W went out as measured."""
    measured = isinstance(gated, int | float) and not isinstance(gated, bool)
    if measured and abs(watts - gated) <= LMX_ROUNDING_W:
        return
    shown = f"{gated} W" if measured else "none"
    raise AttachError(
        f"{where} is {watts} W, but the GPU's gated mean (nodes[].gpus[].power_w_gated_mean) is {shown}:"
        " the export was edited since it was made; export the run again"
    )


def peak_gb(export: dict[str, Any], fallback: Any) -> float | None:
    """Peak memory as lmx's ``peakVramGb``: the export's summed peak bytes in GiB, rounded like lmx
    (``round1``), else the export's own figure."""
    peak_bytes = (export.get("totals") or {}).get("memory_used_bytes_peak_sum")
    if isinstance(peak_bytes, int) and not isinstance(peak_bytes, bool) and peak_bytes >= 0:
        return lmx_gb(peak_bytes)
    return fallback if isinstance(fallback, int | float) and not isinstance(fallback, bool) else None


def lmx_flags(values: dict[str, Any]) -> str:
    """The same values as lmx CLI flags: ``--gpu-power-watts W1,W2,… [--peak-vram-gb G]``."""
    flags = f"--gpu-power-watts {','.join(json.dumps(w) for w in values['gpuPowerWatts'])}"
    if "peakVramGb" in values:
        flags += f" --peak-vram-gb {json.dumps(values['peakVramGb'])}"
    return flags


def merged_notes(existing: Any, ours: str, name: str) -> str:
    """The author's notes with sparkwatch's paragraph: a re-attach puts ours where the last attach put
    its own (every paragraph that begins as ours do is sparkwatch's, nothing else), a first one after the
    author's text. Refused above 2000 characters, the issue's figure for lmx (its CLI sets none; the
    server's schema could not be read), so no server limit of that size can cut either."""
    if not isinstance(existing, str) or not existing.strip():
        return ours
    pieces = PARAGRAPH_BREAK.split(existing)  # paragraph, break, paragraph, …
    kept: list[str] = []
    placed = False
    for i in range(0, len(pieces), 2):
        before = pieces[i - 1] if i else ""
        if OUR_PARAGRAPH.match(pieces[i]):
            if not placed:
                kept.append(before + ours)
                placed = True
            continue
        kept.append((before if kept else "") + pieces[i])
    combined = "".join(kept) if placed else f"{''.join(kept).rstrip()}\n\n{ours}"
    if len(combined) > LMX_NOTES_MAX_CHARS:
        raise AttachError(
            f"{name}: its notes with sparkwatch's ({len(ours)} characters) would be {len(combined)}"
            f" characters, over the {LMX_NOTES_MAX_CHARS} that sparkwatch keeps notes to; shorten the"
            " payload's notes"
        )
    return combined


def attach_text(payload_text: str, values: dict[str, Any], name: str) -> str:
    """The payload with ``values`` replacing (or appended after) the matching top-level members."""
    spans = top_level_spans(payload_text, name)
    pieces: list[tuple[int, int, str]] = []
    missing = []
    for key, value in values.items():
        encoded = json.dumps(value, ensure_ascii=False)
        if key in spans:
            pieces.append((*spans[key], encoded))
        else:
            missing.append(f"{json.dumps(key)}: {encoded}")
    out = payload_text
    for start, end, encoded in sorted(pieces, reverse=True):
        out = out[:start] + encoded + out[end:]
    if missing:
        close = out.rstrip().rfind("}")
        body_end = len(out[:close].rstrip())
        separator = "" if out[:body_end].rstrip().endswith("{") else ","
        indent = _member_indent(payload_text)
        joined = f",{indent}".join(missing)
        out = out[:body_end] + f"{separator}{indent}{joined}" + out[body_end:]
    return out


def _member_indent(text: str) -> str:
    """The whitespace before the first member, so appended members look like their neighbours."""
    i = text.find("{") + 1
    j = _skip_ws(text, i)
    ws = text[i:j]
    return ws if "\n" in ws else " "


def _check_payload(payload: Any, name: str, force: bool) -> None:
    """Refuse to edit what is not an lmx run payload: a sparkwatch document always (an export given as the
    payload, the arguments swapped), an object without any lmx payload member unless ``force``."""
    if not isinstance(payload, dict):
        return  # attach_text says "not a JSON object"
    schema = payload.get("schema")
    if isinstance(schema, str) and schema.startswith("sparkwatch."):
        raise AttachError(
            f"{name}: is a sparkwatch document ({schema}), not an lmx run payload; nothing written"
        )
    if not force and not any(member in payload for member in PAYLOAD_MEMBERS):
        raise AttachError(
            f"{name}: not an lmx run payload (it has none of {', '.join(PAYLOAD_MEMBERS[:5])} at its top"
            f" level or in its {WRAPPER!r}); nothing written; pass --force if it is one"
        )


def export_flags(export_path: Path, force: bool) -> str:
    """``sparkwatch attach --lmx-flags``: the flags for ``lmx speed-test run``; nothing is written."""
    return lmx_flags(lmx_values(load_export(export_path), str(export_path), force))


def attach(export_path: Path, payload_path: Path, force: bool, output: Path | None = None) -> dict[str, Any]:
    """Edit the payload in place (or write ``output``) atomically, keeping its bytes, line endings and
    file mode; returns the values written."""
    values = lmx_values(load_export(export_path), str(export_path), force)
    try:
        raw = read_file_bytes(payload_path)
        mode = payload_path.stat().st_mode
    except OSError as exc:
        raise AttachError(f"{payload_path}: {exc.strerror}") from None
    try:
        payload_text = decode_utf8(raw)  # bytes, not read_text(): CRLF stays CRLF
        bom = "\ufeff" if payload_text.startswith("\ufeff") else ""  # a Windows editor's: kept, as every byte
        payload_text = payload_text.removeprefix(bom)
        current = loads_json(payload_text)
    except TextFormatError as exc:
        raise AttachError(f"{payload_path} {exc}") from None
    name = str(payload_path)
    start, end = 0, len(payload_text)
    if isinstance(current, dict) and isinstance(current.get(WRAPPER), dict):
        start, end = top_level_spans(payload_text, name)[WRAPPER]
        current = current[WRAPPER]
    _check_payload(current, name, force)
    if isinstance(current, dict):
        values["notes"] = merged_notes(current.get("notes"), values["notes"], name)
    inner = attach_text(payload_text[start:end], values, name)
    new_text = bom + payload_text[:start] + inner + payload_text[end:]
    target = output or payload_path
    try:
        write_atomically(target, new_text.encode("utf-8"), stat.S_IMODE(mode))
    except OSError as exc:
        raise AttachError(f"{target}: cannot write ({exc.strerror})") from None
    return values
