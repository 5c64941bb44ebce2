"""Schema migrations, applied in order and recorded in ``PRAGMA user_version``."""

from __future__ import annotations

#: The schema whose migration moves stored samples into blocks (store/convert.py runs inside it).
BLOCKS_SCHEMA = 9
#: The schema that gave each failed meter poll its meter kind (``meter_errors.source``).
METER_ERROR_SOURCE = 10
#: The schema that records the nodes a run was opened with (``runs.nodes``): a run's export is of them, not
#: of whatever nodes file the coordinator has today.
RUN_NODES = 11
#: The schema that keeps each boot's high-water seq past dropped blocks (``boots.seq_dropped``).
SEQ_DROPPED = 12
#: The oldest schema an offline reader (`export --db`) takes as it is: 10 only added a column, which is read
#: as unknown before it, so a schema-9 file is exported without being upgraded first.
OLDEST_READABLE = 9

MIGRATIONS: tuple[str, ...] = (
    # 1: samples, boots, gaps, runs, windows, marks, clock offsets
    """
    CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        position INTEGER NOT NULL
    );
    CREATE TABLE boots (
        node TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        first_seen_ns INTEGER NOT NULL,
        hello TEXT NOT NULL,
        PRIMARY KEY (node, boot_id)
    );
    CREATE TABLE samples (
        node TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        t_wall_ns INTEGER NOT NULL,
        t_mono_ns INTEGER NOT NULL,
        interval_s REAL NOT NULL,
        mem_used_bytes INTEGER,
        -- the first GPU's values live in the sample row (one B-tree insert fewer per GB10 sample);
        -- further GPUs go to gpu_samples
        gpu0_uuid TEXT,
        gpu0_power_w REAL,
        gpu0_energy_j REAL,
        gpu0_util_ratio REAL,
        frame TEXT NOT NULL,
        PRIMARY KEY (node, boot_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX samples_by_time ON samples (node, t_wall_ns);
    CREATE TABLE gpu_samples (
        node TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        gpu INTEGER NOT NULL,
        uuid TEXT NOT NULL,
        power_w REAL,
        energy_j REAL,
        util_ratio REAL,
        PRIMARY KEY (node, boot_id, seq, gpu)
    ) WITHOUT ROWID;
    CREATE TABLE gaps (
        node TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        after_seq INTEGER NOT NULL,
        missing INTEGER NOT NULL,
        recorded_ns INTEGER NOT NULL,
        PRIMARY KEY (node, boot_id, after_seq)
    );
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        t_start_ns INTEGER NOT NULL,
        t_end_ns INTEGER,
        interval_s REAL NOT NULL,
        gate_threshold REAL NOT NULL,
        scope TEXT NOT NULL
    );
    CREATE TABLE windows (
        run_id TEXT NOT NULL REFERENCES runs (id),
        id TEXT NOT NULL,
        phase TEXT NOT NULL,
        t_start_ns INTEGER NOT NULL,
        t_first_byte_ns INTEGER,
        t_first_token_ns INTEGER,
        t_last_token_ns INTEGER,
        t_end_ns INTEGER NOT NULL,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        cached_tokens INTEGER,
        source TEXT NOT NULL,
        PRIMARY KEY (run_id, id)
    );
    CREATE TABLE marks (
        run_id TEXT NOT NULL REFERENCES runs (id),
        name TEXT NOT NULL,
        phase TEXT NOT NULL,
        t_begin_ns INTEGER NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE clock_offsets (
        node TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        t_ns INTEGER NOT NULL,
        offset_ns INTEGER NOT NULL,
        uncertainty_ns INTEGER NOT NULL,
        probes INTEGER NOT NULL,
        PRIMARY KEY (node, boot_id, t_ns)
    );
    """,
    # 2: what the proxy and importers know about each request besides its times and token counts, and
    # the command a run wrapped (`sparkwatch run`: argv and exit code)
    """
    ALTER TABLE windows ADD COLUMN reasoning_tokens INTEGER;
    ALTER TABLE windows ADD COLUMN http_status INTEGER;
    ALTER TABLE windows ADD COLUMN finish_reason TEXT;
    ALTER TABLE runs ADD COLUMN command TEXT;
    """,
    # 3: the agent's monotonic offset of each probe round: samples are placed by their monotonic time, which
    # no wall-clock step moves (NULL in rounds stored before: those boots fall back to wall offsets)
    """
    ALTER TABLE clock_offsets ADD COLUMN mono_offset_ns INTEGER;
    """,
    # 4: imports that appear whole or not at all: a window staged in an import (import_id) counts only once
    # its import is committed; windows posted directly have none
    """
    CREATE TABLE imports (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (id),
        t_created_ns INTEGER NOT NULL,
        t_touched_ns INTEGER NOT NULL,
        committed INTEGER NOT NULL
    );
    ALTER TABLE windows ADD COLUMN import_id TEXT REFERENCES imports (id);
    CREATE INDEX windows_by_import ON windows (import_id) WHERE import_id IS NOT NULL;
    """,
    # 5: wall meters the coordinator polls itself: readings stamped on its own clock, and what went wrong
    # when a meter did not answer (a gap's reason)
    """
    CREATE TABLE meter_samples (
        node TEXT NOT NULL,
        domain TEXT NOT NULL,
        t_ns INTEGER NOT NULL,
        source TEXT NOT NULL,
        interval_s REAL NOT NULL,
        power_w REAL,
        energy_j REAL,
        uncertainty_ns INTEGER NOT NULL,
        PRIMARY KEY (node, domain, t_ns)
    ) WITHOUT ROWID;
    CREATE TABLE meter_errors (
        node TEXT NOT NULL,
        domain TEXT NOT NULL,
        t_ns INTEGER NOT NULL,
        error TEXT NOT NULL,
        PRIMARY KEY (node, domain, t_ns)
    ) WITHOUT ROWID;
    """,
    # 6: the window phases a run measures (a JSON array of phase names); runs stored before measured their
    # timed windows only, which the default keeps
    """
    ALTER TABLE runs ADD COLUMN phases TEXT NOT NULL DEFAULT '["timed"]';
    """,
    # 7: a deleted run's tombstone (store/deletion.py): set in one tiny transaction, it hides the run from
    # every read at once; its windows, marks and imports then go in short transactions, and the run row last
    """
    ALTER TABLE runs ADD COLUMN deleted_at_ns INTEGER;
    """,
    # 8: the serving engine's /metrics (engines/), scraped on the coordinator's clock like a meter and kept
    # apart from runs: the mapped fields as JSON (a new field needs no migration), the engine family, the
    # raw series names of an engine with no mapping table, and the reasons of failed scrapes
    """
    CREATE TABLE engine_samples (
        t_ns INTEGER PRIMARY KEY,
        family TEXT,
        interval_s REAL NOT NULL,
        uncertainty_ns INTEGER NOT NULL,
        fields TEXT NOT NULL,
        sources TEXT NOT NULL,
        unknown TEXT
    );
    CREATE TABLE engine_errors (
        t_ns INTEGER PRIMARY KEY,
        error TEXT NOT NULL
    );
    """,
    # 9: samples as blocks (store/sample_store.py): what an export reads of each sample, columnar and
    # deflated, one row per run of a boot's samples (≈1.1 KB a sample before, with the raw frame, is a few
    # dozen bytes now); the rows of `samples` and `gpu_samples` move into blocks (store/convert.py) and the
    # old tables go. Rowid table: a block's blob is kilobytes, which a WITHOUT ROWID row should not hold.
    """
    CREATE TABLE sample_blocks (
        id INTEGER PRIMARY KEY,
        node TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        seq_first INTEGER NOT NULL,
        seq_last INTEGER NOT NULL,
        wall_first_ns INTEGER NOT NULL,
        wall_last_ns INTEGER NOT NULL,
        mono_first_ns INTEGER NOT NULL,
        mono_last_ns INTEGER NOT NULL,
        count INTEGER NOT NULL,
        data BLOB NOT NULL
    );
    CREATE INDEX sample_blocks_by_seq ON sample_blocks (node, boot_id, seq_first);
    CREATE INDEX sample_blocks_by_time ON sample_blocks (wall_last_ns);
    CREATE INDEX clock_offsets_by_time ON clock_offsets (node, t_ns);
    """,
    # 10 (METER_ERROR_SOURCE): the meter kind of a failed poll (``meter:<kind>``, as its readings have it),
    # so that a meter that never answered in a run is exported as what it is; rows stored before have none
    """
    ALTER TABLE meter_errors ADD COLUMN source TEXT;
    """,
    # 11 (RUN_NODES): the nodes a run was opened with, a JSON array of names in the nodes file's order.
    # Its export was of the nodes the coordinator had at the export: a node added to the nodes file since
    # made the old run's windows incomplete, a node removed left the run's export without it. Runs stored
    # before have none (NULL), and are exported as before.
    """
    ALTER TABLE runs ADD COLUMN nodes TEXT;
    """,
    # 12 (SEQ_DROPPED): the highest seq a boot had stored when any of its blocks was dropped (retention, a
    # deleted run), so a link that starts again resumes after it: it resumed after the highest seq still
    # stored, and a coordinator that crashed right after a delete replayed the deleted run's samples (and
    # those retention had dropped) from the agent's ring. Boots stored before have none (NULL).
    """
    ALTER TABLE boots ADD COLUMN seq_dropped INTEGER;
    """,
    # 13: a run's windows by start and by end, so that its span (with its first window's start and its last
    # window's end: what retention keeps, what `GET /v1/runs` sizes, what a delete drops) is two index
    # seeks. It read every window of every run: 1.2 s for one run of 3 M windows, on each list of the runs
    # and each retention pass, and again before a delete answered.
    """
    CREATE INDEX windows_by_start ON windows (run_id, t_start_ns);
    CREATE INDEX windows_by_end ON windows (run_id, t_end_ns);
    """,
)
