"""Samples kept as blocks: one row per run of a boot's samples, its columns in one blob (sample_block.py).

An ingested batch becomes one block in the batch's transaction, so what was committed survives a crash as
before. A live link stores a frame or two at a time; such small blocks (JSON lists) are merged into one
columnar block once they add up to ``TARGET`` samples, in the transaction of the batch that completes
them. Each row carries its seq range and the range of both agent clocks, so a read finds the blocks of a
span without decoding the others, and retention drops whole blocks.

Inserts are idempotent per (node, boot, seq): a seq at or below the boot's highest stored seq is checked
against the blocks that could hold it, and dropped when stored.
"""

from __future__ import annotations

import itertools
import logging
import operator
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from sparkwatch.store.codec import CodecError
from sparkwatch.store.row_values import is_integer, shown_value
from sparkwatch.store.rows import I64
from sparkwatch.store.sample_block import (
    SMALL,
    SampleBlock,
    arrays_of,
    column_lists,
    concat,
    decode_blob,
    empty,
    encode_lists,
)
from sparkwatch.store.tx import Damaged
from sparkwatch.wire import SampleFrame

#: Samples in a block merged from small ones (100 s at 10 Hz; ~15 KB of blob for a GB10 node).
TARGET = 1000
#: A block holds TARGET samples from one batch, fewer than TARGET + SMALL merged from small ones; a count
#: past this bound (headroom for any other writer, past or future) is damage, which a read would size its
#: columns by (a count of 1e11 asked for 745 GiB).
MAX_COUNT = 1 << 16
#: The clock columns a span can be read by, with the block columns that bound them.
CLOCKS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"t_mono_ns": ("mono_first_ns", "mono_last_ns"), "t_wall_ns": ("wall_first_ns", "wall_last_ns")}
)
#: The columns that place a block, integers in every row the store writes: one of text in the span's bound
#: would pass the block over (SQLite sorts text after every number), read as no samples or stored again.
BOUNDS = ("seq_first", "seq_last", "wall_first_ns", "wall_last_ns", "mono_first_ns", "mono_last_ns")
#: Each first bound at or before its last (the store writes a block's extremes): a first past its last
#: places the block nowhere its samples are, so a span's read passed it over.
PAIRS = (("seq_first", "seq_last"), ("wall_first_ns", "wall_last_ns"), ("mono_first_ns", "mono_last_ns"))
_WHOLE_BOUNDS = " AND ".join(
    [*(f"typeof({column}) = 'integer'" for column in BOUNDS), *(f"{a} <= {b}" for a, b in PAIRS)]
)
#: A small block by its count, as the store writes one: a damaged count is none (counts of -2**63 summed
#: past SQLite's integers, and a merge would have rewritten the row unseen).
_SMALL = f"typeof(count) = 'integer' AND count BETWEEN 1 AND {SMALL - 1}"
_BOOT = operator.attrgetter("boot_id")
_SEQ = operator.attrgetter("seq")
log = logging.getLogger(__name__)


class SampleBlocks:
    """The ``sample_blocks`` table of one connection, with what it remembers per boot between batches (the
    highest stored seq and the samples in small blocks); :meth:`forget` after a failed transaction."""

    def __init__(self, db: sqlite3.Connection, *, kept_tops: bool = True) -> None:
        """``kept_tops``: the file has ``boots.seq_dropped`` (schema 12); not while an older one is moved
        into blocks (store/convert.py, inside schema 9's migration)."""
        self._db = db
        self._kept_tops = kept_tops
        self._top: dict[tuple[str, str], int] = {}
        self._loose: dict[tuple[str, str], int] = {}
        self._unmerged: set[int] = set()  # small blocks that do not decode, said once each

    def forget(self) -> None:
        self._top.clear()
        self._loose.clear()

    def insert(self, node: str, frames: Sequence[SampleFrame]) -> int:
        """Store the frames not stored yet (call inside a transaction); returns how many were new."""
        by_boot: dict[str, list[SampleFrame]] = {}
        if frames and list(map(_BOOT, frames)).count(frames[0].boot_id) == len(frames):
            by_boot[frames[0].boot_id] = list(frames)  # a link's batch: one boot
        else:
            for f in frames:
                by_boot.setdefault(f.boot_id, []).append(f)
        new = 0
        for boot, group in by_boot.items():
            key = (node, boot)
            fresh = self._fresh(key, group)
            for at in range(0, len(fresh), TARGET):  # a replay of a long ring: blocks of TARGET
                new += self._add(key, fresh[at : at + TARGET])
        return new

    def _add(self, key: tuple[str, str], fresh: list[SampleFrame]) -> int:
        """One block of new samples (fewer than ``SMALL``: a small one, merged once they add up)."""
        lists, strings = column_lists(fresh)
        small = len(fresh) < SMALL
        loose = self._loose_count(key)  # before this block is in the table
        blob = encode_lists(lists, strings) if small else arrays_of(lists, strings).encode()
        self._put(key, _Meta.of(lists["seq"], lists["t_wall_ns"], lists["t_mono_ns"]), blob)
        self._top[key] = max(self.top_seq(*key), lists["seq"][-1])
        if small:
            self._loose[key] = loose + len(fresh)
            if self._loose[key] >= TARGET:
                self.merge_small(*key)
        return len(fresh)

    def _fresh(self, key: tuple[str, str], group: list[SampleFrame]) -> list[SampleFrame]:
        """The group's frames in seq order, once each, without those already stored."""
        top = self.top_seq(*key)
        seqs = list(map(_SEQ, group))
        if seqs[0] > top and all(map(operator.lt, seqs, itertools.islice(seqs, 1, None))):
            return group  # ascending, and all new
        once = {f.seq: f for f in reversed(group)}  # the first of a repeated seq wins
        ordered = [once[s] for s in sorted(once)]
        old = [f.seq for f in ordered if f.seq <= top]
        stored = self._stored_seqs(key, min(old), max(old)) if old else set()
        return [f for f in ordered if f.seq not in stored]

    def _stored_seqs(self, key: tuple[str, str], lo: int, hi: int) -> set[int]:
        """The seqs in [lo, hi] stored already, the boot's seq ranges checked again first: one edited to
        text since this connection's first batch of the boot (no longer compared as a number) would pass its
        block over, and its samples would be stored twice."""
        self._checked_top(key)
        rows = self._db.execute(
            "SELECT id, data FROM sample_blocks WHERE node = ? AND boot_id = ?"
            " AND seq_first <= ? AND seq_last >= ?",
            (*key, hi, lo),
        ).fetchall()
        return {s for block in _decoded(rows, key) for s in block.seq.tolist()}

    def _put(self, key: tuple[str, str], meta: _Meta, blob: bytes) -> None:
        self._db.execute(
            "INSERT INTO sample_blocks (node, boot_id, seq_first, seq_last, wall_first_ns, wall_last_ns,"
            " mono_first_ns, mono_last_ns, count, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*key, *meta, blob),
        )

    def top_seq(self, node: str, boot: str) -> int:
        """The boot's highest stored seq (0: none); ``Damaged`` where a block's seq range is not integers
        or its first past its last, which would otherwise fail every batch of the boot (a link retrying it
        for ever) or let one repeat (a block passed over when the stored seqs are looked for)."""
        key = (node, boot)
        if key not in self._top:
            self._top[key] = self._checked_top(key)
        return self._top[key]

    def _checked_top(self, key: tuple[str, str]) -> int:
        top, whole = self._db.execute(
            "SELECT MAX(seq_last), MIN(typeof(seq_first) = 'integer' AND typeof(seq_last) = 'integer'"
            " AND seq_first <= seq_last) FROM sample_blocks WHERE node = ? AND boot_id = ?",
            key,
        ).fetchone()
        if whole == 0:
            raise self._damaged(key, {"seq_first": _not_integer, "seq_last": _not_integer}, PAIRS[:1])
        top = top if top is not None else 0
        if self._kept_tops:  # the top of blocks dropped since (retention, a deleted run)
            dropped = self._db.execute(
                "SELECT seq_dropped FROM boots WHERE node = ? AND boot_id = ?", key
            ).fetchone()
            if dropped is not None and isinstance(dropped[0], int):
                top = max(top, dropped[0])
        return int(top)

    def _loose_count(self, key: tuple[str, str]) -> int:
        if key not in self._loose:
            row = self._db.execute(
                f"SELECT SUM(count) FROM sample_blocks WHERE node = ? AND boot_id = ? AND {_SMALL}", key
            ).fetchone()
            self._loose[key] = int(row[0] or 0)
        return self._loose[key]

    def merge_small(self, node: str, boot: str) -> int:
        """The boot's small blocks as one columnar block (call inside a transaction); returns how many
        blocks went into it."""
        key = (node, boot)
        rows = self._db.execute(
            f"SELECT id, data FROM sample_blocks WHERE node = ? AND boot_id = ? AND {_SMALL}"
            " ORDER BY seq_first",
            key,
        ).fetchall()
        self._loose[key] = 0
        blocks = {i: b for i, data in rows if (b := self._readable(i, data, key)) is not None}
        if len(blocks) < 2:
            return 0
        block = in_seq_order(concat(blocks.values()))
        c = block.columns
        self._db.executemany("DELETE FROM sample_blocks WHERE id = ?", [(i,) for i in blocks])
        self._put(key, _Meta.of(c["seq"], c["t_wall_ns"], c["t_mono_ns"]), block.encode())
        return len(blocks)

    def _readable(self, block_id: int, data: bytes, key: tuple[str, str]) -> SampleBlock | None:
        """A small block, decoded; None where it does not decode: it stays out of the merge, as it is, said
        once per block (retention merges at every pass). Merged, the boot's other samples failed with it,
        and every later pass stopped there while the idle samples behind it were never dropped."""
        try:
            return decode_blob(data)
        except CodecError as exc:
            if block_id not in self._unmerged:
                self._unmerged.add(block_id)
                log.warning("%s; left as it is, not merged", _named(exc, block_id, key))
            return None

    def boots_with_small(self) -> list[tuple[str, str]]:
        """Boots holding more than one small block: one that stopped before they added up, or a live one
        (merging its small blocks early costs nothing but a smaller block)."""
        rows = self._db.execute(
            f"SELECT node, boot_id FROM sample_blocks WHERE {_SMALL}"
            " GROUP BY node, boot_id HAVING COUNT(*) > 1"
        )
        return [(str(n), str(b)) for n, b in rows]

    def read(
        self, node: str, boot: str, clock: str, t_from: int, t_to: int, *, next_within: int = 0
    ) -> SampleBlock:
        """The boot's samples from the first whose ``clock`` is ≥ ``t_from`` to the last whose ``clock`` is
        ≤ ``t_to``, in seq order, among the blocks whose range of that clock meets the span (by the monotonic
        clock, every sample in it; by a wall clock that stepped, a block lying wholly outside is left out);
        with ``next_within``, the first sample after ``t_to`` too, where it is at most that much later (by a
        clock that only grows: the one that closes the span's last interval, and no other). ``Damaged`` where
        a block of the boot has a bound that is not an integer or a first bound past its last, or one of the
        span a count the store never writes."""
        first, last = CLOCKS[clock]
        bounds = (_int64(t_from), _int64(t_to))  # a clock fit far out of range must not overflow SQLite
        boot_rows = "FROM sample_blocks WHERE node = :node AND boot_id = :boot"
        span = f"{last} >= :lo AND {first} <= :hi"
        asked = {"node": node, "boot": boot, "lo": bounds[0], "hi": _int64(t_to + next_within)}
        # one pass over the boot's rows (the index's node, boot prefix: what the span's read walks anyway):
        # every block's bounds checked, a damaged one could lie in the span; the span's columns are sized by
        # its counts, each checked (TOTAL: a damaged one cannot overflow)
        samples, counted, placed = self._db.execute(
            f"SELECT TOTAL(n), MIN(n IS NULL OR {_a_count('n')}), MIN(placed)"
            f" FROM (SELECT CASE WHEN {span} THEN count END AS n, {_WHOLE_BOUNDS} AS placed {boot_rows})",
            asked,
        ).fetchone()
        if placed == 0:
            raise self._damaged((node, boot), dict.fromkeys(BOUNDS, _not_integer), PAIRS)
        if counted == 0:
            raise self._damaged((node, boot), {"count": _not_a_count})
        if not samples:
            return empty()
        # one blob at a time, each decoded straight into the whole span's columns
        rows = self._db.execute(f"SELECT id, data {boot_rows} AND {span} ORDER BY seq_first", asked)
        block = in_seq_order(concat(_decoded(rows, (node, boot)), int(samples)))
        t = block.columns[clock]
        if bool(np.all(t[1:] >= t[:-1])):  # the monotonic clock (a wall clock that never stepped back)
            lo, hi = int(np.searchsorted(t, bounds[0])), int(np.searchsorted(t, bounds[1], side="right"))
            if next_within and hi < len(t) and int(t[hi]) <= bounds[1] + next_within:
                hi += 1
        else:
            inside = np.flatnonzero((t >= bounds[0]) & (t <= bounds[1]))
            lo, hi = (int(inside[0]), int(inside[-1]) + 1) if len(inside) else (0, 0)
        return block.between(lo, hi) if hi > lo else empty()

    def _damaged(
        self,
        key: tuple[str, str],
        checks: Mapping[str, Callable[[Any], str | None]],
        pairs: Sequence[tuple[str, str]] = (),
    ) -> Damaged:
        """The refusal naming the first of the boot's blocks a column of which fails its check, or whose
        first bound of one of ``pairs`` (columns of ``checks``) is past its last (a read found one: only
        then are the boot's rows read one by one)."""
        rows = self._db.execute(
            f"SELECT id, {', '.join(checks)} FROM sample_blocks WHERE node = ? AND boot_id = ? ORDER BY id",
            key,
        )
        for block_id, *values in rows:
            row = dict(zip(checks, values, strict=True))
            problems = [
                f"{column} {shown_value(row[column])} {problem}"
                for column, check in checks.items()
                if (problem := check(row[column])) is not None
            ] or [f"{a} {row[a]} is past {b} {row[b]}" for a, b in pairs if row[a] > row[b]]
            if problems:
                where = f"sample block {block_id} of node {key[0]}, boot {key[1]}"
                return Damaged(f"{where} is damaged in the database: {problems[0]}")
        return Damaged(f"a sample block of node {key[0]}, boot {key[1]} is damaged in the database")

    def count(self, node: str | None = None) -> int:
        """The samples stored (of one node); ``Damaged`` where a block's count is not one the store writes
        (their SUM raised SQLite's integer overflow, or said a number of samples nobody stored)."""
        one = node is not None
        picked, args = ("FROM sample_blocks WHERE node = ?", (node,)) if one else ("FROM sample_blocks", ())
        whole = _a_count("count")
        total, counted = self._db.execute(f"SELECT TOTAL(count), MIN({whole}) {picked}", args).fetchone()
        if counted == 0:
            rows = self._db.execute(f"SELECT node, boot_id, {whole} {picked} ORDER BY id", args)
            key = next((str(n), str(b)) for n, b, ok in rows if not ok)
            raise self._damaged(key, {"count": _not_a_count})
        return int(total)


def _not_integer(value: Any) -> str | None:
    return None if is_integer(value) else "is not an integer"


def _not_a_count(value: Any) -> str | None:
    if is_integer(value) and 1 <= value <= MAX_COUNT:
        return None
    return f"is not a number of samples from 1 to {MAX_COUNT}"


def _a_count(column: str) -> str:
    """SQL: the column is a count as the store writes one (``_not_a_count``'s rule)."""
    return f"(typeof({column}) = 'integer' AND {column} BETWEEN 1 AND {MAX_COUNT})"


def _int64(t: int) -> int:
    return max(-(2**63), min(int(t), 2**63 - 1))


def in_seq_order(block: SampleBlock) -> SampleBlock:
    seq = block.seq
    if len(seq) < 2 or bool(np.all(seq[1:] > seq[:-1])):
        return block
    return block.take(np.argsort(seq, kind="stable"))


class _Meta(NamedTuple):
    """A block row's bounds: its seq range (seqs ascend in a block) and both clocks' extremes."""

    seq_first: int
    seq_last: int
    wall_first_ns: int
    wall_last_ns: int
    mono_first_ns: int
    mono_last_ns: int
    samples: int

    @classmethod
    def of(cls, seq: Sequence[int] | I64, wall: Sequence[int] | I64, mono: Sequence[int] | I64) -> _Meta:
        """From lists or arrays (both clocks' extremes: a wall clock may step back inside a block)."""
        return cls(
            int(seq[0]),
            int(seq[-1]),
            int(min(wall)),
            int(max(wall)),
            int(min(mono)),
            int(max(mono)),
            len(seq),
        )


def _decoded(rows: Iterable[tuple[int, bytes]], key: tuple[str, str]) -> Iterator[SampleBlock]:
    """Each (id, blob) row's block, in order; one that does not decode is ``CodecError`` naming it."""
    for block_id, data in rows:
        try:
            yield decode_blob(data)
        except CodecError as exc:
            raise CodecError(_named(exc, block_id, key)) from None


def _named(exc: CodecError, block_id: int, key: tuple[str, str]) -> str:
    """The codec's words with the block's id, node and boot: which row to look at, or delete."""
    said = str(exc).removeprefix("damaged sample block: ").removeprefix("damaged column block: ")
    return f"damaged sample block {block_id} of node {key[0]} (boot {key[1]}): {said}"
