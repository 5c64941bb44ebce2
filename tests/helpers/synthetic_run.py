"""A synthetic run built from numpy arrays straight into ``core.export.build_export``: the report's tests and
its benchmark need an 8 h, 4-node, 10 Hz run with 10 000 windows, and a real one takes 8 h to record.

It looks like the demo's cluster (simulated GB10s, one ``sys_total`` domain per node but the last) with the
trouble a long run meets: util dipping below the gate between requests, a 30 s hole (agent unreachable) on
one node, an agent restart (new boot) on another, a 2-minute thermal slowdown on a third, and memory that
climbs from about 20 GiB towards 100 GiB of 128 GiB. Everything is vectorised (no per-sample Python object),
so the 8 h run builds in seconds; ``seed`` makes it reproducible.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkwatch import __version__
from sparkwatch.core.clock import ClockOffset, NodeClock
from sparkwatch.core.domains import DomainInput, gate_util
from sparkwatch.core.export import build_export
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import F64, I64, GpuTrack, MemTrack
from sparkwatch.core.windows import Window

S = 1_000_000_000
GIB = 2**30
T0_NS = 1_800_000_000 * S  # 2027-01-15: any Unix epoch ns stamp will do
LEAD_S = 30.0  # idle before the first window: the 10 s baseline period and some
TAIL_S = 10.0  # idle after the last
IDLE_W = 11.0
PREFILL_EXTRA_W = 6.0  # prefill runs flat out, a little above decode
SYSTEM_REST_W = 20.0  # what sys_total draws beside the GPU rail at rest (the demo's 31 W idle)
MAX_SM_CLOCK_HZ = 3.003e9
BUSY_SM_CLOCK_HZ = 2.418e9  # 0.805 of the maximum, as the simulated GB10 runs
IDLE_SM_CLOCK_HZ = 0.208e9
MEMORY_TOTAL_BYTES = 128 * GIB
MEMORY_START_BYTES = 20 * GIB
MEMORY_CLIMB_BYTES = 80 * GIB
KV_BYTES = int(1.5 * GIB)  # held while a request runs
PAGE_CACHE_START_BYTES = 12 * GIB  # the model's files, read once; given back as memory used climbs
GAP_S = 30.0  # the agent-down hole
RESTART_GAP_S = 2.0  # no samples while the restarted agent comes up
THERMAL_S = 120.0
THERMAL_REASONS = 0x20  # sw_thermal: one of core.throttle.SLOWDOWN_BITS
THERMAL_CLOCK_RATIO = 0.5  # of the maximum: under core.throttle.MIN_CLOCK_RATIO too
THERMAL_POWER_RATIO = 0.75
GPU_IDLE_REASON = 0x1
TOKENS_PER_S = 76.0
PROBE_PERIOD_S = 10.0


@dataclass(frozen=True, slots=True)
class Requests:
    """Every request's stamps (ns, coordinator clock), shared by all nodes (tensor-parallel: busy at once)."""

    starts: I64
    first_token: I64
    last_token: I64
    ends: I64


@dataclass(frozen=True, slots=True)
class Trouble:
    """What goes wrong, and where: node indices and coordinator times."""

    thermal_node: int
    thermal_ns: tuple[int, int]
    restart_node: int
    restart_ns: int
    gap_node: int
    gap_ns: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Layout:
    """The run as a whole: its span, sampling rate, requests and trouble."""

    t_end_ns: int
    hz: float
    requests: Requests
    trouble: Trouble
    first_timed_ns: int


def synthetic_export(
    hours: float = 8.0,
    nodes: int = 4,
    hz: float = 10.0,
    windows: int = 10_000,
    series_buckets: int | None = 2400,
    seed: int = 0,
) -> dict[str, Any]:
    """The ``sparkwatch.run/1`` export of the synthetic run, with its ``series`` block decimated to
    ``series_buckets`` time buckets (none when ``None``)."""
    rng = np.random.default_rng(seed)
    duration_s = hours * 3600.0
    if duration_s <= LEAD_S + TAIL_S or windows < 1 or nodes < 1:
        raise ValueError(f"{hours} h is too short for {windows} window(s) on {nodes} node(s)")
    requests = _requests(rng, duration_s, windows)
    warmups = _warmup_count(windows)
    layout = Layout(
        t_end_ns=T0_NS + round(duration_s * S),
        hz=hz,
        requests=requests,
        trouble=_trouble(requests, nodes),
        first_timed_ns=int(requests.starts[warmups]) if warmups < windows else int(requests.starts[0]),
    )
    run = RunSpec(
        id=f"synthetic-{hours:g}h-{nodes}n-{windows}w-s{seed}",
        name=f"synthetic: {nodes}x simulated GB10, {hours:g} h, {windows} requests",
        t_start_ns=T0_NS,
        t_end_ns=layout.t_end_ns,
        interval_s=1.0 / hz,
        command={"argv": ["bench", "--requests", str(windows)], "exit_code": 0},
    )
    inputs = [_node_input(rng, layout, i, last=i == nodes - 1) for i in range(nodes)]
    stamped = _windows(rng, requests, warmups)
    return build_export(run, inputs, stamped, __version__, series_buckets=series_buckets)


def _warmup_count(windows: int) -> int:
    return max(1, min(10, windows // 20)) if windows > 1 else 0


def _requests(rng: np.random.Generator, duration_s: float, count: int) -> Requests:
    """Back-to-back requests after the idle lead, each ~70-85 % of its slot, with an idle pause after it."""
    slot_s = (duration_s - LEAD_S - TAIL_S) / count
    k = np.arange(count)
    start_s = LEAD_S + k * slot_s + rng.uniform(0.0, 0.05, count) * slot_s
    length_s = rng.uniform(0.70, 0.85, count) * slot_s
    ttft_s = np.minimum(0.3, 0.08 * length_s) * rng.uniform(0.8, 1.2, count)
    starts = T0_NS + np.round(start_s * S).astype(np.int64)
    ends = starts + np.round(length_s * S).astype(np.int64)
    first = starts + np.round(ttft_s * S).astype(np.int64)
    last = np.maximum(first, ends - 2_000_000)  # the stream closes 2 ms after its last token
    return Requests(starts, first, last, ends)


def _trouble(requests: Requests, nodes: int) -> Trouble:
    """The slowdown from the request 10 % of the way in, the hole from the one at 55 %, the restart in the
    middle of the one at 80 % (its pause inside that request): apart even in a 6-minute run."""
    last = len(requests.starts) - 1

    def start(share: float) -> int:
        return int(requests.starts[round(last * share)])

    restarted = round(last * 0.80)
    middle = (int(requests.starts[restarted]) + int(requests.ends[restarted])) // 2
    return Trouble(
        thermal_node=0,
        thermal_ns=(start(0.10), start(0.10) + round(THERMAL_S * S)),
        restart_node=min(1, nodes - 1),
        restart_ns=middle + round(RESTART_GAP_S * S / 2),
        gap_node=min(2, nodes - 1),
        gap_ns=(start(0.55), start(0.55) + round(GAP_S * S)),
    )


def _windows(rng: np.random.Generator, r: Requests, warmups: int) -> list[Window]:
    count = len(r.starts)
    decode_s = (r.last_token - r.first_token) / S
    completion = (np.round(decode_s * TOKENS_PER_S * rng.uniform(0.95, 1.05, count)) + 1).astype(int)
    prompt = rng.integers(200, 2000, count)
    stopped = rng.random(count) < 0.3
    columns = zip(
        r.starts.tolist(), r.first_token.tolist(), r.last_token.tolist(), r.ends.tolist(), strict=True
    )
    return [
        Window(
            id=f"syn-{k:05d}",
            phase="warmup" if k < warmups else "timed",
            t_start_ns=start,
            t_end_ns=end,
            t_first_byte_ns=first,
            t_first_token_ns=first,
            t_last_token_ns=last,
            prompt_tokens=int(prompt[k]),
            completion_tokens=int(completion[k]),
            http_status=200,
            finish_reason="stop" if stopped[k] else "length",
            source={"kind": "synthetic"},
        )
        for k, (start, first, last, end) in enumerate(columns)
    ]


def _covered_ns(t_ns: I64, starts: I64, ends: I64) -> I64:
    """How much of the disjoint, sorted spans [starts, ends) lies before each time."""
    lengths = ends - starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    j = np.searchsorted(starts, t_ns, side="right")  # spans starting at or before t
    inside = np.clip(t_ns - starts[np.maximum(j - 1, 0)], 0, lengths[np.maximum(j - 1, 0)])
    return before[np.maximum(j - 1, 0)] + np.where(j > 0, inside, 0)


def _share(t_ns: I64, starts: I64, ends: I64) -> F64:
    """For the interval ending at each sample, the share of it inside the spans (0 for the first sample):
    NVML's utilisation is such a share of the last sample period, so it lags a request's edges."""
    covered = _covered_ns(t_ns, starts, ends)
    out = np.zeros(len(t_ns))
    dt = np.diff(t_ns)
    out[1:] = np.diff(covered) / np.maximum(dt, 1)
    return out


def _sample_times(rng: np.random.Generator, layout: Layout) -> I64:
    """Every 1/hz from the run's start, at this node's own phase, with a millisecond of scheduling jitter."""
    step_ns = S / layout.hz
    count = int((layout.t_end_ns - T0_NS) // step_ns) + 1
    phase_ns = int(rng.integers(0, int(step_ns)))
    jitter = rng.integers(-500_000, 500_000, count)
    t = T0_NS + phase_ns + np.round(np.arange(count) * step_ns).astype(np.int64) + jitter
    return np.sort(t[t <= layout.t_end_ns])


@dataclass(frozen=True, slots=True)
class Readings:
    """One node's readings at its sample times (before the hole and the restart take samples out)."""

    t_ns: I64
    busy: F64  # share of the last interval serving a request
    serving: np.ndarray  # bool: a request is running at the sample's instant
    power_w: F64  # mean power over the last interval
    util_ratio: F64
    thermal: np.ndarray  # bool: inside the slowdown


def _readings(rng: np.random.Generator, layout: Layout, i: int) -> Readings:
    r, trouble = layout.requests, layout.trouble
    t = _sample_times(rng, layout)
    busy = _share(t, r.starts, r.ends)
    prefill = _share(t, r.starts, r.first_token)
    decode = busy - prefill
    util_busy = round(0.90 - 0.04 * (i % 8), 2)  # the demo's tensor-parallel ranks
    busy_w = 56.0 - 2.0 * (i % 8)
    idle_noise = np.abs(rng.normal(0.0, 0.01, len(t)))
    util = np.clip(util_busy * decode + prefill + rng.normal(0.0, 0.02, len(t)) * busy + idle_noise, 0, 1)
    power = IDLE_W + (busy_w - IDLE_W) * decode + (busy_w + PREFILL_EXTRA_W - IDLE_W) * prefill
    thermal = np.zeros(len(t), dtype=bool)
    if i == trouble.thermal_node:
        thermal = (t >= trouble.thermal_ns[0]) & (t < trouble.thermal_ns[1])
        power[thermal] = IDLE_W + (power[thermal] - IDLE_W) * THERMAL_POWER_RATIO
    power += rng.normal(0.0, 0.3, len(t))
    j = np.searchsorted(r.starts, t, side="right") - 1
    serving = (j >= 0) & (t < r.ends[np.maximum(j, 0)])
    return Readings(t, busy, serving, power, np.round(util, 2), thermal)


def _kept(layout: Layout, i: int, t_ns: I64) -> tuple[np.ndarray, I64]:
    """Which samples the coordinator has (the hole and the restart's pause taken out), and their boot."""
    trouble = layout.trouble
    keep = np.ones(len(t_ns), dtype=bool)
    segment = np.zeros(len(t_ns), dtype=np.int64)
    if i == trouble.gap_node:
        keep &= (t_ns < trouble.gap_ns[0]) | (t_ns >= trouble.gap_ns[1])
    if i == trouble.restart_node:
        down = trouble.restart_ns - round(RESTART_GAP_S * S)
        keep &= (t_ns < down) | (t_ns >= trouble.restart_ns)
        segment[t_ns >= trouble.restart_ns] = 1
    return keep, segment


def _node_input(rng: np.random.Generator, layout: Layout, i: int, *, last: bool) -> NodeInput:
    name = f"spark-{i + 1}"
    uuid = f"GPU-5e{i:06x}-5157-4000-8000-synthetic{i:03d}"
    x = _readings(rng, layout, i)
    keep, segment = _kept(layout, i, x.t_ns)
    dt_s = np.diff(x.t_ns, prepend=x.t_ns[0]) / S
    energy = 1.2e6 + i * 1e5 + np.cumsum(x.power_w * dt_s)  # NVML's counter runs since the driver loaded
    instant = x.power_w + rng.normal(0.0, 0.2, len(x.t_ns))
    t, seg = x.t_ns[keep], segment[keep]
    interval = np.full(len(t), 1.0 / layout.hz)
    gpu = GpuTrack.from_arrays(
        t, seg, interval, power_w=instant[keep], energy_j=energy[keep], util_ratio=x.util_ratio[keep]
    )
    domains = [] if last else [_sys_total(rng, gpu, x, keep, interval)]
    return NodeInput(
        node=name,
        gpus=[gpu],
        gpu_uuids=[uuid],
        memory=MemTrack.from_arrays(
            t, seg, interval, _memory(rng, layout, x, i)[keep], _page_cache(layout, x)[keep]
        ),
        clock=_clock(rng, layout),
        memory_model="unified",
        hardware=_hardware(uuid),
        unsupported={"memory_info": "NOT_SUPPORTED", "power_limit": "NOT_SUPPORTED"},
        domains=domains,
        signals=[_signals(rng, x, keep)],
    )


def _sys_total(
    rng: np.random.Generator, gpu: GpuTrack, x: Readings, keep: np.ndarray, interval: F64
) -> DomainInput:
    """The board's whole-node channel: the GPU rail plus the rest of the system, power only (trapezoid)."""
    power = x.power_w + SYSTEM_REST_W + 6.0 * x.busy + rng.normal(0.0, 0.4, len(x.t_ns))
    track = GpuTrack.from_arrays(
        gpu.t_ns,
        gpu.segment,
        interval,
        power_w=power[keep],
        energy_j=np.full(len(gpu.t_ns), np.nan),
        util_ratio=np.zeros(len(gpu.t_ns)),
    )
    track = dataclasses.replace(track, util_ratio=gate_util([gpu], track.t_ns))
    return DomainInput("sys_total", "system", "sim:spbm", track)


def _memory(rng: np.random.Generator, layout: Layout, x: Readings, i: int) -> F64:
    """Flat before the first timed request, then a steady climb (a growing cache), plus each request's KV."""
    r = layout.requests
    span = max(int(r.ends[-1]) - layout.first_timed_ns, 1)
    climb = np.clip((x.t_ns - layout.first_timed_ns) / span, 0.0, 1.0)
    used = MEMORY_START_BYTES + i * GIB / 2 + MEMORY_CLIMB_BYTES * climb + KV_BYTES * x.busy
    return np.round(used + rng.normal(0.0, 2**26, len(x.t_ns)))


def _page_cache(layout: Layout, x: Readings) -> F64:
    """The page cache: the model's files until the first timed request, a quarter of them given back as
    memory used climbs (no noise drawn: the other readings' random draws stay as they were)."""
    span = max(int(layout.requests.ends[-1]) - layout.first_timed_ns, 1)
    climb = np.clip((x.t_ns - layout.first_timed_ns) / span, 0.0, 1.0)
    return np.round(PAGE_CACHE_START_BYTES * (1.0 - 0.25 * climb))


def _signals(rng: np.random.Generator, x: Readings, keep: np.ndarray) -> SignalTrack:
    """The SM clock is read at the instant (up while a request runs, down and ``gpu_idle`` otherwise, so
    only the slowdown is a throttle); the temperature follows the work with its lag."""
    clock = np.where(x.serving, BUSY_SM_CLOCK_HZ, IDLE_SM_CLOCK_HZ)
    clock[x.thermal & x.serving] = THERMAL_CLOCK_RATIO * MAX_SM_CLOCK_HZ
    temperature = np.round(42.0 + 23.0 * x.busy + rng.normal(0.0, 0.7, len(x.t_ns)))
    temperature[x.thermal] = 91.0
    reasons = np.where(x.serving, 0, GPU_IDLE_REASON).astype(np.int64)
    reasons[x.thermal] |= THERMAL_REASONS
    return SignalTrack(x.t_ns[keep], clock[keep], temperature[keep], reasons[keep], MAX_SM_CLOCK_HZ)


def _clock(rng: np.random.Generator, layout: Layout) -> NodeClock:
    probes = int((layout.t_end_ns - T0_NS) / S / PROBE_PERIOD_S) + 1
    offset = ClockOffset(
        offset_ns=int(rng.normal(0.0, 2e6)),
        uncertainty_ns=int(rng.uniform(150e3, 600e3)),
        probes_used=probes,
        probes_total=probes,
    )
    return NodeClock(offset, "monotonic", round(float(rng.normal(0.0, 5.0)), 3))


def _hardware(uuid: str) -> dict[str, Any]:
    """What a simulated GB10's hello says, as the demo exports it."""
    return {
        "backend": "synthetic",
        "simulated": True,
        "driver_version": "580.95.05",
        "cuda_driver_version": "13.0",
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA GB10",
                "uuid": uuid,
                "memory_total_bytes": None,
                "max_sm_clock_hz": MAX_SM_CLOCK_HZ,
            }
        ],
        "host": {"cpu": "synthetic", "cpu_count": 20, "arch": "aarch64", "os": "synthetic"},
        "memory_total_bytes": MEMORY_TOTAL_BYTES,
    }
