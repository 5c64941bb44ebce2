"""The coordinator's SQLite store (WAL; migrations by ``PRAGMA user_version``).

Sample inserts are idempotent, keyed by (node, boot_id, seq): a link that resumes or replays can send a
frame twice and nothing changes. Each ingested batch is one transaction, so a crash loses at most the
batch in flight, and everything committed survives a coordinator restart.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sparkwatch.core.clock import ClockOffset, OffsetRound
from sparkwatch.core.failures import Reason
from sparkwatch.core.windows import Window
from sparkwatch.hello_facts import hello_problem
from sparkwatch.store import deletion, engine_samples, marks, meters, retention, sample_reads
from sparkwatch.store import windows as windows_table
from sparkwatch.store.opening import open_database, open_failure
from sparkwatch.store.read_only import connect_read_only
from sparkwatch.store.refusals import ended_at, run_span
from sparkwatch.store.row_values import shown_value
from sparkwatch.store.rows import I64
from sparkwatch.store.run_rows import RUN_COLUMNS, RunRow, run_row
from sparkwatch.store.sample_store import SampleBlocks
from sparkwatch.store.schema import METER_ERROR_SOURCE, MIGRATIONS, OLDEST_READABLE, RUN_NODES, SEQ_DROPPED
from sparkwatch.store.tx import Damaged, NotFound, RunEnded, StoreError, tx
from sparkwatch.store.windows import Committed
from sparkwatch.wire import GapFrame, SampleFrame

log = logging.getLogger(__name__)


class Store:
    def __init__(self, path: Path, now_ns: Callable[[], int] = time.time_ns) -> None:
        self._now = now_ns
        self.path = path
        try:
            self._db = open_database(path)
            self._blocks = SampleBlocks(self._db)
            self._swept_until: int | None = None  # retention: timed rows before this are gone
            self.damage: str | None = None  # damage met in the file (saw_damage): no restart needed to see
        except (sqlite3.Error, OSError) as exc:
            raise open_failure(path, exc) from exc

    @classmethod
    def read_only(cls, path: Path, *, live: bool = False) -> Store:
        """An existing database of this schema, read without changing it (store/read_only.py): what an
        offline export reads, or (``live``) a coordinator's export of its own file; any write through it is
        refused by SQLite."""
        store = cls.__new__(cls)
        store._now = time.time_ns
        store.path = path
        store._db = connect_read_only(path, len(MIGRATIONS), OLDEST_READABLE, live=live)
        store._blocks = SampleBlocks(store._db, kept_tops=store.schema_version >= SEQ_DROPPED)
        store._swept_until = None
        store.damage = None
        return store

    def close(self) -> None:
        self._db.close()

    def saw_damage(self, said: str) -> None:
        """The file was met damaged (SQLite's words, one line): :attr:`damage` says so until it is closed."""
        self.damage = said

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    # ---- nodes, boots, samples -------------------------------------------------------------------
    def set_nodes(self, names: Sequence[str]) -> None:
        with tx(self._db):
            self._db.execute("DELETE FROM nodes")
            self._db.executemany(
                "INSERT INTO nodes (name, position) VALUES (?, ?)", [(n, i) for i, n in enumerate(names)]
            )

    def node_names(self) -> list[str]:
        """The nodes of the coordinator that last used the file, in its nodes file's order."""
        return [str(row[0]) for row in self._db.execute("SELECT name FROM nodes ORDER BY position")]

    def record_hello(self, node: str, hello: dict[str, Any]) -> None:
        with tx(self._db):
            self._db.execute(
                "INSERT OR IGNORE INTO boots (node, boot_id, first_seen_ns, hello) VALUES (?, ?, ?, ?)",
                (node, str(hello["boot_id"]), self._now(), json.dumps(hello)),
            )

    def ingest(
        self, node: str, boot_id: str, samples: Sequence[SampleFrame], gaps: Sequence[GapFrame] = ()
    ) -> int:
        """Store one node's decoded samples and gaps in one transaction (gaps belong to ``boot_id``, the boot
        of the stream they came on); returns how many samples were new."""
        now = self._now()
        try:
            with tx(self._db):
                inserted = self._blocks.insert(node, samples)
                if gaps:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO gaps VALUES (?, ?, ?, ?, ?)",
                        [(node, boot_id, g.after, g.missing, now) for g in gaps],
                    )
        except BaseException:
            self._blocks.forget()  # what it remembered of the rolled-back blocks
            raise
        return inserted

    def last_seq(self, node: str, boot_id: str) -> int:
        return self._blocks.top_seq(node, boot_id)

    def latest_boot(self, node: str) -> tuple[str, int] | None:
        """The node's most recently seen boot and the last seq stored for it (where a link resumes)."""
        boot = self.latest_boot_id(node)
        return None if boot is None else (boot, self.last_seq(node, boot))

    def latest_boot_id(self, node: str) -> str | None:
        """The node's most recently seen boot, without reading its blocks: a reader that needs no seq (the
        hello's, a link dialling an agent now on another boot) is not refused for a boot's damaged blocks;
        ``Damaged`` where a boot's first_seen_ns is (store/sample_reads.py)."""
        return sample_reads.latest_boot_id(self._db, node)

    def hello(self, node: str, boot_id: str) -> dict[str, Any] | None:
        """The boot's hello (None: no such boot). ``Damaged`` where its row is not a hello the wire takes
        (edited outside sparkwatch): its readers, the export's first, trust the wire's checks."""
        row = self._db.execute(
            "SELECT hello FROM boots WHERE node = ? AND boot_id = ?", (node, boot_id)
        ).fetchone()
        if row is None:
            return None
        try:
            hello: object = json.loads(row[0])
        except (TypeError, ValueError, RecursionError):  # not text, not JSON, or nested past reading
            hello = None
        if not isinstance(hello, dict):
            problem = f"hello {shown_value(row[0])} is not a JSON object"
        elif (checked := hello_problem(hello)) is None:
            return hello
        else:
            problem = checked
        raise Damaged(f"boot {boot_id} of node {node} is damaged in the database: {problem}")

    def latest_hello_or_absent(self, node: str) -> dict[str, Any] | None:
        """The hello of the node's latest boot; None without one, or with one warning where the boots' rows
        are damaged: for a reader to which a boot without a hello is safe (the coordinator's start: a metered
        node's series are then labelled with its nodes.toml name until its agent says hello again), where a
        refusal would stop the coordinator."""
        try:
            latest = self.latest_boot_id(node)
            return self.hello(node, latest) if latest else None
        except Damaged as exc:
            log.warning("%s; read as no hello", exc)
            return None

    def count_samples(self, node: str | None = None) -> int:
        return self._blocks.count(node)

    def gaps(self, node: str) -> list[tuple[str, int, int]]:
        rows = self._db.execute(
            "SELECT boot_id, after_seq, missing FROM gaps WHERE node = ? ORDER BY recorded_ns", (node,)
        ).fetchall()
        return [(str(b), int(a), int(m)) for b, a, m in rows]

    # ---- what an export reads (store/sample_reads.py) ------------------------------------------
    def boot_samples(self, node: str, boot: str) -> sample_reads.BootSamples:
        return sample_reads.BootSamples(self._blocks, node, boot)

    def offset_rounds(self, node: str, t_from_ns: int, t_to_ns: int) -> dict[str, list[OffsetRound]]:
        return sample_reads.offset_rounds(self._db, node, t_from_ns, t_to_ns)

    # ---- retention and size (store/retention.py) ------------------------------------------------
    def retention_steps(self, retain_idle_ns: int) -> Iterator[int]:
        """One pass of retention as short steps (each its own transaction, for a caller to interleave with
        other work): small blocks of boots that stopped merged, samples and timed rows older than
        ``retain_idle_ns`` that no live run covers dropped, free pages handed back."""
        for node, boot in self._blocks.boots_with_small():
            with tx(self._db):
                self._blocks.merge_small(node, boot)
            yield 0
        before = self._now() - retain_idle_ns
        yield from retention.drop_idle(self._db, before, self._swept_until)
        self._swept_until = before
        yield from retention.vacuum_steps(self._db)

    def deleted_run_span(self, run_id: str) -> tuple[int, int] | None:
        """The span of a run deleted but not yet forgotten (its row widened over its windows when it was
        deleted), None when unknown; a StoreError when its row is damaged."""
        return retention.span_of(self._db, run_id)

    def drop_run_samples(self, span: tuple[int, int]) -> Iterator[int]:
        """Steps dropping a deleted run's samples no live run covers (one opened meanwhile included), then
        handing the pages back."""
        yield from retention.drop_span(self._db, span)
        yield from retention.vacuum_steps(self._db)

    def run_sizes(self) -> dict[str, int]:
        """Bytes of stored samples each live run's span touches (a block two runs share counts in both)."""
        return retention.sizes(self._db, retention.run_spans(self._db, skip_damaged=True))

    # ---- meters ----------------------------------------------------------------------------------
    def add_meter_reading(self, node: str, reading: meters.MeterReading) -> bool:
        return meters.add(self._db, node, reading)

    def add_meter_error(self, node: str, domain: str, t_ns: int, error: str, source: str) -> None:
        meters.add_error(self._db, node, domain, t_ns, error, source=source)

    def meter_rows(
        self, node: str, t_from_ns: int, t_to_ns: int, next_within_ns: int = 0
    ) -> meters.MeterRows:
        return meters.rows(self._db, node, t_from_ns, t_to_ns, next_within_ns)

    def meter_reasons(
        self, node: str, domain: str, t_from_ns: int, t_to_ns: int
    ) -> tuple[list[Reason], str | None]:
        kinds = self.schema_version >= METER_ERROR_SOURCE  # an older file read as it is has no kinds
        return meters.reasons(self._db, node, domain, (t_from_ns, t_to_ns), with_source=kinds)

    def meter_failure_times(self, node: str, t_from_ns: int, t_to_ns: int) -> dict[str, I64]:
        return meters.failure_times(self._db, node, t_from_ns, t_to_ns)

    # ---- the serving engine's /metrics (store/engine_samples.py) ---------------------------------
    def add_engine_sample(self, row: engine_samples.EngineRow, uncertainty_ns: int) -> None:
        engine_samples.add(self._db, row, uncertainty_ns)

    def add_engine_error(self, t_ns: int, error: str) -> None:
        engine_samples.add_error(self._db, t_ns, error)

    def engine_rows(self, t_from_ns: int, t_to_ns: int) -> list[engine_samples.EngineRow]:
        return engine_samples.rows(self._db, t_from_ns, t_to_ns)

    def engine_reasons(self, t_from_ns: int, t_to_ns: int) -> list[Reason]:
        return engine_samples.reasons(self._db, t_from_ns, t_to_ns)

    def engine_failure_times(self, t_from_ns: int, t_to_ns: int) -> list[int]:
        return engine_samples.failure_times(self._db, t_from_ns, t_to_ns)

    # ---- clock offsets ---------------------------------------------------------------------------
    def add_offset(self, node: str, boot_id: str, offset: ClockOffset, t_ns: int | None = None) -> None:
        with tx(self._db):
            self._db.execute(
                "INSERT OR REPLACE INTO clock_offsets"
                " (node, boot_id, t_ns, offset_ns, uncertainty_ns, probes, mono_offset_ns)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    node,
                    boot_id,
                    self._now() if t_ns is None else t_ns,
                    offset.offset_ns,
                    offset.uncertainty_ns,
                    offset.probes_used,
                    offset.mono_offset_ns,
                ),
            )

    # ---- runs and windows ------------------------------------------------------------------------
    def create_run(self, run: RunRow) -> RunRow:
        """``run.nodes``: the nodes the run measures (the coordinator's, in its nodes file's order), which its
        export is of; None: the export takes the nodes it is given (as a run stored before schema 11)."""
        try:
            with tx(self._db):
                self._db.execute(
                    "INSERT INTO runs"
                    " (id, name, t_start_ns, t_end_ns, interval_s, gate_threshold, scope, phases, nodes)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        run.id,
                        run.name,
                        run.t_start_ns,
                        run.t_end_ns,
                        run.interval_s,
                        run.gate_threshold,
                        run.scope,
                        json.dumps(list(run.phases)),
                        None if run.nodes is None else json.dumps(list(run.nodes)),
                    ),
                )
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"run {run.id} already exists") from exc
        return run

    def end_run(self, run_id: str, t_end_ns: int, command: dict[str, Any] | None = None) -> RunRow:
        """The run ended at ``t_end_ns``, or at its start where a clock stepped back since it began (an end
        before the start is a row no read takes: the run, and retention with it, would stop for good)."""
        run = self.run(run_id)
        if run.t_end_ns is not None:
            raise RunEnded(f"run {run_id} has already ended, at {ended_at(run.t_end_ns)}", run.t_end_ns)
        t_end_ns = max(t_end_ns, run.t_start_ns)
        encoded = json.dumps(command) if command is not None else None
        with tx(self._db):
            self._db.execute(
                "UPDATE runs SET t_end_ns = ?, command = ? WHERE id = ?", (t_end_ns, encoded, run_id)
            )
        return self.run(run_id)

    def run(self, run_id: str) -> RunRow:
        row = self._db.execute(
            f"{self._runs_select()} WHERE id = ? AND deleted_at_ns IS NULL", (run_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no run {run_id}")
        return run_row(row)

    def runs(self) -> list[RunRow]:
        """The live runs whose rows read, by start; :meth:`damaged_runs` has the others, so that one row
        edited outside sparkwatch neither stops the coordinator nor hides its runs."""
        return [run for run in self._read_runs().values() if isinstance(run, RunRow)]

    def damaged_runs(self) -> dict[str, Damaged]:
        """The live runs whose rows do not read (edited or damaged outside sparkwatch), by id: why."""
        return {i: run for i, run in self._read_runs().items() if isinstance(run, Damaged)}

    def _runs_select(self) -> str:
        """Runs with their nodes checked (a file of an older schema, read as it is, has none)."""
        return f"SELECT {RUN_COLUMNS}, {'nodes' if self.schema_version >= RUN_NODES else 'NULL'} FROM runs"

    def _read_runs(self) -> dict[str, RunRow | Damaged]:
        read: dict[str, RunRow | Damaged] = {}
        for row in self._db.execute(f"{self._runs_select()} WHERE deleted_at_ns IS NULL ORDER BY t_start_ns"):
            try:
                read[str(row[0])] = run_row(row)
            except Damaged as exc:
                read[str(row[0])] = exc
        return read

    def delete_run(self, run_id: str) -> int:
        """Step 1 of a delete (store/deletion.py): the ended (or damaged) run is gone from every read at
        once, its rows stay until :meth:`purge_step` has removed them; returns how many windows it had."""
        windows = windows_table.count(self._db, run_id)  # counted before the lock is taken
        deletion.tombstone(self._db, run_id, self._now())
        return windows

    def purge_step(self, run_id: str) -> bool:
        """One short transaction of a deleted run's rows' removal; True once none is left."""
        return deletion.purge_step(self._db, run_id)

    def forget_run(self, run_id: str) -> None:
        """The deleted run's row, last: until then a restart finishes its removal."""
        deletion.forget(self._db, run_id)

    def deleted_runs(self) -> list[str]:
        """Runs deleted but not yet purged (a coordinator stopped in between)."""
        return deletion.tombstoned(self._db)

    def add_windows(self, run_id: str, windows: Sequence[Window], import_id: str | None = None) -> int:
        """All or nothing (an unknown run, a window id repeated or already stored, or a window outside an
        ended run's span rejects the whole batch); with ``import_id`` the windows are staged in that
        import, seen only once it is committed."""
        self.run(run_id)
        return windows_table.add(self._db, run_id, windows, import_id, self._now())

    def begin_import(self, run_id: str) -> str:
        """A new import into the run (imports of it abandoned long ago are dropped first)."""
        self.run(run_id)
        return windows_table.begin_import(self._db, run_id, self._now())

    def commit_import(self, run_id: str, import_id: str) -> Committed:
        """Make every window of the import part of the run at once (into an ended run only if each lies
        inside its span); returns how many there are, and the note when some repeated the proxy's requests
        (those are left out). An import that mostly repeats them is dropped instead (``RepeatsProxy``:
        core/repeated_windows.py)."""
        run_span(self._db, run_id)  # a run deleted meanwhile is "no run", not an import that went missing
        note = windows_table.proxy_repeats(self._db, run_id, import_id)
        return Committed(windows_table.commit_import(self._db, run_id, import_id), note)

    def abort_import(self, run_id: str, import_id: str) -> int:
        """Drop the import and its windows; returns how many windows went."""
        run_span(self._db, run_id)
        return windows_table.abort_import(self._db, run_id, import_id)

    def drop_open_imports(self) -> list[str]:
        """Every import not committed (at start, no client can still be sending one)."""
        return windows_table.drop_open_imports(self._db)

    def count_windows(self, run_id: str) -> int:
        return windows_table.count(self._db, run_id)

    def begin_mark(self, run_id: str, name: str, phase: str, t_ns: int) -> None:
        """Refused in an ended run, like the end of a mark (store/refusals.py)."""
        marks.begin_mark(self._db, run_id, name, phase, t_ns)

    def drop_marks(self, run_id: str) -> list[str]:
        """An ended run's marks still open, by name, dropped (none can end in it now)."""
        return marks.drop_marks(self._db, run_id)

    def end_mark(self, run_id: str, name: str, t_ns: int, source: dict[str, object]) -> Window:
        """Close a mark into a window (one transaction: the mark goes, the window comes)."""
        return marks.end_mark(self._db, run_id, name, t_ns, source)

    def windows(self, run_id: str) -> list[Window]:
        """The run's windows, committed imports included, by start time."""
        return windows_table.read(self._db, run_id)
