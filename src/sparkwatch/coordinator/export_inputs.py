"""Reads one run's samples, windows and clock offsets from the store and hands them to the core."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sparkwatch import __version__
from sparkwatch.core.clock import summarise, to_coordinator_ns
from sparkwatch.core.export import NodeInput, RunSpec, build_export
from sparkwatch.core.tracks import GpuTrack, MemTrack
from sparkwatch.core.windows import ScopeKind
from sparkwatch.store import Store, StoreError

#: Samples read before the run's start: the memory baseline needs the 10 s before the first window.
LEAD_NS = 15 * 1_000_000_000


def _unsupported(hello: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for gpu in (hello or {}).get("capabilities", {}).get("gpus", []):
        for field, status in gpu.get("fields", {}).items():
            if not status.get("supported", False):
                out[field] = str(status.get("reason", status.get("state", "unsupported")))
    return out


def node_input(store: Store, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
    offsets = store.offsets(node)
    clock = summarise(offsets, t_from_ns, t_to_ns)
    shift = clock.offset_ns if clock else 0
    gpu_rows = store.gpu_rows(node, t_from_ns - shift - LEAD_NS, t_to_ns - shift)
    mem_rows = store.mem_rows(node, t_from_ns - shift - LEAD_NS, t_to_ns - shift)
    boots: dict[str, int] = {}
    for row in mem_rows:
        boots.setdefault(row[0], len(boots))
    latest = store.latest_boot(node)
    hello = store.hello(node, latest[0]) if latest else None

    def times(agent_ns: list[int]) -> np.ndarray:
        arr = np.array(agent_ns, dtype=np.int64)
        return to_coordinator_ns(arr, offsets) if offsets and len(arr) else arr

    # one track per GPU, keyed by UUID (an index can change when the GPU backend re-opens); GPUs the
    # agent announced but that have no samples in range still get a track, so lmx.gpuPowerWatts keeps one
    # entry per GPU in node order (null for those)
    by_uuid: dict[str, list[tuple[Any, ...]]] = {uuid: [] for uuid in _announced_gpus(hello)}
    for row in sorted(gpu_rows, key=lambda r: (r[4], r[2])):
        by_uuid.setdefault(str(row[5]), []).append(row)
    tracks, uuids = [], []
    for uuid, rows in by_uuid.items():
        tracks.append(
            GpuTrack.from_arrays(
                times([r[2] for r in rows]),
                np.array([boots.setdefault(r[0], len(boots)) for r in rows], dtype=np.int64),
                np.array([r[3] for r in rows], dtype=np.float64),
                power_w=_floats([r[6] for r in rows]),
                energy_j=_floats([r[7] for r in rows]),
                util_ratio=_floats([r[8] for r in rows]),
            )
        )
        uuids.append(uuid)
    memory = MemTrack.from_arrays(
        times([r[2] for r in mem_rows]),
        np.array([boots[r[0]] for r in mem_rows], dtype=np.int64),
        np.array([r[3] for r in mem_rows], dtype=np.float64),
        _floats([r[4] for r in mem_rows]),
    )
    return NodeInput(
        node=node,
        gpus=tracks,
        gpu_uuids=uuids,
        memory=memory,
        clock=clock,
        memory_model=str((hello or {}).get("memory_model", "unknown")),
        hardware=dict((hello or {}).get("hardware", {})),
        unsupported=_unsupported(hello),
    )


def _announced_gpus(hello: dict[str, Any] | None) -> list[str]:
    return [str(g["uuid"]) for g in (hello or {}).get("capabilities", {}).get("gpus", []) if "uuid" in g]


def _floats(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def export_run(store: Store, run_id: str, nodes: Sequence[str], now_ns: Callable[[], int]) -> dict[str, Any]:
    run = store.run(run_id)
    t_end = run.t_end_ns if run.t_end_ns is not None else now_ns()
    if run.scope not in ("request", "decode", "run"):
        raise StoreError(f"run {run_id} has an unknown scope {run.scope!r}")
    scope: ScopeKind = run.scope  # type: ignore[assignment]
    spec = RunSpec(
        id=run.id,
        name=run.name,
        t_start_ns=run.t_start_ns,
        t_end_ns=t_end,
        interval_s=run.interval_s,
        gate_threshold=run.gate_threshold,
        scope=scope,
        command=json.loads(run.command) if run.command else None,
    )
    windows = store.windows(run_id)
    # read what the run and every window span: a window may start before the run or end after it
    t_from = min([run.t_start_ns, *(w.t_start_ns for w in windows)])
    t_to = max([t_end, *(w.t_end_ns for w in windows)])
    inputs = [node_input(store, n, t_from, t_to) for n in nodes]
    return build_export(spec, inputs, windows, __version__)
