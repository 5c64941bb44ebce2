"""Samples kept as blocks (store/codec.py, sample_block.py, sample_store.py, convert.py): exact round trips,
every field an export reads kept, small blocks merged, replays recognised, an older file's samples moved."""

from __future__ import annotations

import pathlib
import sqlite3
import zlib
from typing import Any

import msgspec
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from helpers.frames import T0, frame_of
from sparkwatch.core.clock import ClockOffset
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store, codec
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.sample_block import (
    SMALL,
    SMALL_INTS,
    column_lists,
    concat,
    decode_blob,
    encode_lists,
    from_frames,
)
from sparkwatch.store.sample_store import TARGET
from sparkwatch.store.schema import BLOCKS_SCHEMA, MIGRATIONS
from sparkwatch.wire import SampleFrame

S = 1_000_000_000

ints = hnp.arrays(np.int64, st.integers(0, 50), elements=st.integers(-(2**63), 2**63 - 1))
floats = hnp.arrays(np.float64, st.integers(0, 50), elements=st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=60, deadline=None)
@given(a=ints, b=floats, words=st.lists(st.text(max_size=5), max_size=4))
def test_the_codec_gives_back_every_bit(a: np.ndarray, b: np.ndarray, words: list[str]) -> None:
    b = b.copy()
    if len(b):
        b[0] = -0.0
    # runs of one kind and length are decoded together: same-kind neighbours of equal and other lengths
    given = {"a": a, "a2": a[::-1].copy(), "c": a[:3].copy(), "b": b, "b2": b[::-1].copy(), "d": a[1:].copy()}
    columns, strings = codec.decode(codec.encode(given, words))
    assert strings == words and list(columns) == list(given)
    for name, column in given.items():
        assert columns[name].dtype == column.dtype
        assert columns[name].view(np.uint64).tolist() == column.view(np.uint64).tolist()  # NaN, -0.0


def test_a_damaged_block_is_a_codec_error() -> None:
    """Bytes that are not a block, and (a KeyError or TypeError before, which cut retention short and was a
    500) well-formed lists that are not a block's."""
    blob = codec.encode({"a": np.arange(10)}, [])
    lists = [zlib.compress(orjson.dumps(d)) for d in ({"c": 5, "s": []}, {"x": 1}, [1], {"c": {"seq": [1]}})]
    for bad in (b"nonsense", blob[:-3], b"SWJ1" + blob[4:], *(b"SWJ1" + x for x in lists)):
        with pytest.raises(codec.CodecError):
            decode_blob(bad)


def frame(seq: int, *, boot: str = "b1", sensors: list[dict[str, object]] | None = None) -> SampleFrame:
    """A GB10-like sample with two GPUs' worth of variety: channels and clock signals in the frame."""
    gpus: list[dict[str, Any]] = [
        {
            "index": 0,
            "uuid": "GPU-a",
            "power_w": 40.0 + seq % 7,
            "energy_j": 100.0 + seq,
            "util_ratio": 0.5,
            "sm_clock_hz": 2.4e9,
            "temperature_c": 51.0,
            "clock_event_reasons": 2**64 - 1,
        },
        {"index": 1, "uuid": "GPU-b", "power_w": None, "energy_j": None, "util_ratio": None},
    ]
    channels = [
        {"sensor": "sys_total", "kind": "system", "source": "hwmon:spbm", "power_w": 90.5, "energy_j": None},
        {"sensor": "gpu", "kind": "gpu", "power_w": None, "energy_j": 3.0 * seq},
    ]
    used = None if seq % 5 == 0 else 10**9 + seq
    cache = None if seq % 3 == 0 else 2 * 10**9 + seq
    return frame_of(
        seq,
        gpus,
        used_bytes=used,
        page_cache_bytes=cache,
        boot=boot,
        sensors=channels if sensors is None else sensors,
    )


@pytest.mark.parametrize("count", [1, SMALL - 1, SMALL, 300])
@pytest.mark.parametrize("small", [False, True])
def test_a_block_keeps_every_field_an_export_reads(count: int, small: bool) -> None:
    """In either stored form: the column codec's, or a live link's small JSON block."""
    frames = [frame(seq) for seq in range(1, count + 1)]
    blob = encode_lists(*column_lists(frames)) if small else from_frames(frames).encode()
    block = decode_blob(blob)
    gpu = block.gpu_rows()
    assert gpu.uuid.tolist() == ["GPU-a", "GPU-b"] * count and gpu.gpu_index.tolist() == [0, 1] * count
    assert gpu.power_w[0::2].tolist() == [40.0 + s % 7 for s in range(1, count + 1)]
    assert np.isnan(gpu.power_w[1::2]).all() and np.isnan(gpu.util_ratio[1::2]).all()  # unknown stays unknown
    assert (
        gpu.t_mono_ns[0::2].tolist()
        == gpu.t_mono_ns[1::2].tolist()
        == [s * S // 10 for s in range(1, count + 1)]
    )
    memory = block.mem_rows()
    used = [None if s % 5 == 0 else 10**9 + s for s in range(1, count + 1)]
    assert [None if np.isnan(u) else int(u) for u in memory.used_bytes] == used
    cache = [None if s % 3 == 0 else 2 * 10**9 + s for s in range(1, count + 1)]
    assert [None if np.isnan(c) else int(c) for c in memory.page_cache_bytes] == cache
    sensors = block.sensor_rows()
    assert (
        sensors.text(0).tolist() == ["sys_total", "gpu"] * count
        and sensors.text(2).tolist() == ["hwmon:spbm", "hwmon"] * count
    )
    assert (
        sensors.text(1).tolist() == ["system", "gpu"] * count
        and sensors.power_w[0] == 90.5
        and np.isnan(sensors.power_w[1])
    )
    assert sensors.energy_j[1::2].tolist() == [3.0 * s for s in range(1, count + 1)]
    signals = block.signal_rows()
    assert signals.uuid.tolist() == ["GPU-a", "GPU-b"] * count
    assert signals.sm_clock_hz[0] == 2.4e9 and np.isnan(signals.sm_clock_hz[1])
    assert (
        signals.reasons[0::2].tolist() == [2**63 - 1] * count
        and signals.reasons[1::2].tolist() == [-1] * count
    )


@pytest.mark.parametrize("count", [3, SMALL])
def test_a_block_stored_before_the_page_cache_was_kept_reads_it_as_unknown(count: int) -> None:
    """Blocks written by an earlier coordinator (both forms) have no page cache column: unknown, not 0."""
    frames = [frame(seq) for seq in range(1, count + 1)]
    lists, strings = column_lists(frames)
    del lists["mem_page_cache_bytes"]
    if count < SMALL:
        blob = encode_lists(lists, strings)
    else:
        columns = {k: v for k, v in from_frames(frames).columns.items() if k != "mem_page_cache_bytes"}
        blob = codec.encode(columns, strings)
    old = decode_blob(blob)
    assert np.isnan(old.mem_rows().page_cache_bytes).all() and len(old.mem_rows().page_cache_bytes) == count
    assert old.mem_rows().used_bytes[0] == 10**9 + 1
    joined = concat([old, decode_blob(from_frames(frames).encode())], 2 * count)  # old beside new
    cache = joined.mem_rows().page_cache_bytes
    assert np.isnan(cache[:count]).all() and cache[count] == 2 * 10**9 + 1


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    channels=st.lists(st.integers(0, 3), min_size=1, max_size=5),
    hint=st.sampled_from(["exact", "none", "under", "over"]),
)
def test_blocks_gathered_as_they_come_equal_their_concatenation(
    sizes: list[int], channels: list[int], hint: str
) -> None:
    """The streamed gathering a read uses gives the columns and string codes of a plain concatenation
    whatever the count it is told: blocks with more rows per sample than the first, or other strings."""
    blocks, seq = [], 1
    for k, size in enumerate(sizes):
        extra = channels[k % len(channels)]
        rows = [{"sensor": f"s{k}-{c}", "kind": "system", "power_w": float(c)} for c in range(extra)]
        blocks.append(from_frames([frame(s, sensors=rows) for s in range(seq, seq + size)]))
        seq += size
    total = seq - 1
    told = {"exact": total, "none": None, "under": total // 2, "over": total * 2 + 3}[hint]
    got = concat(iter(blocks), told)
    expected = {name: np.concatenate([b.columns[name] for b in blocks]) for name in blocks[0].columns}
    assert len(got) == total and list(got.columns) == list(expected)
    for name, column in expected.items():
        if name.endswith("_str"):  # codes into each one's own table: compare the strings they name
            mine = [got.strings[c] for c in got.columns[name].tolist()]
            theirs = [s for b in blocks for s in (b.strings[c] for c in b.columns[name].tolist())]
            assert mine == theirs
        elif column.dtype.kind == "f":  # bit for bit: NaN payloads and -0.0 too
            assert got.columns[name].view(np.uint64).tolist() == column.view(np.uint64).tolist()
        else:
            assert got.columns[name].tolist() == column.tolist()
    if len(blocks) > 1 and sum(sizes[1:]):  # gathered, not the one block as it was: counts and codes narrow
        assert {n for n, c in got.columns.items() if c.dtype == np.int32} == SMALL_INTS


def test_an_index_beyond_int32_widens_its_gathered_column() -> None:
    """An agent may number a GPU up to int64's top (the wire allows it): the gathered column widens."""
    wide = frame(3)
    wide = wide._replace(
        gpus=tuple(msgspec.structs.replace(g, gpu_index=2**40 + g.gpu_index) for g in wide.gpus)
    )
    blocks = [from_frames([frame(1), frame(2)]), from_frames([wide])]
    got = concat(iter(blocks), 3)
    assert got.columns["gpu_index"].dtype == np.int64
    assert got.gpu_rows().gpu_index.tolist() == [0, 1, 0, 1, 2**40, 2**40 + 1]


def test_rows_follow_their_samples_when_some_are_taken() -> None:
    frames = [frame(seq, sensors=[] if seq % 2 else None) for seq in range(1, 9)]
    block = from_frames(frames).take(np.array([7, 2, 3]))
    assert block.seq.tolist() == [8, 3, 4]
    assert block.sensor_rows().energy_j[1::2].tolist() == [24.0, 12.0]  # seq 8 and 4 have channels; 3 none
    assert block.gpu_rows().power_w[0::2].tolist() == [41.0, 43.0, 44.0]


def blocks_of(store: Store) -> list[tuple[int, int, int]]:
    with sqlite3.connect(f"file:{store.path}?mode=ro", uri=True) as db:
        return db.execute(
            "SELECT seq_first, seq_last, count FROM sample_blocks ORDER BY seq_first"
        ).fetchall()


def test_a_live_links_small_batches_merge_into_one_block(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    for seq in range(1, TARGET + 6):
        assert store.ingest("n1", "b1", [frame(seq)]) == 1
    rows = blocks_of(store)
    assert rows[0] == (1, TARGET, TARGET) and len(rows) == 6  # merged at TARGET, five small ones since
    assert store.count_samples("n1") == TARGET + 5
    block = store.boot_samples("n1", "b1").read("t_mono_ns", 0, 10**15)
    assert block.seq.tolist() == list(range(1, TARGET + 6))
    cache = block.mem_rows().page_cache_bytes  # merged as it came: unknown stays unknown
    assert [None if np.isnan(c) else int(c) for c in cache] == [
        None if s % 3 == 0 else 2 * 10**9 + s for s in range(1, TARGET + 6)
    ]


def test_replays_and_filled_holes_are_stored_once(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    assert store.ingest("n1", "b1", [frame(s) for s in (*range(1, 100), *range(150, 200))]) == 149
    assert store.ingest("n1", "b1", [frame(s) for s in range(90, 160)]) == 50  # the hole 100..149 only
    assert store.ingest("n1", "b1", [frame(5), frame(5), frame(300)]) == 1
    store.close()
    reopened = Store(tmp_path / "sw.db")  # what it remembered is read back from the file
    assert reopened.ingest("n1", "b1", [frame(s) for s in range(1, 301)]) == 100  # 200..299
    block = reopened.boot_samples("n1", "b1").read("t_mono_ns", 0, 10**15)
    assert block.seq.tolist() == list(range(1, 301))


def test_a_read_is_the_contiguous_run_of_samples_inside_the_span(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "sw.db")
    store.ingest("n1", "b1", [frame(s) for s in range(1, 200)])
    store.ingest("n1", "b1", [frame(s) for s in range(200, 400)])
    boot = store.boot_samples("n1", "b1")
    assert boot.read("t_mono_ns", 150 * S // 10, 250 * S // 10).seq.tolist() == list(range(150, 251))
    assert boot.read("t_wall_ns", T0 + 399 * S // 10, T0 + 10**12).seq.tolist() == [399]
    assert len(boot.read("t_mono_ns", 500 * S, 600 * S)) == 0


def gpu(f: SampleFrame, i: int) -> tuple[object, ...]:
    """A GPU's row as schema 8 stored it: index, uuid, power, energy, util."""
    g = f.gpus[i]
    return (g.gpu_index, g.uuid, g.power_w, g.energy_j, g.util_ratio)


def test_an_older_database_has_its_samples_moved_and_exports_the_same(tmp_path: pathlib.Path) -> None:
    """A schema-8 file (rows with raw frames) upgraded: the export of a run over it does not change."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for script in MIGRATIONS[: BLOCKS_SCHEMA - 1]:
        db.executescript(script)
    db.execute(f"PRAGMA user_version = {BLOCKS_SCHEMA - 1}")
    frames = [frame(seq) for seq in range(1, 2500)]
    db.executemany(
        "INSERT INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                "n1",
                f.boot_id,
                f.seq,
                f.t_wall_ns,
                f.t_mono_ns,
                f.interval_s,
                f.mem_used_bytes,
                *gpu(f, 0)[1:],
                f.raw,
            )
            for f in frames
        ],
    )
    db.executemany(
        "INSERT INTO gpu_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [("n1", f.boot_id, f.seq, *gpu(f, 1)) for f in frames],
    )
    db.commit()
    db.close()
    upgraded = Store(path)
    assert upgraded.schema_version == len(MIGRATIONS) and upgraded.count_samples() == len(frames)
    fresh = Store(tmp_path / "new.db")
    fresh.ingest("n1", "b1", frames)
    exports = []
    for store in (upgraded, fresh):
        store.record_hello("n1", {"type": "hello", "boot_id": "b1"})
        store.add_offset("n1", "b1", ClockOffset(0, 10**6, 5, 8, mono_offset_ns=T0), t_ns=T0)
        store.create_run(RunRow("r1", "old", T0, None, 0.1, 0.5, "run"))
        store.end_run("r1", T0 + 240 * S)
        exports.append(export_run(store, "r1", ["n1"], lambda: T0 + 300 * S))
    assert exports[0]["nodes"] == exports[1]["nodes"] and exports[0]["nodes"][0]["samples"]["count"] > 2000
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "samples" not in tables and "gpu_samples" not in tables
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # rebuilt once: pages can go back


def test_a_store_sample_is_small_on_disk(tmp_path: pathlib.Path) -> None:
    """Not a benchmark (benchmarks/store_size.py measures real frames): blocks, not rows with frames."""
    store = Store(tmp_path / "sw.db")
    store.ingest("n1", "b1", [frame(s) for s in range(1, 5001)])
    with sqlite3.connect(f"file:{store.path}?mode=ro", uri=True) as db:
        (blob_bytes,) = db.execute("SELECT SUM(length(data)) FROM sample_blocks").fetchone()
    assert blob_bytes / 5000 < 100
