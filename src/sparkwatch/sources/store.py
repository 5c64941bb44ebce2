"""The coordinator's SQLite store as a sample source: one run's samples, windows and clock offsets, read
and handed to the core (the default source; sources/__init__.py says what every source answers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sparkwatch import __version__
from sparkwatch.coordinator.big_values import let_go
from sparkwatch.coordinator.boot_reads import read_boot
from sparkwatch.core.clock import NodeClock, OffsetRound, summarise
from sparkwatch.core.domains import DomainInput, gated_track
from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.failures import Failures
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import I64, GpuTrack, MemTrack, repeated
from sparkwatch.core.window_rows import WindowRows, WindowsTap
from sparkwatch.defaults import SCOPES, ScopeKind
from sparkwatch.hello_facts import announced_gpus, unsupported_fields
from sparkwatch.sources import ENGINE_MARGIN_NS, LEAD_NS, METER_TAIL_NS, TAIL_NS, export_from
from sparkwatch.sources.node_read import NodeRead, join_reads
from sparkwatch.store import Store, StoreError


def node_input(store: Store, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
    """One node's tracks on the coordinator's clock, how they got there, and what its hello said."""
    rounds = store.offset_rounds(node, t_from_ns - LEAD_NS, t_to_ns)
    # and the first sample after the end, of a boot up by then: it closes the span's last interval (read to
    # the end, the last stretch was never covered); only it, so that a later export reads what `run`'s did
    reads = [
        read_boot(
            store.boot_samples(node, boot),
            boot_rounds,
            t_from_ns - LEAD_NS,
            t_to_ns,
            TAIL_NS if boot_rounds[0].t_ns <= t_to_ns else 0,
        )
        for boot, boot_rounds in rounds.items()
    ]
    read = join_reads(reads)  # the boots' columns, joined (and each boot's let go as it is)
    latest = store.latest_boot_id(node)
    hello = store.hello(node, latest) if latest else None
    segments = _Segments()
    gpu_seg = segments.of(read.gpu_rows)
    # one track per GPU, keyed by UUID (an index can change when the GPU backend re-opens); GPUs the agent
    # announced but that have no samples in range still get a track, so lmx.gpuPowerWatts keeps one entry
    # per GPU in node order (null for those); the others follow by index
    by_index = _by_first_index(read.gpu_uuid, read.gpu_index, read.gpu_t_ns)
    uuids = list(dict.fromkeys([*announced_gpus(hello), *by_index]))
    tracks = []
    for uuid in uuids:
        mine = np.flatnonzero(read.gpu_uuid == uuid)
        tracks.append(
            GpuTrack.from_arrays(
                _pick(read.gpu_t_ns, mine),
                _pick(gpu_seg, mine),
                _pick(read.gpu_interval_s, mine),
                power_w=_pick(read.power_w, mine),
                energy_j=_pick(read.energy_j, mine),
                util_ratio=_pick(read.util_ratio, mine),
            )
        )
    memory = MemTrack.from_arrays(
        read.memory_t_ns,
        segments.of(read.samples),
        read.memory_interval_s,
        read.used_bytes,
        read.page_cache_bytes,
    )
    return NodeInput(
        node=node,
        gpus=tracks,
        domains=[
            *_sensor_domains(read, tracks, segments),
            *_meter_domains(store, node, t_from_ns - LEAD_NS, t_to_ns, tracks),
        ],
        signals=_signal_tracks(read, hello),
        gpu_uuids=uuids,
        memory=memory,
        clock=_node_clock(rounds, read, t_from_ns, t_to_ns),
        memory_model=str((hello or {}).get("memory_model", "unknown")),
        hardware=dict((hello or {}).get("hardware") or {}),
        unsupported=unsupported_fields(hello),
    )


def _sensor_domains(read: NodeRead, gpus: Sequence[GpuTrack], segments: _Segments) -> list[DomainInput]:
    """One domain per channel name the node's agent streamed, in the order it first streamed them, gated by
    the node's GPU utilisation at each sample. A channel's rows take their samples' times: no time column
    per row of every channel is made."""
    first_seen: dict[str, list[int]] = {}  # name → its channels' numbers, names in the order first streamed
    for number, channel in enumerate(read.channels):
        first_seen.setdefault(channel[0], []).append(number)
    sample_seg = segments.of(read.samples)
    codes = read.sensor_channel
    domains = []
    for name, numbers in first_seen.items():
        rows = np.flatnonzero(codes == numbers[0] if len(numbers) == 1 else np.isin(codes, numbers))
        samples = read.sensor_samples(rows)
        power, energy = (_pick(c, rows) for c in (read.sensor_power_w, read.sensor_energy_j))
        _, kind, source = read.channels[int(codes[rows[-1]])]  # as last streamed
        track = gated_track(
            _pick(read.memory_t_ns, samples),
            _pick(sample_seg, samples),
            _pick(read.memory_interval_s, samples),
            power,
            energy,
            gpus=gpus,
        )
        domains.append(DomainInput(name, kind, source, track))
    return domains


def _in_first_order(values: np.ndarray) -> list[Any]:
    """The distinct values of an object column in the order they first appear (a few, over many rows)."""
    out = []
    left = np.ones(len(values), dtype=bool)
    while left.any():
        value = values[int(np.argmax(left))]
        out.append(value)
        left &= values != value
    return out


def _by_first_index(uuids: np.ndarray, index: I64, t_ns: I64) -> list[str]:
    """Each UUID once, ordered by the GPU index it first had and then by time."""
    if not len(uuids):
        return []
    order = np.lexsort((t_ns, index))
    return [str(u) for u in _in_first_order(uuids[order])]


def _signal_tracks(read: NodeRead, hello: dict[str, Any] | None) -> list[SignalTrack]:
    """Each GPU's clock signals, by UUID, with the maximum SM clock its hello reported."""
    gpus = ((hello or {}).get("hardware") or {}).get("gpus")
    maxima = {
        g["uuid"]: g.get("max_sm_clock_hz")
        for g in (gpus if isinstance(gpus, list) else ())
        if isinstance(g, dict) and isinstance(g.get("uuid"), str)
    }
    out = []
    for uuid in _in_first_order(read.gpu_uuid):
        mine = np.flatnonzero(read.gpu_uuid == uuid)
        mine_t = _pick(read.gpu_t_ns, mine)
        in_order = bool(np.all(mine_t[1:] >= mine_t[:-1]))  # a store's read: already; the columns, not copies
        order = slice(None) if in_order else np.argsort(mine_t, kind="stable")
        clock_hz, temp_c, mask = (
            _pick(c, mine)[order] for c in (read.sm_clock_hz, read.temperature_c, read.reasons)
        )
        top = maxima.get(uuid)
        top = float(top) if type(top) is int or type(top) is float else None
        top = top if top is not None and top > 0 else None
        out.append(SignalTrack(mine_t[order], clock_hz, temp_c, mask, top, uuid=str(uuid)))
    return out


def _meter_domains(
    store: Store, node: str, t_from_ns: int, t_to_ns: int, gpus: Sequence[GpuTrack]
) -> list[DomainInput]:
    """The node's meter readings (already on the coordinator's clock), one domain per meter, with the errors
    that explain their gaps. A failed poll between two readings breaks them apart (its readings each side
    form no interval), as a failed engine scrape does: 3 poll intervals is the gap rule for readings that
    came late, and one failed poll in a window was bridged by a line between its neighbours."""
    # and each meter's first reading after the end, as for the samples: it closes the last interval (a failed
    # poll between breaks it, as anywhere, and is one of the errors that say why)
    rows = store.meter_rows(node, t_from_ns, t_to_ns, METER_TAIL_NS)
    failures = store.meter_failure_times(node, t_from_ns, t_to_ns + METER_TAIL_NS)
    closing = {d: max(t_to_ns, int(t)) for d, t in zip(rows.domain, rows.t_ns.tolist(), strict=True)}

    def failed_polls(domain: str) -> tuple[Failures, str | None]:
        """The domain's failed polls up to the reading that closes the span (the end, with none): those
        after it are not the run's; and the meter kind they name."""
        times, until = failures.get(domain, np.empty(0, np.int64)), closing.get(domain, t_to_ns)
        total = int(np.count_nonzero((times >= t_from_ns) & (times <= until)))
        if not total:
            return Failures(), None
        reasons, kind = store.meter_reasons(node, domain, t_from_ns, until)
        return Failures.of(reasons, total), kind

    names = np.array(rows.domain, dtype=object)
    domains = []
    for name, source in dict(zip(rows.domain, rows.source, strict=True)).items():
        mine = names == name
        count = int(mine.sum())
        # a meter's own counter is stored but not integrated: Shelly does not say how often aenergy moves,
        # and a BMC's EnergykWh is too coarse for ΔE/Δt over one poll; its power is the trapezoid
        unused = np.full(count, np.nan)
        t_ns = rows.t_ns[mine]
        failed = failures.get(name, np.empty(0, np.int64))
        apart = np.searchsorted(failed, t_ns, side="right").astype(np.int64)  # failed polls before each
        power, interval_s = rows.power_w[mine], rows.interval_s[mine]
        track = gated_track(t_ns, apart, interval_s, power, unused, gpus=gpus)
        # a reading says what the meter last refreshed: its age bound counts when longer than the polls
        age_s = float(np.median(rows.uncertainty_ns[mine])) / 1e9
        reading_s = round(max(float(np.median(interval_s)), age_s), 3)
        domains.append(DomainInput(name, "system", source, track, failed_polls(name)[0], reading_s))
    # a meter that never answered in the span: a domain with no samples and its errors, named by the kind
    # its failed polls stored (errors stored before schema 10 name none: "meter")
    nothing, none = np.empty(0), np.empty(0, np.int64)
    for name in sorted(failures.keys() - set(rows.domain)):
        found, kind = failed_polls(name)
        if found:
            empty = gated_track(none, none, nothing, nothing, nothing, gpus=gpus)
            domains.append(DomainInput(name, "system", kind or "meter", empty, found))
    return domains


def _node_clock(
    rounds: dict[str, list[OffsetRound]], read: NodeRead, t_from_ns: int, t_to_ns: int
) -> NodeClock:
    """How the node's samples were placed: over the boots that have samples in the span (a boot probed
    only around it, such as the next SSH exec session's agent minutes after the end, placed nothing, and
    its drift or probe count is not the run's); over every boot read when none has."""
    boots = list(rounds.values())
    used = [i for i, n in enumerate(read.samples) if n] or list(range(len(boots)))
    fitted = [read.fits[i] for i in used]
    fits = [f for f in fitted if f is not None]
    method = "monotonic" if len(fits) == len(fitted) else ("wall" if not fits else "mixed")
    every = sorted((r for i in used for r in boots[i]), key=lambda r: r.t_ns)
    return NodeClock(
        summary=summarise(every, t_from_ns, t_to_ns),
        method=method if fitted else "none",
        rate_ppm=fits[-1].rate * 1e6 if fits else None,
        steps=tuple(s for s in read.steps if s.t_ns <= t_to_ns),  # not one in the samples read past the end
        disagreements=tuple(d for f in fits for d in f.disagreements),
    )


def engine_input(store: Store, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
    """The engine's scrapes around the span (a counter is read at the span's edges, a gauge held from the
    scrape before), or None when the engine was not scraped in it at all."""
    rows = store.engine_rows(t_from_ns - ENGINE_MARGIN_NS, t_to_ns + ENGINE_MARGIN_NS)
    failed = store.engine_failure_times(t_from_ns - ENGINE_MARGIN_NS, t_to_ns + ENGINE_MARGIN_NS)
    inside = sum(t_from_ns <= t <= t_to_ns for t in failed)
    if not inside and not any(t_from_ns <= r.t_ns <= t_to_ns for r in rows):
        return None
    failures = Failures.of(store.engine_reasons(t_from_ns, t_to_ns), inside) if inside else Failures()
    return EngineSamples.from_rows(rows, failures, (t_from_ns, t_to_ns), failed_ns=failed)


def _pick(column: np.ndarray, index: I64) -> np.ndarray:
    """``column[index]``; a view when ``index`` steps evenly (a channel's rows among every sample's, the one
    GPU's rows, a channel in every sample): a node's tracks then share its sample columns, not copies."""
    if len(index) < 2:
        return column[index]
    step = int(index[1] - index[0])
    if step < 1 or int(index[-1] - index[0]) != step * (len(index) - 1) or np.any(np.diff(index) != step):
        return column[index]
    return column[int(index[0]) : int(index[-1]) + 1 : step]


class _Segments:
    """Each sample's boot number (0 for the first read, 1 for the next…) for tracks of the given per-read
    lengths, made once per node and lengths: a node's tracks over the same samples share one column."""

    def __init__(self) -> None:
        self._made: dict[tuple[int, ...], I64] = {}

    def of(self, lengths: Sequence[int]) -> I64:
        key = tuple(lengths)
        if key not in self._made:
            one_boot = len(key) == 1
            made = repeated(np.int64(0), key[0]) if one_boot else np.repeat(np.arange(len(key)), key)
            self._made[key] = made.astype(np.int64, copy=False)
        return self._made[key]


def export_run(
    store: Store,
    run_id: str,
    nodes: Sequence[str],
    now_ns: Callable[[], int],
    *,
    gate_threshold: float | None = None,
    scope: ScopeKind | None = None,
    phases: Sequence[str] | None = None,
    series_buckets: int | None = None,
    windows_tap: WindowsTap | None = None,
) -> dict[str, Any]:
    """The run's export, of the nodes it was opened with (``nodes``: those of a run stored before they were
    kept, the coordinator's); ``gate_threshold``, ``scope`` and ``phases``, when given, replace the run's own
    (an offline re-export with another method: `sparkwatch export --db`); the export's ``method`` says
    which were used. ``series_buckets``: add the ``series`` block in that many buckets; ``windows_tap``: see
    ``core.export.build_export``."""
    run = store.run(run_id)
    nodes = nodes if run.nodes is None else run.nodes
    t_end = run.t_end_ns if run.t_end_ns is not None else now_ns()
    if scope is None:
        if run.scope not in SCOPES:
            raise StoreError(f"run {run_id} has an unknown scope {run.scope!r}")
        scope = run.scope
    spec = RunSpec(
        id=run.id,
        name=run.name,
        t_start_ns=run.t_start_ns,
        t_end_ns=t_end,
        interval_s=run.interval_s,
        gate_threshold=run.gate_threshold if gate_threshold is None else gate_threshold,
        scope=scope,
        phases=frozenset(run.phases if phases is None else phases),
        command=json.loads(run.command) if run.command else None,
        ended=run.t_end_ns is not None,
    )
    windows = store.windows(run_id)
    try:
        export = export_from(
            StoreSource(store),
            spec,
            nodes,
            windows,
            __version__,
            series_buckets=series_buckets,
            windows_tap=windows_tap,
        )
    finally:
        let_go(windows)
    _still_there(store, run_id)
    return export


def run_windows(store: Store, run_id: str) -> dict[str, Any]:
    """``{"run": …, "windows": […]}``: the run as stored and its windows, none measured (the coordinator's
    ``GET /v1/runs/{id}/windows``, which importers.windows_answer reads), each made as it is encoded."""
    run, windows = store.run(run_id), store.windows(run_id)
    _still_there(store, run_id)
    rows = WindowRows(len(windows), lambda lo, hi: [w.to_json() for w in windows[lo:hi]], (windows,))
    return {"run": run.to_json(), "windows": rows}


def _still_there(store: Store, run_id: str) -> None:
    """``NotFound`` when the run was deleted after it was first read: a delete hides the run's windows at
    once and its samples go after, so what was read since is of no run (an export of no window, 200,
    while a `DELETE` ran beside it), not the run's."""
    store.run(run_id)


class StoreSource:
    """The store as a :class:`sparkwatch.sources.SampleSource`."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def describe(self) -> dict[str, Any]:
        return {"kind": "sqlite", "metrics": "sparkwatch"}

    def node_input(self, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
        return node_input(self._store, node, t_from_ns, t_to_ns)

    def engine_input(self, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
        return engine_input(self._store, t_from_ns, t_to_ns)
