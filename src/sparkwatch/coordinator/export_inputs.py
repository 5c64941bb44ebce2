"""Reads one run's samples, windows and clock offsets from the store and hands them to the core."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sparkwatch import __version__
from sparkwatch.core.clock import summarise, to_coordinator_ns
from sparkwatch.core.export import build_export
from sparkwatch.core.memory import BASELINE_S
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.tracks import I64, GpuTrack, MemTrack
from sparkwatch.core.windows import ScopeKind
from sparkwatch.store import Store, StoreError
from sparkwatch.wire import announced_gpus, unsupported_fields

#: Samples read before the run's start: the memory baseline needs the BASELINE_S before the first window
#: (and a few seconds more, for the clock offset and a window that starts before the run).
LEAD_NS = int((BASELINE_S + 5.0) * 1e9)


def node_input(store: Store, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
    """One node's tracks on the coordinator's clock, with its clock offset and what its hello said."""
    offsets = store.offsets(node)
    clock = summarise(offsets, t_from_ns, t_to_ns)
    shift = clock.offset_ns if clock else 0
    gpu = store.gpu_rows(node, t_from_ns - shift - LEAD_NS, t_to_ns - shift)
    mem = store.mem_rows(node, t_from_ns - shift - LEAD_NS, t_to_ns - shift)
    latest = store.latest_boot(node)
    hello = store.hello(node, latest[0]) if latest else None
    boots: dict[str, int] = {}  # agent boot -> segment: samples of different boots never form an interval

    def segments(boot_ids: list[str]) -> I64:
        return np.array([boots.setdefault(b, len(boots)) for b in boot_ids], dtype=np.int64)

    def times(agent_ns: I64) -> I64:
        return to_coordinator_ns(agent_ns, offsets) if offsets and len(agent_ns) else agent_ns

    # one track per GPU, keyed by UUID (an index can change when the GPU backend re-opens); GPUs the agent
    # announced but that have no samples in range still get a track, so lmx.gpuPowerWatts keeps one entry
    # per GPU in node order (null for those)
    by_index = np.lexsort((gpu.t_wall_ns, gpu.gpu_index))  # GPUs the hello does not name: by index
    uuids = list(dict.fromkeys([*announced_gpus(hello), *(gpu.uuid[i] for i in by_index)]))
    gpu_uuid = np.array(gpu.uuid, dtype=object)
    gpu_t, gpu_seg = times(gpu.t_wall_ns), segments(gpu.boot_id)
    tracks = []
    for uuid in uuids:
        mine = gpu_uuid == uuid
        tracks.append(
            GpuTrack.from_arrays(
                gpu_t[mine],
                gpu_seg[mine],
                gpu.interval_s[mine],
                power_w=gpu.power_w[mine],
                energy_j=gpu.energy_j[mine],
                util_ratio=gpu.util_ratio[mine],
            )
        )
    memory = MemTrack.from_arrays(times(mem.t_wall_ns), segments(mem.boot_id), mem.interval_s, mem.used_bytes)
    return NodeInput(
        node=node,
        gpus=tracks,
        gpu_uuids=uuids,
        memory=memory,
        clock=clock,
        memory_model=str((hello or {}).get("memory_model", "unknown")),
        hardware=dict((hello or {}).get("hardware", {})),
        unsupported=unsupported_fields(hello),
    )


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
