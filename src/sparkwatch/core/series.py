"""The export's optional ``series`` block: what the run report plots, per node, on one time axis.

Power is the *interval* power the measurement itself uses (``Integrals``), placed at each interval's middle,
so the plot shows the numbers the figures were made of; utilisation, memory and SM clock are the raw samples.
Every line is decimated (core.decimate) to ``buckets`` time buckets over the run, a gap stays a break. Beside
the lines: the time the gate dropped inside the scope (``gated_out``) and the throttle episodes, both exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkwatch.core.decimate import Mask, decimate
from sparkwatch.core.domains import MAX_PLAUSIBLE_NODE_W, listed
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.throttle import MIN_CLOCK_RATIO, SLOWDOWN_BITS, SignalTrack, not_idle, reason_names
from sparkwatch.core.tracks import F64, GAP_INTERVALS, I64, GpuTrack, MemTrack
from sparkwatch.core.windows import Scope, Window

METHOD = "min_max_per_bucket"
ABOUT = (
    "Per run of joined samples, the min and the max sample of each time bucket (at their own times) plus the"
    " run's first and last sample; null is a gap (another agent boot, a step longer than the gap limit, an"
    " unknown value) and is never joined across."
)
#: What a throttle episode from the SM clock alone is called (the window flags say ``throttled:sm_clock``).
LOW_CLOCK = "sm_clock"
#: Each kind of line's unit, and the digits kept per unit (0: whole numbers): enough to plot, small in JSON.
UNITS = {
    "gpu_power_w": "W",
    "system_power_w": "W",
    "util_ratio": "ratio",
    "mem_used_bytes": "bytes",
    "mem_page_cache_bytes": "bytes",
    "sm_clock_hz": "Hz",
}
DIGITS = {"W": 2, "ratio": 3, "bytes": 0, "Hz": 0}
#: Gated-out pieces kept exact per bucket, on average (a request's two edges each drop an interval or two:
#: an 8 h run with 10 000 windows has about 10 600 pieces per node in 2400 buckets).
GATED_PIECES_PER_BUCKET = 8


@dataclass(frozen=True, slots=True)
class Frame:
    """The plot's time axis: the run's span cut into ``buckets`` buckets of ``bucket_ns``."""

    t0_ns: int
    t_end_ns: int
    bucket_ns: int
    buckets: int

    def within(self, t_ns: I64) -> slice:
        """The samples (sorted) inside [t0, t_end]."""
        lo = np.searchsorted(t_ns, self.t0_ns, side="left")
        hi = np.searchsorted(t_ns, self.t_end_ns, side="right")
        return slice(int(lo), int(hi))

    def seconds(self, t_ns: I64) -> list[float]:
        return np.round((t_ns - self.t0_ns) / 1e9, 3).tolist()  # type: ignore[no-any-return]


def run_series(
    run: RunSpec,
    nodes: Sequence[NodeInput],
    scope: Scope,
    buckets: int,
    span: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The ``series`` block in ``buckets`` buckets over ``span`` (the run's own span by default)."""
    frame = _frame(span if span is not None else (run.t_start_ns, run.t_end_ns), buckets)
    return series_block(frame, [node_series(node, run, scope, frame) for node in nodes])


def series_frame(run: RunSpec, windows: Sequence[Window], buckets: int) -> Frame:
    """The time axis of an export's block: the run and its windows together (a window may start before
    the run or end after it, and is measured all the same), so no measured time is left out of the plots."""
    return _frame(
        (
            min([run.t_start_ns, *(w.t_start_ns for w in windows)]),
            max([run.t_end_ns, *(w.t_end_ns for w in windows)]),
        ),
        buckets,
    )


def _frame(span: tuple[int, int], buckets: int) -> Frame:
    if buckets < 1:
        raise ValueError(f"buckets must be at least 1, got {buckets}")
    t0_ns, t_end_ns = span
    span_ns = max(t_end_ns - t0_ns, 0)
    return Frame(t0_ns, t_end_ns, max(1, -(-span_ns // buckets)), buckets)


def series_block(frame: Frame, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The block from its frame and each node's :func:`node_series`."""
    return {
        "method": METHOD,
        "about": ABOUT,
        "t0_ns": frame.t0_ns,
        "t_end_ns": frame.t_end_ns,
        "bucket_s": frame.bucket_ns / 1e9,
        "buckets": frame.buckets,
        "nodes": nodes,
    }


def node_series(node: NodeInput, run: RunSpec, scope: Scope, frame: Frame) -> dict[str, Any]:
    """One node's entry in the block: its lines, the time the gate dropped and its throttle episodes."""
    gpus = [Integrals.build(track, run.gate_threshold) for track in node.gpus]
    index = {uuid: i for i, uuid in enumerate(node.gpu_uuids)}
    lines = []
    for i, (uuid, power) in enumerate(zip(node.gpu_uuids, gpus, strict=True)):
        head = _head(f"gpu_power_w/{i}", "gpu_power_w", f"GPU {i} (NVML)", gpu_uuid=uuid)
        lines.append(_power_line(head, power, frame))
    for d in listed(node.domains):
        power = Integrals.build(d.track, run.gate_threshold, MAX_PLAUSIBLE_NODE_W)
        extra = {"domain": d.domain, "domain_kind": d.kind, "source": d.source}
        lines.append(
            _power_line(
                _head(f"system_power_w/{d.domain}", "system_power_w", f"{d.domain} ({d.source})", **extra),
                power,
                frame,
            )
        )
    for i, (track, uuid) in enumerate(zip(node.gpus, node.gpu_uuids, strict=True)):
        head = _head(f"util_ratio/{i}", "util_ratio", f"GPU {i}", gpu_uuid=uuid)
        lines.append(_sample_line(head, track, track.util_ratio, frame))
    head = _head("mem_used_bytes", "mem_used_bytes", "memory used")
    lines.append(_sample_line(head, node.memory, node.memory.used_bytes, frame))
    if np.isfinite(node.memory.page_cache_bytes).any():  # a source without it draws no empty line
        head = _head("mem_page_cache_bytes", "mem_page_cache_bytes", "page cache")
        lines.append(_sample_line(head, node.memory, node.memory.page_cache_bytes, frame))
    max_step_ns = round(GAP_INTERVALS * run.interval_s * 1e9)
    for j, signals in enumerate(node.signals):
        i = index.get(signals.uuid or "", j)  # a track without a UUID: by its place
        head = _head(f"sm_clock_hz/{i}", "sm_clock_hz", f"GPU {i}", gpu_uuid=signals.uuid)
        lines.append(_clock_line(head, signals, max_step_ns, frame))
    return {
        "node": node.node,
        "lines": lines,
        **gated_out(gpus, scope, frame),
        "throttle": throttle_episodes(node.signals, max_step_ns, frame),
    }


def _head(key: str, kind: str, label: str, **extra: Any) -> dict[str, Any]:
    """A line's description: ``key`` unique in the node, its kind and unit, the label a legend shows."""
    return {"key": key, "kind": kind, "unit": UNITS[kind], "label": label, **extra}


def _line(head: dict[str, Any], t_ns: I64, v: F64, breaks: Mask, frame: Frame) -> dict[str, Any]:
    digits = DIGITS[head["unit"]]
    t_s, values = decimate(
        t_ns, v, breaks, frame.t0_ns, frame.bucket_ns, keep_all_up_to=frame.buckets, digits=digits
    )
    return {**head, "t_s": t_s, "v": values}


def _power_line(head: dict[str, Any], power: Integrals, frame: Frame) -> dict[str, Any]:
    """Interval power at each interval's middle; a gap interval is NaN, so adjacent valid ones are joined and
    nothing is joined across a gap. ``samples``: the raw samples inside the run."""
    t = power.t_ns
    middle = t[:-1] + (t[1:] - t[:-1]) // 2 if len(t) > 1 else np.empty(0, np.int64)
    inside = frame.within(middle)
    values = power.power_w[inside]
    head = {**head, "samples": _count(frame.within(t))}
    return _line(head, middle[inside], values, np.zeros(len(values), bool), frame)


def _sample_line(head: dict[str, Any], track: GpuTrack | MemTrack, v: F64, frame: Frame) -> dict[str, Any]:
    """Raw samples, broken where the boot changes or a step exceeds the gap limit (as the integrals are,
    but for a coarse counter's span across such a step: core/held_counter.py)."""
    t = track.t_ns
    breaks = np.zeros(len(t), bool)
    if len(t) > 1:
        breaks[1:] = track.segment[1:] != track.segment[:-1]
        breaks[1:] |= np.diff(t) > np.maximum(track.max_gap_ns[1:], track.max_gap_ns[:-1])
    inside = frame.within(t)
    return _line({**head, "samples": _count(inside)}, t[inside], v[inside], breaks[inside], frame)


def _clock_line(head: dict[str, Any], signals: SignalTrack, max_step_ns: int, frame: Frame) -> dict[str, Any]:
    """SM clock samples (a signal track has no boot segments): broken where a step exceeds the gap limit."""
    t = signals.t_ns
    breaks = np.zeros(len(t), bool)
    breaks[1:] = np.diff(t) > max_step_ns
    inside = frame.within(t)
    head = {**head, "samples": _count(inside)}
    return _line(head, t[inside], signals.sm_clock_hz[inside], breaks[inside], frame)


def _count(inside: slice) -> int:
    return int(inside.stop - inside.start)


def covered(starts: I64, ends: I64, need: int) -> tuple[I64, I64]:
    """The maximal half-open pieces covered by at least ``need`` of the [starts, ends) intervals: with
    ``need`` 1 their union; with two disjoint unions and ``need`` 2, their intersection. Touching pieces
    merge; empty ones are dropped."""
    times = np.concatenate((starts, ends))
    delta = np.concatenate((np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64)))
    order = np.lexsort((-delta, times))  # at one time, starts before ends: touching pieces merge
    times, step = times[order], delta[order]
    count = np.cumsum(step)
    before = count - step
    a, b = times[(count >= need) & (before < need)], times[(count < need) & (before >= need)]
    keep = b > a
    return a[keep], b[keep]


def gated_out(gpus: Sequence[Integrals], scope: Scope, frame: Frame) -> dict[str, Any]:
    """Where the gate dropped valid intervals of any of the node's GPUs, inside the scope and the run:
    ``gated_out`` ``[[a_s, b_s], …]`` since t0, exact while there are at most ``GATED_PIECES_PER_BUCKET``
    pieces per bucket. A gate flickering on every sample would make a long run's block tens of MB: then
    the pieces separated by the shortest gaps are joined until that many are left, and
    ``gated_out_joined_s`` says up to which gap (0: exact)."""
    a, b = _dropped(gpus, scope, frame)
    cap = GATED_PIECES_PER_BUCKET * frame.buckets
    joined_ns = 0
    if len(a) > cap:
        gaps = a[1:] - b[:-1]
        joined_ns = int(np.partition(gaps, len(a) - cap - 1)[len(a) - cap - 1])
        close = gaps <= joined_ns
        a, b = a[np.append(True, ~close)], b[np.append(~close, True)]
    spans = [list(pair) for pair in zip(frame.seconds(a), frame.seconds(b), strict=True)]
    return {"gated_out": spans, "gated_out_joined_s": joined_ns / 1e9}


def _dropped(gpus: Sequence[Integrals], scope: Scope, frame: Frame) -> tuple[I64, I64]:
    dropped = [(i.t_ns[:-1][i.valid & ~i.gated], i.t_ns[1:][i.valid & ~i.gated]) for i in gpus]
    if not dropped:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    a, b = covered(np.concatenate([d[0] for d in dropped]), np.concatenate([d[1] for d in dropped]), 1)
    span_a, span_b = covered(scope.starts, scope.ends, 1)
    span_a, span_b = covered(
        np.concatenate((span_a, [frame.t0_ns])), np.concatenate((span_b, [frame.t_end_ns])), 2
    )  # the scope clipped to the run
    return covered(np.concatenate((a, span_a)), np.concatenate((b, span_b)), 2)


def throttle_episodes(tracks: Sequence[SignalTrack], max_step_ns: int, frame: Frame) -> list[dict[str, Any]]:
    """Stretches of consecutive samples in which a GPU reported a slowdown reason (heat, power brake) or ran
    under ``MIN_CLOCK_RATIO`` of its maximum SM clock without saying it was idle. An episode lasts from its
    first such sample to the next sample that says otherwise (its last one when a gap follows), in time
    order over the node's GPUs."""
    out: list[dict[str, Any]] = []
    for signals in tracks:
        inside = frame.within(signals.t_ns)
        t, reasons = signals.t_ns[inside], signals.reasons[inside]
        bits = np.where(reasons >= 0, reasons & SLOWDOWN_BITS, 0)
        top = signals.max_sm_clock_hz
        with np.errstate(invalid="ignore"):
            low = signals.sm_clock_hz[inside] < MIN_CLOCK_RATIO * top if top else np.zeros(len(t), bool)
        low &= not_idle(reasons)  # an idle GPU's low clock is no slowdown
        flagged = (bits != 0) | low
        if not flagged.any():
            continue
        joined = np.zeros(len(t), bool)
        joined[1:] = flagged[1:] & flagged[:-1] & (np.diff(t) <= max_step_ns)
        first = np.flatnonzero(flagged & ~joined)
        last = np.flatnonzero(flagged & ~np.append(joined[1:], False))
        held = np.minimum(last + 1, len(t) - 1)
        follows = (last + 1 < len(t)) & (t[held] - t[last] <= max_step_ns)
        ends = np.where(follows, t[held], t[last])
        masks = np.bitwise_or.reduceat(bits, first)
        lows = np.logical_or.reduceat(low, first)
        for a, b, mask, slow in zip(first, ends, masks.tolist(), lows.tolist(), strict=True):
            named = reason_names(int(mask)) + ([LOW_CLOCK] if slow else [])
            span = frame.seconds(np.array([t[a], b], np.int64))
            out.append({"t_s": span, "gpu_uuid": signals.uuid, "reasons": named})
    return sorted(out, key=lambda e: (e["t_s"][0], e["gpu_uuid"] or ""))
