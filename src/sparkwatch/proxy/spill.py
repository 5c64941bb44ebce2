"""Windows the proxy could not deliver, kept in a file `sparkwatch import plain` takes back: a coordinator
that went away must not cost the requests it already measured."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sparkwatch.core.windows import CUT_SHORT, Window
from sparkwatch.importers.plain import FAILURE, KEYS
from sparkwatch.outputs import not_a_file, write_text_atomically

log = logging.getLogger(__name__)


def spill_path_beside(export: Path) -> Path:
    """The default spill file of a run: next to its export (``run.json`` → ``run.unsent-windows.json``);
    in the temporary folder for an export sent to a device or a pipe (``-o /dev/null``: not into /dev)."""
    if not_a_file(export):
        return Path(tempfile.gettempdir()) / f"{export.stem}.unsent-windows.json"
    return export.with_name(f"{export.stem}.unsent-windows.json")


def write_spill(path: Path, windows: Sequence[Window]) -> None:
    """``windows`` as a plain JSON window file (written whole or not at all). The plain format carries a
    window's own fields and why it did not complete (``failure``: a window cut short stays unmeasured when
    imported back); the file says where they came from in its ``note``."""
    rows = [_row(w) for w in windows]
    note = (
        "windows the sparkwatch proxy measured but could not store; `sparkwatch import plain FILE --run ID`"
    )
    write_text_atomically(path, json.dumps({"note": note, "windows": rows}, indent=1) + "\n")


def _row(window: Window) -> dict[str, object]:
    row: dict[str, object] = {k: v for k, v in window.to_json().items() if k in KEYS and v is not None}
    cut = next((note for note in CUT_SHORT if window.source.get(note) is True), None)
    if cut is not None:
        row[FAILURE] = cut
    return row


def where_kept(kept: Path | None, run_id: str, after_end: int) -> str:
    """What the spill's message says of the windows in ``kept``: how to import them, unless they are the
    ``after_end`` windows that came after the run ended, which its import refuses as the proxy's posts were
    (they belong to a run open when they ran)."""
    if kept is None:
        return "lost"
    if after_end:
        return (
            f"kept in {kept}; {after_end} of them came after run {run_id} ended, which refuses them: import"
            f" them into a run whose span holds them (sparkwatch import plain {kept} --run ID)"
        )
    return f"kept in {kept} (sparkwatch import plain {kept} --run {run_id})"


def spill_safely(path: Path, windows: Sequence[Window], run_id: str) -> Path | None:
    """``write_spill`` that never stops the caller's clean-up (ending the run, the export): where ``path``
    cannot be written, the temporary folder; returns where the windows are (None: nowhere, logged)."""
    try:
        write_spill(path, windows)
        return path
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / f"sparkwatch-{run_id}.unsent-windows.json"
        log.warning("cannot write %s (%s); trying %s", path, exc.strerror or exc, fallback)
    try:
        write_spill(fallback, windows)
        return fallback
    except OSError as exc:
        log.error("%d unsent window(s) lost: cannot write %s either (%s)", len(windows), fallback, exc)
        return None
