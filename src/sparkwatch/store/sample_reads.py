"""Reading one boot's samples for an export (by the agent's monotonic or wall clock: both only grow with
seq within a boot, and each sample block records their range), a node's clock-probe rounds, and its latest
boot."""

from __future__ import annotations

import sqlite3
from typing import Any

from sparkwatch.core.clock import OffsetRound
from sparkwatch.store.row_values import is_integer, shown_value
from sparkwatch.store.sample_block import SampleBlock
from sparkwatch.store.sample_store import CLOCKS, SampleBlocks
from sparkwatch.store.tx import Damaged

#: How far outside the asked span the nearest round of a boot is looked for (links probe every 10 s).
NEAREST_NS = 600 * 1_000_000_000
#: The clocks a span can be read by.
CLOCK_COLUMNS = tuple(CLOCKS)


class BootSamples:
    """One boot's samples of one node, as an export reads them."""

    def __init__(self, blocks: SampleBlocks, node: str, boot: str) -> None:
        self._blocks = blocks
        self._key = (node, boot)

    def read(self, clock: str, t_from: int, t_to: int, next_within: int = 0) -> SampleBlock:
        """The samples from the first whose ``clock`` is ≥ t_from to the last whose ``clock`` is ≤ t_to (and
        with ``next_within``, the first after t_to that is at most that much later)."""
        if clock not in CLOCKS:
            raise ValueError(f"no clock column {clock!r}")
        return self._blocks.read(*self._key, clock, t_from, t_to, next_within=next_within)


def latest_boot_id(db: sqlite3.Connection, node: str) -> str | None:
    """The node's most recently seen boot (None: none yet). ``Damaged`` where a boot's first_seen_ns is not
    an integer (edited outside sparkwatch): which boot is the latest is then unknown (SQLite sorts text
    after every number, a REAL where it falls), and an export would take another boot's hello, a link ask
    the agent's boot for its whole ring again."""
    row = db.execute(
        "SELECT boot_id, first_seen_ns FROM boots WHERE node = ?"
        " ORDER BY typeof(first_seen_ns) = 'integer', first_seen_ns DESC LIMIT 1",
        (node,),
    ).fetchone()
    if row is None:
        return None
    boot, seen = row
    if not is_integer(seen):
        problem = f"first_seen_ns {shown_value(seen)} is not an integer"
        raise Damaged(f"boot {boot} of node {node} is damaged in the database: {problem}")
    return str(boot)


def offset_rounds(
    db: sqlite3.Connection, node: str, t_from_ns: int, t_to_ns: int
) -> dict[str, list[OffsetRound]]:
    """The node's probe rounds in [t_from_ns, t_to_ns] by boot, oldest first, with each boot's nearest
    round before the span; a boot with neither (its link first probed it after the span: a coordinator
    down at the run's end) keeps its nearest round after. Not the nearest after of every boot: that round
    arrives up to a probe interval after the run ends, so an export made at the end (`sparkwatch run`'s)
    and one made later (`runs export`) fitted different clocks and differed in every figure's last digits
    and in the digest."""
    rows = db.execute(
        "SELECT boot_id, t_ns, offset_ns, uncertainty_ns, mono_offset_ns FROM clock_offsets"
        " WHERE node = ? AND t_ns BETWEEN ? AND ? ORDER BY t_ns",
        (node, t_from_ns, t_to_ns),
    ).fetchall()
    rows += db.execute(
        "SELECT boot_id, MAX(t_ns), offset_ns, uncertainty_ns, mono_offset_ns FROM clock_offsets"
        " WHERE node = ? AND t_ns >= ? AND t_ns < ? GROUP BY boot_id",
        (node, t_from_ns - NEAREST_NS, t_from_ns),
    ).fetchall()
    placed = {str(row[0]) for row in rows}
    rows += [
        row
        for row in db.execute(
            "SELECT boot_id, MIN(t_ns), offset_ns, uncertainty_ns, mono_offset_ns FROM clock_offsets"
            " WHERE node = ? AND t_ns > ? AND t_ns <= ? GROUP BY boot_id",
            (node, t_to_ns, t_to_ns + NEAREST_NS),
        ).fetchall()
        if str(row[0]) not in placed
    ]
    by_boot: dict[str, list[OffsetRound]] = {}
    for row in sorted(rows, key=lambda r: r[1]):
        by_boot.setdefault(str(row[0]), []).append(_round(node, row))
    return by_boot


def _round(node: str, row: tuple[Any, ...]) -> OffsetRound:
    """A ``clock_offsets`` row as a round, checked as ``Store.add_offset`` writes it: a row edited outside
    sparkwatch would reach the clock fit as a traceback, or place every sample nowhere without a word."""
    boot, t_ns, offset, uncertainty, mono = row
    problem = _offset_problem(t_ns, offset, uncertainty, mono)
    if problem is not None:
        where = f"clock offset of node {node}, boot {boot} at t_ns {shown_value(t_ns)}"
        raise Damaged(f"{where} is damaged in the database: {problem}")
    return OffsetRound(t_ns, offset, uncertainty, mono)


#: The most an offset can be: 2^62 ns, 146 years (an agent's clock left at 1970 is 56 years off). Past it,
#: a sample's time plus its offset leaves 64 bits, and 9e18 was exported as a node's offset.
MAX_OFFSET_NS = 1 << 62


def _offset_problem(t_ns: Any, offset: Any, uncertainty: Any, mono: Any) -> str | None:
    """What is wrong with a round's columns, or ``None``: integers all, the offsets no more than
    MAX_OFFSET_NS either way, the uncertainty half a round trip (never negative), the monotonic offset
    absent only in rounds stored before it was kept."""
    if not is_integer(t_ns):
        return f"t_ns {shown_value(t_ns)} is not an integer"
    if not is_integer(offset) or abs(offset) > MAX_OFFSET_NS:
        return f"offset_ns {shown_value(offset)} is not an integer within ±2^62 (146 years)"
    if not is_integer(uncertainty) or uncertainty < 0:
        return f"uncertainty_ns {shown_value(uncertainty)} is not an integer of 0 or more"
    if mono is not None and (not is_integer(mono) or abs(mono) > MAX_OFFSET_NS):
        return f"mono_offset_ns {shown_value(mono)} is not an integer within ±2^62 (146 years)"
    return None
