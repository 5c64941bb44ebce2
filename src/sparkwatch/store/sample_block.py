"""A run of one boot's samples held as columns: what the store keeps of each sample, and nothing more.

Exactly the fields an export reads: the sample's clocks, interval, memory used and page cache; per GPU its
index, UUID, power, energy counter, utilisation and clock signals (SM clock, temperature, clock event
reasons: read leniently, a value of the wrong type is unknown, as the export always read them); per power
channel its name, kind, source, power and energy. Rows of a GPU or a channel belong to their sample by a
per-sample count. Unknown floats are NaN, unknown memory and reasons -1.
"""

from __future__ import annotations

import itertools
import operator
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import orjson

from sparkwatch.store import codec
from sparkwatch.store.rows import Channel, GpuRows, MemRows, SensorRows, SignalRows, Text
from sparkwatch.wire import GpuValues, SampleFrame, SensorValues

#: Clock event reason bits kept (a bitmask beyond 63 bits does not fit SQLite's or numpy's integers).
INT63_MASK = 2**63 - 1
_U64_END = 2**64
_GPUS = operator.attrgetter("gpus")
_SENSORS = operator.attrgetter("sensors")
NAN = float("nan")
#: Blocks of fewer samples are stored as deflated JSON lists (:func:`encode_lists`).
SMALL = 64
JSON_MAGIC = b"SWJ1"

SAMPLE_COLUMNS = ("seq", "t_wall_ns", "t_mono_ns", "interval_s", "mem_used_bytes", "mem_page_cache_bytes")
#: Columns added after blocks were first stored: a block written before has none, read as all unknown (-1).
LATER_COLUMNS = frozenset({"mem_page_cache_bytes"})
#: Row groups: the per-sample count column, then the group's columns (``*_str`` index the string table).
#: A channel's string is its name, kind and source as a JSON array: one code per channel and sample.
GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "gpu": (
            *("gpu_index", "gpu_uuid_str", "gpu_power_w", "gpu_energy_j", "gpu_util_ratio"),
            *("gpu_sm_clock_hz", "gpu_temperature_c", "gpu_reasons"),
        ),
        "sensor": ("sensor_channel_str", "sensor_power_w", "sensor_energy_j"),
    }
)
#: Counts, GPU indexes and string codes: small integers, gathered from many blocks as int32 (half the bytes
#: of a node's read of them), widened back should one not fit.
SMALL_INTS = frozenset({"gpu_n", "sensor_n", "gpu_index", "gpu_uuid_str", "sensor_channel_str"})
COLUMNS = (*SAMPLE_COLUMNS, *(f"{g}_n" for g in GROUPS), *(n for names in GROUPS.values() for n in names))
_FLOATS = frozenset(
    {"interval_s", "gpu_power_w", "gpu_energy_j", "gpu_util_ratio", "sensor_power_w", "sensor_energy_j"}
    | {"gpu_sm_clock_hz", "gpu_temperature_c"}
)


@dataclass(frozen=True, slots=True)
class SampleBlock:
    """Columns by name (see ``SAMPLE_COLUMNS`` and ``GROUPS``; ``<group>_n``: rows per sample)."""

    columns: dict[str, np.ndarray]
    strings: list[str]

    def __len__(self) -> int:
        return len(self.columns["seq"])

    @property
    def seq(self) -> np.ndarray:
        return self.columns["seq"]

    def encode(self) -> bytes:
        return codec.encode(self.columns, self.strings)

    @classmethod
    def decode(cls, blob: bytes) -> SampleBlock:
        columns, strings = codec.decode(blob)
        return cls(_with_later(columns) if "seq" in columns else columns, strings)

    def take(self, index: np.ndarray) -> SampleBlock:
        """The samples at ``index`` (positions, or a boolean mask), in that order, with their rows."""
        if index.dtype == bool:
            index = np.flatnonzero(index)
        out = {name: self.columns[name][index] for name in SAMPLE_COLUMNS}
        for group, names in GROUPS.items():
            counts = self.columns[f"{group}_n"]
            out[f"{group}_n"] = counts[index]
            rows = _row_index(counts, index)
            out.update({name: self.columns[name][rows] for name in names})
        return SampleBlock(out, self.strings)

    def between(self, first: int, end: int) -> SampleBlock:
        """Samples ``first`` to ``end`` (positions) with their rows, as views: no column is copied."""
        if first == 0 and end == len(self):
            return self
        out = {name: self.columns[name][first:end] for name in SAMPLE_COLUMNS}
        for group, names in GROUPS.items():
            counts = self.columns[f"{group}_n"]
            lo, hi = int(counts[:first].sum()), int(counts[:end].sum())
            out[f"{group}_n"] = counts[first:end]
            out.update({name: self.columns[name][lo:hi] for name in names})
        return SampleBlock(out, self.strings)

    def times(self, group: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Wall time, monotonic time and interval of each row of ``group``: with one row per sample (a
        one-GPU node's GPU rows), the sample columns themselves, not copies."""
        counts = self.columns[f"{group}_n"]
        c = self.columns
        names = ("t_wall_ns", "t_mono_ns", "interval_s")
        if len(counts) and int(counts.min()) == 1 == int(counts.max()):
            return c["t_wall_ns"], c["t_mono_ns"], c["interval_s"]
        return tuple(np.repeat(c[n], counts) for n in names)  # type: ignore[return-value]

    def text(self, name: str) -> Text:
        """A string column's values (its codes looked up in the block's table)."""
        values: Text = _table(self.strings)[self.columns[name]]
        return values

    def gpu_rows(self) -> GpuRows:
        c = self.columns
        return GpuRows(
            *self.times("gpu"),
            gpu_index=c["gpu_index"],
            uuid=self.text("gpu_uuid_str"),
            power_w=c["gpu_power_w"],
            energy_j=c["gpu_energy_j"],
            util_ratio=c["gpu_util_ratio"],
        )

    def mem_rows(self) -> MemRows:
        c = self.columns
        used, cache = (_known_bytes(c[name]) for name in ("mem_used_bytes", "mem_page_cache_bytes"))
        return MemRows(c["t_wall_ns"], c["t_mono_ns"], c["interval_s"], used, cache)

    def sensor_rows(self) -> SensorRows:
        c = self.columns
        codes = c["sensor_channel_str"]
        channels: list[Channel | None] = [None] * len(self.strings)
        used = np.flatnonzero(np.bincount(codes)) if len(codes) else codes  # codes index a small table
        for i in used.tolist():  # a channel's name, kind and source, as a JSON array
            name, kind, source = orjson.loads(self.strings[i])
            channels[i] = (name, kind, source)
        return SensorRows(
            counts=c["sensor_n"],
            power_w=c["sensor_power_w"],
            energy_j=c["sensor_energy_j"],
            channel=codes,
            channels=tuple(channels),
        )

    def signal_rows(self, gpu: GpuRows | None = None) -> SignalRows:
        """Columns of the GPU rows: with ``gpu`` (this block's :meth:`gpu_rows`), its times and UUIDs."""
        c = self.columns
        gpu = gpu if gpu is not None else self.gpu_rows()
        return SignalRows(
            gpu.t_wall_ns,
            gpu.t_mono_ns,
            uuid=gpu.uuid,
            sm_clock_hz=c["gpu_sm_clock_hz"],
            temperature_c=c["gpu_temperature_c"],
            reasons=c["gpu_reasons"],
        )


def _known_bytes(column: np.ndarray) -> np.ndarray:
    """A byte count column as floats, unknown (-1) as NaN."""
    out = column.astype(np.float64)
    out[column < 0] = np.nan
    return out


def _with_later(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``columns`` with each of ``LATER_COLUMNS`` it lacks (a block stored before that column was) as
    unknowns, one per sample."""
    for name in LATER_COLUMNS - columns.keys():
        columns[name] = np.full(len(columns["seq"]), -1, np.int64)
    return columns


def _table(values: Sequence[str | None]) -> Text:
    table = np.empty(len(values), dtype=object)
    table[:] = values
    return table


def _row_index(counts: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The positions of the rows of samples ``index``, sample by sample (rows follow their samples)."""
    starts = np.cumsum(counts) - counts
    taken = counts[index]
    firsts = np.repeat(starts[index], taken)
    within = np.arange(int(taken.sum())) - np.repeat(np.cumsum(taken) - taken, taken)
    rows: np.ndarray = firsts + within
    return rows


def concat(blocks: Iterable[SampleBlock], samples: int | None = None) -> SampleBlock:
    """The blocks' samples one after another, over one string table. With ``samples`` (how many there are
    in all), each block is copied into columns of that size as it comes and can be let go: a reader holds
    one decoded block beside the result, not every block and then their concatenation."""
    gathered = _Gathered(samples)
    for block in blocks:
        gathered.add(block)
    return gathered.block()


class _Gathered:
    """Columns filled block by block. Sample columns are sized by the count given; a group's by its rows per
    sample in the first block, grown (doubling) when a later block has more."""

    def __init__(self, samples: int | None) -> None:
        self._samples = samples
        self._first: SampleBlock | None = None
        self._columns: dict[str, np.ndarray] = {}
        self._filled: dict[str, int] = {}
        self._strings: dict[str, int] = {}

    def add(self, block: SampleBlock) -> None:
        if self._first is None and not self._columns:
            self._first = block  # one block alone is returned as it is, never copied
            return
        if self._first is not None:
            first, self._first = self._first, None
            self._start(first)
            self._append(first)
        self._append(block)

    def _start(self, first: SampleBlock) -> None:
        samples = max(self._samples or 0, len(first))
        for name, column in first.columns.items():
            group = next((g for g, names in GROUPS.items() if name in names), None)
            per_sample = len(column) / max(len(first), 1) if group is not None else 1.0
            dtype = np.int32 if name in SMALL_INTS else column.dtype
            self._columns[name] = np.empty(int(np.ceil(samples * per_sample)), dtype)
            self._filled[name] = 0

    def _append(self, block: SampleBlock) -> None:
        remap = np.array([self._strings.setdefault(s, len(self._strings)) for s in block.strings] or [0])
        for name, column in block.columns.items():
            at, out = self._filled[name], self._columns[name]
            coded = name.endswith("_str")  # codes into the joined table: below its length, which fits
            values = remap[column] if coded else column
            if (
                name in SMALL_INTS
                and not coded
                and out.dtype != values.dtype
                and len(values)
                and not _fits(values, out.dtype)
            ):
                out = self._columns[name] = out.astype(values.dtype)  # an index or count beyond int32
            if at + len(values) > len(out):
                out = self._columns[name] = _grown(out, at, at + len(values))
            out[at : at + len(values)] = values
            self._filled[name] = at + len(values)

    def block(self) -> SampleBlock:
        if self._first is not None:
            return self._first
        if not self._columns:
            return empty()
        columns = {name: column[: self._filled[name]] for name, column in self._columns.items()}
        return SampleBlock(columns, list(self._strings))


def _fits(values: np.ndarray, dtype: np.dtype[Any]) -> bool:
    limits = np.iinfo(dtype)
    return limits.min <= int(values.min()) and int(values.max()) <= limits.max


def _grown(column: np.ndarray, filled: int, needed: int) -> np.ndarray:
    out = np.empty(max(needed, 2 * len(column)), column.dtype)
    out[:filled] = column[:filled]
    return out


def empty() -> SampleBlock:
    return SampleBlock({n: np.empty(0, np.float64 if n in _FLOATS else np.int64) for n in COLUMNS}, [])


def column_lists(frames: Sequence[SampleFrame]) -> tuple[dict[str, list[Any]], list[str]]:
    """The frames (checked by the wire) as plain column lists and their string table, in the order given:
    the per-sample cost of ingest, so one comprehension per column, no numpy and no call per value."""
    table: dict[str | tuple[str, str, str], int] = {}  # a GPU's UUID, or a channel's name, kind, source
    code = table.setdefault
    gpus: list[GpuValues] = list(itertools.chain.from_iterable(map(_GPUS, frames)))
    entries: list[SensorValues] = list(itertools.chain.from_iterable(map(_SENSORS, frames)))
    c: dict[str, list[Any]] = {
        "seq": [f.seq for f in frames],
        "t_wall_ns": [f.t_wall_ns for f in frames],
        "t_mono_ns": [f.t_mono_ns for f in frames],
        "interval_s": [f.interval_s for f in frames],
        "mem_used_bytes": [-1 if f.mem_used_bytes is None else f.mem_used_bytes for f in frames],
        "mem_page_cache_bytes": [-1 if (b := f.mem_page_cache_bytes) is None else b for f in frames],
        "gpu_n": [len(f.gpus) for f in frames],
        "sensor_n": [len(f.sensors) for f in frames],
        "gpu_index": [g.gpu_index for g in gpus],
        "gpu_uuid_str": [code(g.uuid, len(table)) for g in gpus],
        "gpu_power_w": [NAN if g.power_w is None else g.power_w for g in gpus],
        "gpu_energy_j": [NAN if g.energy_j is None else g.energy_j for g in gpus],
        "gpu_util_ratio": [NAN if g.util_ratio is None else g.util_ratio for g in gpus],
        "gpu_sm_clock_hz": [NAN if g.sm_clock_hz is None else g.sm_clock_hz for g in gpus],
        "gpu_temperature_c": [NAN if g.temperature_c is None else g.temperature_c for g in gpus],
        # a clock-event bitmask (NVML's is 64 bits) as kept: negative or wider than 64 bits is unknown
        "gpu_reasons": [
            r & INT63_MASK if (r := g.clock_event_reasons) is not None and 0 <= r < _U64_END else -1
            for g in gpus
        ],
        "sensor_channel_str": [code((e.sensor, e.kind, e.source), len(table)) for e in entries],
        "sensor_power_w": [NAN if e.power_w is None else e.power_w for e in entries],
        "sensor_energy_j": [NAN if e.energy_j is None else e.energy_j for e in entries],
    }
    return c, [k if isinstance(k, str) else orjson.dumps(k).decode() for k in table]


def from_lists(lists: dict[str, list[Any]], strings: list[str]) -> SampleBlock:
    """Column lists (from :func:`column_lists`, or a small block's JSON, where NaN was written as null)."""
    columns = {
        name: np.array(lists[name], dtype=np.float64 if name in _FLOATS else np.int64)
        for name in COLUMNS
        if name in lists or name not in LATER_COLUMNS
    }
    return SampleBlock(_with_later(columns), strings)


def arrays_of(lists: dict[str, list[Any]], strings: list[str]) -> SampleBlock:
    """:func:`from_lists` for the write side, whose lists hold numbers only (NaN for unknown, never None):
    read by ``np.fromiter``, which skips ``np.array``'s pass to discover their type and shape."""
    columns = {
        name: np.fromiter(lists[name], np.float64 if name in _FLOATS else np.int64, len(lists[name]))
        for name in COLUMNS
    }
    return SampleBlock(columns, strings)


def from_frames(frames: Sequence[SampleFrame]) -> SampleBlock:
    return from_lists(*column_lists(frames))


def encode_lists(lists: dict[str, list[Any]], strings: list[str]) -> bytes:
    """A block of fewer than ``SMALL`` samples (a live link stores one or two frames at a time): its lists
    as deflated JSON, a few microseconds where the column codec's numpy steps cost ~25 µs per column set;
    the store merges such blocks into columnar ones once they add up (``sample_store``)."""
    return JSON_MAGIC + zlib.compress(orjson.dumps({"c": lists, "s": strings}), 1)


def decode_blob(blob: bytes) -> SampleBlock:
    """A stored block of either form."""
    if not isinstance(blob, bytes):  # SQLite keeps any type in any column: an edited row may hold text
        raise codec.CodecError(f"damaged sample block: a {type(blob).__name__}, not a blob")
    if blob[: len(JSON_MAGIC)] == JSON_MAGIC:
        try:
            d = orjson.loads(zlib.decompress(blob[len(JSON_MAGIC) :]))
        except (zlib.error, orjson.JSONDecodeError) as exc:
            raise codec.CodecError(f"damaged sample block: {exc}") from None
        try:
            return from_lists(d["c"], d["s"])  # null (NaN on the way in) becomes NaN again
        except (KeyError, IndexError, TypeError, ValueError) as exc:  # JSON, but not a block's lists
            raise codec.CodecError(
                f"damaged sample block: not a block's lists ({type(exc).__name__})"
            ) from None
    return SampleBlock.decode(blob)
