"""Reading one boot's samples for an export: bounds by the agent's monotonic (or wall) clock found by a
binary search over seq — within a boot both clocks only grow with seq, and seq is the primary key, so no
second index is kept — then the rows of that seq range column by column."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np
import orjson

from sparkwatch.core.clock import OffsetRound
from sparkwatch.store.rows import GpuRows, MemRows, SensorRows, SignalRows
from sparkwatch.wire import FrameError, sensor_values

#: How far outside the asked span the nearest round of a boot is looked for (links probe every 10 s).
NEAREST_NS = 600 * 1_000_000_000
#: Clock event reason bits kept (a bitmask beyond 63 bits does not fit SQLite's or numpy's integers).
INT63_MASK = 2**63 - 1
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

    def frame_rows(self, seqs: tuple[int, int]) -> tuple[SensorRows, SignalRows]:
        return frame_rows(self._db, self._key, seqs)

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


def frame_rows(
    db: sqlite3.Connection, key: tuple[str, str], seqs: tuple[int, int]
) -> tuple[SensorRows, SignalRows]:
    """The power channels and the GPUs' clock signals of the samples with seq in [first, end), read from the
    stored frames (checked by the wire when they arrived; an entry a frame stored before a check existed
    cannot use is skipped, and a signal of the wrong type is unknown)."""
    sensors = _Columns()
    signals = _Columns()
    for wall, mono, every, frame in db.execute(
        "SELECT t_wall_ns, t_mono_ns, interval_s, frame FROM samples"
        " WHERE node = ? AND boot_id = ? AND seq BETWEEN ? AND ? ORDER BY seq",
        (*key, *_inclusive(seqs)),
    ):
        d = orjson.loads(frame)
        for entry in d.get("sensors") or ():
            try:
                sensors.add(wall, mono, every, sensor_values(entry))
            except FrameError:
                continue
        for gpu in d.get("gpus") or ():
            if isinstance(gpu, dict) and isinstance(gpu.get("uuid"), str):
                signals.add(wall, mono, every, _signals(gpu))
    return (
        SensorRows(
            *sensors.times(),
            sensor=[v.sensor for v in sensors.values],
            kind=[v.kind for v in sensors.values],
            source=[v.source for v in sensors.values],
            power_w=_floats(v.power_w for v in sensors.values),
            energy_j=_floats(v.energy_j for v in sensors.values),
        ),
        SignalRows(
            *signals.times()[:2],
            uuid=[v[0] for v in signals.values],
            sm_clock_hz=_floats(v[1] for v in signals.values),
            temperature_c=_floats(v[2] for v in signals.values),
            reasons=np.array([v[3] for v in signals.values], dtype=np.int64),
        ),
    )


class _Columns:
    """Rows of one kind gathered while the frames are read once."""

    def __init__(self) -> None:
        self.t_wall: list[int] = []
        self.t_mono: list[int] = []
        self.interval: list[float] = []
        self.values: list[Any] = []

    def add(self, wall: int, mono: int, every: float, value: Any) -> None:
        self.t_wall.append(wall)
        self.t_mono.append(mono)
        self.interval.append(every)
        self.values.append(value)

    def times(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.array(self.t_wall, dtype=np.int64),
            np.array(self.t_mono, dtype=np.int64),
            np.array(self.interval, dtype=np.float64),
        )


def _signals(gpu: dict[str, Any]) -> tuple[str, float | None, float | None, int]:
    reasons = gpu.get("clock_event_reasons")
    return (
        gpu["uuid"],
        _number(gpu.get("sm_clock_hz")),
        _number(gpu.get("temperature_c")),
        reasons & INT63_MASK if type(reasons) is int and reasons >= 0 else -1,
    )


def _number(value: Any) -> float | None:
    return float(value) if type(value) is int or type(value) is float else None


def _floats(values: Any) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


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
