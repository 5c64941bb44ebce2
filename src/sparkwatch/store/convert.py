"""Schema 9's move of the rows of ``samples`` and ``gpu_samples`` into sample blocks, then the old tables
dropped (inside the migration's transaction: the file is upgraded whole or not at all).

The first GPU's values come from the sample row and the others from ``gpu_samples``, as the export read
them; the power channels and clock signals from the stored frame, where an entry no check of today accepts
is left out, as the export did.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec
import orjson

from sparkwatch.store.sample_store import TARGET, SampleBlocks
from sparkwatch.wire import (
    INT64_MAX,
    FrameError,
    GpuValues,
    SampleFrame,
    SensorValues,
    sensor_values,
    signal_float,
    signal_int,
)


def samples_to_blocks(db: sqlite3.Connection) -> int:
    """Every stored sample into blocks of ``TARGET`` (call inside a transaction); returns how many. Rows are
    read a block's worth at a time, so a boot of months needs no more memory than one block."""
    blocks = SampleBlocks(db, kept_tops=False)  # schema 9's migration: no boots.seq_dropped yet
    moved = 0
    boots = db.execute("SELECT DISTINCT node, boot_id FROM samples").fetchall()
    for node, boot in boots:
        rows = db.execute(
            "SELECT seq, t_wall_ns, t_mono_ns, interval_s, mem_used_bytes, gpu0_uuid, gpu0_power_w,"
            " gpu0_energy_j, gpu0_util_ratio, frame FROM samples WHERE node = ? AND boot_id = ? ORDER BY seq",
            (node, boot),
        )
        while batch := rows.fetchmany(TARGET):
            extra = _more_gpus(db, (str(node), str(boot)), batch[0][0], batch[-1][0])
            moved += blocks.insert(str(node), [_frame(str(boot), row, extra) for row in batch])
    db.execute("DROP TABLE gpu_samples")
    db.execute("DROP TABLE samples")
    return moved


def _more_gpus(
    db: sqlite3.Connection, key: tuple[str, str], first: int, last: int
) -> dict[int, list[GpuValues]]:
    """The second and further GPUs of the boot's samples ``first`` to ``last``, by seq."""
    extra: dict[int, list[GpuValues]] = {}
    for seq, gpu, uuid, power, energy, util in db.execute(
        "SELECT seq, gpu, uuid, power_w, energy_j, util_ratio FROM gpu_samples"
        " WHERE node = ? AND boot_id = ? AND seq BETWEEN ? AND ? ORDER BY seq, gpu",
        (*key, first, last),
    ):
        extra.setdefault(seq, []).append(GpuValues(gpu, uuid, power, energy, util))
    return extra


def _frame(boot: str, row: tuple[Any, ...], extra: dict[int, list[GpuValues]]) -> SampleFrame:
    seq, wall, mono, interval, used, uuid, power, energy, util, raw = row
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = {}
    data = data if isinstance(data, dict) else {}
    signals = {
        g["uuid"]: g for g in data.get("gpus") or () if isinstance(g, dict) and isinstance(g.get("uuid"), str)
    }
    first = [GpuValues(0, uuid, power, energy, util)] if uuid is not None else []
    gpus = tuple(_with_signals(g, signals.get(g.uuid)) for g in (*first, *extra.get(seq, ())))
    sensors, cache = _checked_sensors(data.get("sensors")), _page_cache(data.get("memory"))
    return SampleFrame(seq, boot, wall, mono, interval, used, gpus, "", sensors, cache)


def _page_cache(memory: Any) -> int | None:
    """The raw frame's page cache, read leniently (the old rows never checked it): a count, else unknown."""
    cache = memory.get("page_cache_bytes") if isinstance(memory, dict) else None
    return cache if type(cache) is int and 0 <= cache <= INT64_MAX else None


def _with_signals(gpu: GpuValues, frame_gpu: dict[str, Any] | None) -> GpuValues:
    if frame_gpu is None:
        return gpu
    return msgspec.structs.replace(
        gpu,
        sm_clock_hz=signal_float(frame_gpu.get("sm_clock_hz")),
        temperature_c=signal_float(frame_gpu.get("temperature_c")),
        clock_event_reasons=signal_int(frame_gpu.get("clock_event_reasons")),
    )


def _checked_sensors(entries: Any) -> tuple[SensorValues, ...]:
    out = []
    for entry in entries if isinstance(entries, list) else ():
        try:
            out.append(sensor_values(entry))
        except FrameError:
            continue
    return tuple(out)
