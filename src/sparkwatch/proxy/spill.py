"""Windows the proxy could not deliver, kept in a file `sparkwatch import plain` takes back: a coordinator
that went away must not cost the requests it already measured."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sparkwatch.core.windows import CUT_SHORT, Window
from sparkwatch.importers.plain import FAILURE, KEYS, PROXY_ORIGIN
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
    imported back); the file says where they came from in its ``note``, and ``origin`` makes them the
    proxy's again when imported (so a harness file of the same requests is compared with them)."""
    rows = [_row(w) for w in windows]
    note = (
        "windows the sparkwatch proxy measured but could not store; `sparkwatch import plain FILE --run ID`"
    )
    body: dict[str, object] = {"note": note, "origin": PROXY_ORIGIN, **_clock(windows), "windows": rows}
    write_text_atomically(path, json.dumps(body, indent=1) + "\n")


def _clock(windows: Sequence[Window]) -> dict[str, object]:
    """The clock the windows were stamped on (one proxy's: one clock) and the most uncertain stamp's
    uncertainty, as the file's ``clock``/``clock_uncertainty_ns``: imported back they are judged by that
    clock's rule (core.windows.after_end: a window stamped on the coordinator's that starts after a run's
    end is not the run's), not by a harness host's 2 s."""
    clocks = {w.source.get("clock") for w in windows}
    if len(clocks) != 1 or not isinstance(clock := clocks.pop(), str):
        return {}
    stated = [u for w in windows if type(u := w.source.get("clock_uncertainty_ns")) is int and u >= 0]
    return {"clock": clock, **({"clock_uncertainty_ns": max(stated)} if stated else {})}


def _row(window: Window) -> dict[str, object]:
    row: dict[str, object] = {k: v for k, v in window.to_json().items() if k in KEYS and v is not None}
    cut = next((note for note in CUT_SHORT if window.source.get(note) is True), None)
    if cut is not None:
        row[FAILURE] = cut
    return row


def spill_lost(path: Path, lost: Sequence[Window], after_end: Sequence[Window], run_id: str) -> str:
    """Keeps the windows that could not be stored and says where. Those the run refused because they came
    after it ended go to a file of their own (``<path stem>.after-end.json``): an import is all or nothing,
    the run refuses them as it refused the proxy's posts, and the others belong to it."""
    late_ids = {w.id for w in after_end}
    unsent = [w for w in lost if w.id not in late_ids]
    late = [w for w in lost if w.id in late_ids]
    said = []
    if unsent:
        kept = spill_safely(path, unsent, run_id)
        hint = f"kept in {kept} (sparkwatch import plain {kept} --run {run_id})" if kept else "lost"
        said.append(f"{len(unsent)} {hint}")
    if late:
        kept = spill_safely(path.with_name(f"{path.stem}.after-end.json"), late, run_id, label="after-end")
        where = f"kept in {kept}: import them into a run whose span holds them" if kept else "lost"
        said.append(f"{len(late)} that came after run {run_id} ended (it refuses them) {where}")
    return "; ".join(said)


def spill_safely(path: Path, windows: Sequence[Window], run_id: str, label: str = "unsent") -> Path | None:
    """``write_spill`` that never stops the caller's clean-up (ending the run, the export): where ``path``
    cannot be written, the temporary folder (``label`` names that file); returns where the windows are
    (None: nowhere, logged)."""
    try:
        write_spill(path, windows)
        return path
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / f"sparkwatch-{run_id}.{label}-windows.json"
        log.warning("cannot write %s (%s); trying %s", path, exc.strerror or exc, fallback)
    try:
        write_spill(fallback, windows)
        return fallback
    except OSError as exc:
        log.error("%d unsent window(s) lost: cannot write %s either (%s)", len(windows), fallback, exc)
        return None
