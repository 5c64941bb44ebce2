"""What a restart with another nodes file means for a run left open: it still measures the nodes it was
opened with (``runs.nodes``, schema 11), so a node added since is not in its export and a node removed since
leaves its windows from now on incomplete. Said once at the start, not found out from the export."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from sparkwatch.store.run_rows import RunRow

log = logging.getLogger(__name__)


def warn_changed_nodes(runs: Iterable[RunRow], names: Sequence[str]) -> None:
    """Each of :func:`changed_nodes`' warnings, logged (at the coordinator's start)."""
    for said in changed_nodes(runs, names):
        log.warning("%s", said)


def changed_nodes(runs: Iterable[RunRow], names: Sequence[str]) -> list[str]:
    """One warning per open run whose nodes are not the nodes file's ``names`` (a run stored before its
    nodes were kept takes the coordinator's, whichever they are: nothing to say of it)."""
    said = []
    for run in runs:
        if not run.open or run.nodes is None:
            continue
        added = [n for n in names if n not in run.nodes]
        removed = [n for n in run.nodes if n not in names]
        parts = []
        if added:
            parts.append(f"{', '.join(added)} (added to the nodes file since) not in its export")
        if removed:
            parts.append(
                f"{', '.join(removed)} (no longer in the nodes file) still in it, and its windows from now"
                " on incomplete there"
            )
        if parts:
            said.append(
                f"run {run.id} (open) measures the nodes it was opened with ({', '.join(run.nodes)}):"
                f" {'; '.join(parts)}; end it and open another to measure this nodes file's"
            )
    return said
