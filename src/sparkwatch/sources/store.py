"""The coordinator's SQLite store as a sample source: one run's samples, windows and clock offsets, read
and handed to the core (the default source; sources/__init__.py says what every source answers)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sparkwatch import __version__
from sparkwatch.coordinator.big_values import let_go
from sparkwatch.coordinator.boot_reads import BootRead, read_boot
from sparkwatch.core.baseline import BASELINE_S
from sparkwatch.core.clock import NodeClock, OffsetRound, summarise
from sparkwatch.core.domains import DomainInput, gated_track
from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import GAP_INTERVALS, I64, GpuTrack, MemTrack
from sparkwatch.defaults import SCOPES, ScopeKind
from sparkwatch.engines.spec import MAX_INTERVAL_S as ENGINE_MAX_INTERVAL_S
from sparkwatch.hello_facts import announced_gpus, unsupported_fields
from sparkwatch.sources import export_from
from sparkwatch.store import Store, StoreError
from sparkwatch.store.rows import Channel, SensorRows

#: Samples read before the run's start: the memory baseline needs the BASELINE_S before the first window
#: (and a few seconds more, for the clock offset and a window that starts before the run).
LEAD_NS = int((BASELINE_S + 5.0) * 1e9)
#: Engine scrapes read beyond the span: the scrape around each edge may be as far as the gap limit at the
#: slowest scrape interval.
ENGINE_MARGIN_NS = int(GAP_INTERVALS * ENGINE_MAX_INTERVAL_S * 1e9)


def node_input(store: Store, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
    """One node's tracks on the coordinator's clock, how they got there, and what its hello said."""
    rounds = store.offset_rounds(node, t_from_ns - LEAD_NS, t_to_ns)
    reads = [
        read_boot(store.boot_samples(node, boot), boot_rounds, t_from_ns - LEAD_NS, t_to_ns)
        for boot, boot_rounds in rounds.items()
    ]
    latest = store.latest_boot(node)
    hello = store.hello(node, latest[0]) if latest else None
    segments = _Segments()
    gpu_t = _joined([r.gpu_t_ns for r in reads], np.int64)
    gpu_seg = segments.of([len(r.gpu_t_ns) for r in reads])
    gpu_interval = _joined([r.gpu.interval_s for r in reads], np.float64)
    gpu_index = _joined([r.gpu.gpu_index for r in reads], np.int64)
    gpu_uuid = _joined([r.gpu.uuid for r in reads], object)
    power, energy, util = (
        _joined([getattr(r.gpu, column) for r in reads], np.float64)
        for column in ("power_w", "energy_j", "util_ratio")
    )
    # one track per GPU, keyed by UUID (an index can change when the GPU backend re-opens); GPUs the agent
    # announced but that have no samples in range still get a track, so lmx.gpuPowerWatts keeps one entry
    # per GPU in node order (null for those); the others follow by index
    uuids = list(dict.fromkeys([*announced_gpus(hello), *_by_first_index(gpu_uuid, gpu_index, gpu_t)]))
    tracks = []
    for uuid in uuids:
        mine = np.flatnonzero(gpu_uuid == uuid)
        tracks.append(
            GpuTrack.from_arrays(
                _pick(gpu_t, mine),
                _pick(gpu_seg, mine),
                _pick(gpu_interval, mine),
                power_w=_pick(power, mine),
                energy_j=_pick(energy, mine),
                util_ratio=_pick(util, mine),
            )
        )
    memory = MemTrack.from_arrays(
        _joined([r.memory_t_ns for r in reads], np.int64),
        segments.of([len(r.memory_t_ns) for r in reads]),
        _joined([r.memory.interval_s for r in reads], np.float64),
        _joined([r.memory.used_bytes for r in reads], np.float64),
    )
    return NodeInput(
        node=node,
        gpus=tracks,
        domains=[
            *_sensor_domains(reads, tracks, segments),
            *_meter_domains(store, node, t_from_ns - LEAD_NS, t_to_ns, tracks),
        ],
        signals=_signal_tracks(reads, hello),
        gpu_uuids=uuids,
        memory=memory,
        clock=_node_clock(rounds, reads, t_from_ns, t_to_ns),
        memory_model=str((hello or {}).get("memory_model", "unknown")),
        hardware=dict((hello or {}).get("hardware") or {}),
        unsupported=unsupported_fields(hello),
    )


def _sensor_domains(
    reads: Sequence[BootRead], gpus: Sequence[GpuTrack], segments: _Segments
) -> list[DomainInput]:
    """One domain per channel name the node's agent streamed, in the order it first streamed them, gated by
    the node's GPU utilisation at each sample. A channel's rows are picked out read by read and take their
    samples' times: no time column per row of every channel is made."""
    channels: dict[Channel, int] = {}  # every (name, kind, source) of every read → its number
    numbers = [_channel_numbers(r.sensors, channels) for r in reads]
    by_number = list(channels)
    first_seen: dict[str, list[int]] = {}  # name → its channels' numbers, names in the order first streamed
    for channel, number in channels.items():
        first_seen.setdefault(channel[0], []).append(number)
    names = np.zeros(len(by_number) or 1, np.int64)
    for k, found in enumerate(first_seen.values()):
        names[found] = k
    domains = []
    for k, name in enumerate(first_seen):
        rows = [np.flatnonzero(names[n] == k) for n in numbers]
        samples = [r.sensors.sample[mine] for r, mine in zip(reads, rows, strict=True)]
        t = _joined([_pick(r.memory_t_ns, s) for r, s in zip(reads, samples, strict=True)], np.int64)
        seg = segments.of([len(s) for s in samples])
        interval = _joined(
            [_pick(r.memory.interval_s, s) for r, s in zip(reads, samples, strict=True)], np.float64
        )
        picked = list(zip(reads, rows, strict=True))
        power, energy = (
            _joined([_pick(getattr(r.sensors, c), mine) for r, mine in picked], np.float64)
            for c in ("power_w", "energy_j")
        )
        last = max(b for b, mine in enumerate(rows) if len(mine))  # its kind and source as last streamed
        _, kind, source = by_number[int(numbers[last][rows[last][-1]])]
        track = gated_track(t, seg, interval, power, energy, gpus=gpus)
        domains.append(DomainInput(name, kind, source, track))
    return domains


def _channel_numbers(rows: SensorRows, numbers: dict[Channel, int]) -> I64:
    """Each row's channel as a number from ``numbers`` (extended in the order channels first appear): from
    the read's own channel codes, a few distinct among many rows, so nothing is compared per row."""
    codes = np.flatnonzero(np.bincount(rows.channel)) if len(rows.channel) else np.empty(0, np.int64)
    first = [int(np.argmax(rows.channel == code)) for code in codes.tolist()]  # where each first appears
    remap = np.zeros(int(codes.max()) + 1 if len(codes) else 1, np.int64)
    for code, _at in sorted(zip(codes.tolist(), first, strict=True), key=lambda pair: pair[1]):
        channel = rows.channels[code]
        assert channel is not None  # a code some row has
        remap[code] = numbers.setdefault(channel, len(numbers))
    out: I64 = remap[rows.channel]
    return out


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


def _signal_tracks(reads: Sequence[BootRead], hello: dict[str, Any] | None) -> list[SignalTrack]:
    """Each GPU's clock signals, by UUID, with the maximum SM clock its hello reported."""
    t = _joined([r.signal_t_ns for r in reads], np.int64)
    uuids = _joined([r.signals.uuid for r in reads], object)
    clock = _joined([r.signals.sm_clock_hz for r in reads], np.float64)
    temp = _joined([r.signals.temperature_c for r in reads], np.float64)
    reasons = _joined([r.signals.reasons for r in reads], np.int64)
    gpus = ((hello or {}).get("hardware") or {}).get("gpus")
    maxima = {
        g["uuid"]: g.get("max_sm_clock_hz")
        for g in (gpus if isinstance(gpus, list) else ())
        if isinstance(g, dict) and isinstance(g.get("uuid"), str)
    }
    out = []
    for uuid in _in_first_order(uuids):
        mine = uuids == uuid
        order = np.argsort(t[mine], kind="stable")
        top = maxima.get(uuid)
        top = float(top) if type(top) is int or type(top) is float else None
        columns = (t[mine][order], clock[mine][order], temp[mine][order], reasons[mine][order])
        out.append(SignalTrack(*columns, top if top is not None and top > 0 else None, uuid=str(uuid)))
    return out


def _meter_domains(
    store: Store, node: str, t_from_ns: int, t_to_ns: int, gpus: Sequence[GpuTrack]
) -> list[DomainInput]:
    """The node's meter readings (already on the coordinator's clock), one domain per meter, with the errors
    that explain their gaps."""
    rows = store.meter_rows(node, t_from_ns, t_to_ns)
    errors: dict[str, list[tuple[int, str]]] = {}
    for domain, t_ns, error in store.meter_errors(node, t_from_ns, t_to_ns):
        errors.setdefault(domain, []).append((t_ns, error))
    names = np.array(rows.domain, dtype=object)
    domains = []
    for name, source in dict(zip(rows.domain, rows.source, strict=True)).items():
        mine = names == name
        count = int(mine.sum())
        # a meter's own counter is stored but not integrated: Shelly does not say how often aenergy moves,
        # and a BMC's EnergykWh is too coarse for ΔE/Δt over one poll; its power is the trapezoid
        unused = np.full(count, np.nan)
        zeros = np.zeros(count, dtype=np.int64)
        power = rows.power_w[mine]
        track = gated_track(rows.t_ns[mine], zeros, rows.interval_s[mine], power, unused, gpus=gpus)
        domains.append(DomainInput(name, "system", source, track, tuple(errors.pop(name, ()))))
    # a meter that never answered in the span: a domain with no samples and its errors
    nothing = np.empty(0)
    for name, found in errors.items():
        none = np.empty(0, np.int64)
        empty = gated_track(none, none, nothing, nothing, nothing, gpus=gpus)
        domains.append(DomainInput(name, "system", "meter", empty, tuple(found)))
    return domains


def _node_clock(
    rounds: dict[str, list[OffsetRound]], reads: Sequence[BootRead], t_from_ns: int, t_to_ns: int
) -> NodeClock:
    fits = [r.fit for r in reads if r.fit is not None]
    method = "monotonic" if len(fits) == len(reads) else ("wall" if not fits else "mixed")
    every = sorted((r for boot_rounds in rounds.values() for r in boot_rounds), key=lambda r: r.t_ns)
    return NodeClock(
        summary=summarise(every, t_from_ns, t_to_ns),
        method=method if reads else "none",
        rate_ppm=fits[-1].rate * 1e6 if fits else None,
        steps=tuple(s for r in reads for s in r.steps),
        disagreements=tuple(d for f in fits for d in f.disagreements),
    )


def engine_input(store: Store, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
    """The engine's scrapes around the span (a counter is read at the span's edges, a gauge held from the
    scrape before), or None when the engine was not scraped in it at all."""
    rows = store.engine_rows(t_from_ns - ENGINE_MARGIN_NS, t_to_ns + ENGINE_MARGIN_NS)
    errors = store.engine_errors(t_from_ns, t_to_ns)
    if not errors and not any(t_from_ns <= r.t_ns <= t_to_ns for r in rows):
        return None
    return EngineSamples.from_rows(rows, errors, (t_from_ns, t_to_ns))


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
            self._made[key] = np.repeat(np.arange(len(key), dtype=np.int64), key)
        return self._made[key]


def _joined(parts: Sequence[np.ndarray], dtype: type) -> np.ndarray:
    """The boots' columns one after another (one boot, the usual case: its column itself, not a copy)."""
    if len(parts) == 1:
        return parts[0].astype(dtype, copy=False)
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype=dtype)


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
) -> dict[str, Any]:
    """The run's export; ``gate_threshold``, ``scope`` and ``phases``, when given, replace the run's own
    (an offline re-export with another method: `sparkwatch export --db`); the export's ``method`` says
    which were used. ``series_buckets``: add the ``series`` block in that many buckets."""
    run = store.run(run_id)
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
    )
    windows = store.windows(run_id)
    try:
        return export_from(
            StoreSource(store), spec, nodes, windows, __version__, series_buckets=series_buckets
        )
    finally:
        let_go(windows)


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
