"""Reading one boot's samples for an export: bounds by the agent's monotonic (or wall) clock found by a
binary search over seq — within a boot both clocks only grow with seq, and seq is the primary key, so no
second index is kept — then the rows of that seq range column by column."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import orjson

from sparkwatch.core.clock import OffsetRound
from sparkwatch.store.rows import GpuRows, MemRows, SensorRows
from sparkwatch.wire import FrameError, sensor_values

#: How far outside the asked span the nearest round of a boot is looked for (links probe every 10 s).
NEAREST_NS = 600 * 1_000_000_000
#: The clocks a seq range can be bounded by.
CLOCK_COLUMNS = ("t_mono_ns", "t_wall_ns")


def _inclusive(seqs: tuple[int, int]) -> tuple[int, int]:
    """[first, end) as SQL's inclusive BETWEEN bounds: ``end`` itself may be 2^63, one past SQLite's largest
    integer, when the boot's last seq is the largest a frame may carry."""
    return seqs[0], seqs[1] - 1


class BootSamples:
    """One boot's samples of one node, as an export reads them."""

    def __init__(self, db: sqlite3.Connection, node: str, boot: str) -> None:
        self._db = db
        self._key = (node, boot)

    def seq_range(self, column: str, t_from: int, t_to: int) -> tuple[int, int] | None:
        """[first, end) seqs of the samples whose ``column`` lies in [t_from, t_to] (None: none do)."""
        if column not in CLOCK_COLUMNS:
            raise ValueError(f"no clock column {column!r}")
        lo, hi = self._db.execute(
            "SELECT MIN(seq), MAX(seq) FROM samples WHERE node = ? AND boot_id = ?", self._key
        ).fetchone()
        if lo is None:
            return None
        first = self._first_seq_at(column, t_from, (lo, hi))
        after = self._first_seq_at(column, t_to + 1, (lo, hi))
        end = hi + 1 if after is None else after
        return None if first is None or first >= end else (first, end)

    def _first_seq_at(self, column: str, t: int, seqs: tuple[int, int]) -> int | None:
        """The smallest stored seq in [lo, hi] whose ``column`` is ≥ t (None: none is)."""
        lo, hi = seqs
        found = None
        query = (
            f"SELECT seq, {column} FROM samples WHERE node = ? AND boot_id = ? AND seq >= ?"
            " ORDER BY seq LIMIT 1"
        )
        while lo <= hi:
            mid = (lo + hi) // 2
            seq, value = self._db.execute(query, (*self._key, mid)).fetchone()
            if value >= t:
                found = seq if found is None else min(found, seq)
                hi = mid - 1
            else:
                lo = seq + 1
        return found

    def gpu_rows(self, seqs: tuple[int, int]) -> GpuRows:
        """Every GPU's values in the samples with seq in [first, end), in no set order."""
        rows = self._db.execute(
            "SELECT t_wall_ns, t_mono_ns, interval_s, 0, gpu0_uuid, gpu0_power_w, gpu0_energy_j,"
            " gpu0_util_ratio FROM samples WHERE node = ? AND boot_id = ? AND seq BETWEEN ? AND ?"
            " AND gpu0_uuid IS NOT NULL"
            " UNION ALL"
            " SELECT s.t_wall_ns, s.t_mono_ns, s.interval_s, g.gpu, g.uuid, g.power_w, g.energy_j,"
            " g.util_ratio FROM samples s JOIN gpu_samples g USING (node, boot_id, seq)"
            " WHERE s.node = ? AND s.boot_id = ? AND s.seq BETWEEN ? AND ?",
            (*self._key, *_inclusive(seqs), *self._key, *_inclusive(seqs)),
        ).fetchall()
        t_wall, t_mono, interval, index, uuid, power, energy, util = _columns(rows, 8)
        return GpuRows(
            t_wall_ns=np.array(t_wall, dtype=np.int64),
            t_mono_ns=np.array(t_mono, dtype=np.int64),
            interval_s=np.array(interval, dtype=np.float64),
            gpu_index=np.array(index, dtype=np.int64),
            uuid=list(uuid),
            power_w=np.array(power, dtype=np.float64),  # NULL becomes NaN: unknown
            energy_j=np.array(energy, dtype=np.float64),
            util_ratio=np.array(util, dtype=np.float64),
        )

    def sensor_rows(self, seqs: tuple[int, int]) -> SensorRows:
        return sensor_rows(self._db, self._key, seqs)

    def mem_rows(self, seqs: tuple[int, int]) -> MemRows:
        """Memory used in the samples with seq in [first, end), in seq order."""
        rows = self._db.execute(
            "SELECT t_wall_ns, t_mono_ns, interval_s, mem_used_bytes FROM samples"
            " WHERE node = ? AND boot_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
            (*self._key, *_inclusive(seqs)),
        ).fetchall()
        t_wall, t_mono, interval, used = _columns(rows, 4)
        return MemRows(
            t_wall_ns=np.array(t_wall, dtype=np.int64),
            t_mono_ns=np.array(t_mono, dtype=np.int64),
            interval_s=np.array(interval, dtype=np.float64),
            used_bytes=np.array(used, dtype=np.float64),
        )


def sensor_rows(db: sqlite3.Connection, key: tuple[str, str], seqs: tuple[int, int]) -> SensorRows:
    """The power channels of the samples with seq in [first, end), read from the stored frames (checked by
    the wire when they arrived; an entry a frame stored before that check cannot use is skipped)."""
    t_wall: list[int] = []
    t_mono: list[int] = []
    interval: list[float] = []
    values = []
    for wall, mono, every, frame in db.execute(
        "SELECT t_wall_ns, t_mono_ns, interval_s, frame FROM samples"
        " WHERE node = ? AND boot_id = ? AND seq BETWEEN ? AND ? AND instr(frame, '\"sensors\"') > 0"
        " AND instr(frame, '\"sensors\":[]') = 0"
        " ORDER BY seq",
        (*key, *_inclusive(seqs)),
    ):
        for entry in orjson.loads(frame).get("sensors") or ():
            try:
                values.append(sensor_values(entry))
            except FrameError:
                continue
            t_wall.append(wall)
            t_mono.append(mono)
            interval.append(every)
    return SensorRows(
        t_wall_ns=np.array(t_wall, dtype=np.int64),
        t_mono_ns=np.array(t_mono, dtype=np.int64),
        interval_s=np.array(interval, dtype=np.float64),
        sensor=[v.sensor for v in values],
        kind=[v.kind for v in values],
        source=[v.source for v in values],
        power_w=np.array([np.nan if v.power_w is None else v.power_w for v in values], dtype=np.float64),
        energy_j=np.array([np.nan if v.energy_j is None else v.energy_j for v in values], dtype=np.float64),
    )


def offset_rounds(
    db: sqlite3.Connection, node: str, t_from_ns: int, t_to_ns: int
) -> dict[str, list[OffsetRound]]:
    """The node's probe rounds in [t_from_ns, t_to_ns] by boot, oldest first; a boot with none inside
    but some around keeps the nearest one on each side."""
    rows = db.execute(
        "SELECT boot_id, t_ns, offset_ns, uncertainty_ns, mono_offset_ns FROM clock_offsets"
        " WHERE node = ? AND t_ns BETWEEN ? AND ? ORDER BY t_ns",
        (node, t_from_ns, t_to_ns),
    ).fetchall()
    rows += db.execute(
        "SELECT boot_id, MAX(t_ns), offset_ns, uncertainty_ns, mono_offset_ns FROM clock_offsets"
        " WHERE node = ? AND t_ns >= ? AND t_ns < ? GROUP BY boot_id"
        " UNION ALL SELECT boot_id, MIN(t_ns), offset_ns, uncertainty_ns, mono_offset_ns FROM clock_offsets"
        " WHERE node = ? AND t_ns > ? AND t_ns <= ? GROUP BY boot_id",
        (node, t_from_ns - NEAREST_NS, t_from_ns, node, t_to_ns, t_to_ns + NEAREST_NS),
    ).fetchall()
    by_boot: dict[str, list[OffsetRound]] = {}
    for boot, t_ns, offset, uncertainty, mono in sorted(rows, key=lambda r: r[1]):
        by_boot.setdefault(str(boot), []).append(OffsetRound(t_ns, offset, uncertainty, mono))
    return by_boot


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    """Rows turned into ``width`` columns (empty columns when there are no rows)."""
    return list(zip(*rows, strict=True)) if rows else [()] * width
