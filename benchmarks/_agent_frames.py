"""Agent sample frames for the store benchmarks (store_size.py, export_store.py), and their way into a store.

Two kinds of GB10 frames, both in the agent's own field layout: ``sim_frames`` ticks the agent's sampler
on the simulated GB10 with an injected 10 Hz clock (an idle node: its values repeat, which flatters any
compressor); ``busy_run`` replays the shapes of the synthetic 8 h run (tests/helpers/synthetic_run.py:
requests, util dips, a thermal slowdown, a 30 s hole, an agent restart, memory climbing) into copies of a
sim frame, each number quantised to the unit the agent reads it in (NVML mW, mJ, %, °C, MHz; meminfo kB;
hwmon µW). Every node carries the sim's three spbm channels (the synthetic run leaves sys_total off its
last node; here each is a full GB10). Frames reach a ``Store`` as a live link hands them over: JSON line,
``wire.decode_frame``, ``Store.ingest`` per batch.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from helpers import synthetic_run as syn
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.windows import Window
from sparkwatch.store import Store
from sparkwatch.wire import SampleFrame, decode_frame
from sparkwatch_agent.assemble import assemble
from sparkwatch_agent.config import build_config
from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.sampling.clocks import Clocks
from sparkwatch_agent.sampling.sample import encode_frame
from sparkwatch_agent.serving.hello import hello_frame

S = 1_000_000_000
T0_NS = syn.T0_NS  # where the synthetic run's coordinator times start
JITTER_NS = 500_000  # the sampling loop's deadline jitter, as the synthetic run models it
UPTIME_NS = 86_400 * S  # an agent up a day before the run: its monotonic clock reads that much
RESTART_MONO_NS = 5 * S  # the restarted agent's monotonic clock at its first sample
PROBE_NS = 10 * S  # links probe the clock every 10 s
DC_INPUT_RATIO = 1.04  # the sim's dc_input over sys_total
SPBM_GPU_START_J = 3000.0


def sim_frames(
    node: str, count: int, t0_wall_ns: int, hz: float = 10.0
) -> tuple[dict[str, Any], list[bytes]]:
    """``count`` frames of the agent's sampler on the simulated GB10 at ``hz`` (clock injected, ticks
    jittered by ±0.5 ms), and its hello."""
    rng = np.random.default_rng(zlib.crc32(node.encode()))
    step_ns = round(S / hz)
    now = [t0_wall_ns, UPTIME_NS]
    config = build_config({"node": node, "backend": "sim", "ring_size": count + 10, "interval": 1 / hz}, {})
    sampler = assemble(config, Clocks(wall_ns=lambda: now[0], mono_ns=lambda: now[1])).sampler
    jitter = rng.integers(-JITTER_NS, JITTER_NS, count)
    for k in range(count):
        now[0] = t0_wall_ns + k * step_ns + int(jitter[k])
        now[1] = UPTIME_NS + k * step_ns + int(jitter[k])
        sampler.tick()
    frames = list(sampler.ring.after(0, count).frames)
    hello = orjson.loads(encode_frame(hello_frame(sampler.snapshot, read_host_facts())))
    sampler.stop()
    return hello, frames


@dataclass(frozen=True, slots=True)
class BusyNode:
    """One node's replayed samples (coordinator time ``t_ns``; the agent's clocks derived per boot)."""

    node: str
    template: dict[str, Any]  # a sim frame of this node: the layout every replayed frame copies
    hello: dict[str, Any]
    boots: tuple[str, ...]
    columns: dict[str, np.ndarray]  # t_ns, boot, seq, wall_ns, mono_ns and the quantised values
    offset: ClockOffset  # wall offset and its uncertainty (the mono offset is per boot: mono_offsets)
    mono_offsets: tuple[int, ...]  # per boot: coordinator time − agent monotonic time

    def __len__(self) -> int:
        return len(self.columns["t_ns"])

    def hellos(self) -> list[dict[str, Any]]:
        return [dict(self.hello, boot_id=boot, last_seq=0) for boot in self.boots]

    def rounds(self) -> Iterator[tuple[str, ClockOffset, int]]:
        """The clock-probe rounds a link stores: every 10 s while a boot is up (boot, offset, t_ns)."""
        t, boot = self.columns["t_ns"], self.columns["boot"]
        for b, name in enumerate(self.boots):
            mine = t[boot == b]
            for t_ns in range(int(mine[0]), int(mine[-1]) + 1, PROBE_NS):
                yield (
                    name,
                    ClockOffset(*_offset_fields(self.offset), mono_offset_ns=self.mono_offsets[b]),
                    t_ns,
                )

    def lines(self, lo: int, hi: int) -> list[str]:
        """Frames ``lo``..``hi`` as the agent's JSON lines."""
        return [orjson.dumps(self._frame(k)).decode() for k in range(lo, min(hi, len(self)))]

    def _frame(self, k: int) -> dict[str, Any]:
        c, tpl = self.columns, self.template
        gpu = dict(tpl["gpus"][0])
        gpu.update(
            power_w=float(c["power_w"][k]),
            power_instant_w=float(c["power_w"][k]),
            energy_j=float(c["energy_j"][k]),
            util_ratio=float(c["util_ratio"][k]),
            temperature_c=float(c["temperature_c"][k]),
            sm_clock_hz=float(c["sm_clock_hz"][k]),
            clock_event_reasons=int(c["reasons"][k]),
        )
        used = int(c["mem_used_bytes"][k])
        memory = dict(tpl["memory"])
        cache = memory["page_cache_bytes"]
        memory.update(used_bytes=used, available_bytes=memory["total_bytes"] - used)
        memory["free_bytes"] = max(0, memory["available_bytes"] - cache)
        sensors = [dict(s) for s in tpl["sensors"]]
        for s, power, energy in zip(
            sensors, _sensor_values(c, k), (None, None, c["spbm_energy_j"][k]), strict=True
        ):
            s.update(power_w=power, energy_j=None if energy is None else float(energy))
        frame = dict(tpl)
        frame.update(
            seq=int(c["seq"][k]),
            boot_id=self.boots[int(c["boot"][k])],
            t_wall_ns=int(c["wall_ns"][k]),
            t_mono_ns=int(c["mono_ns"][k]),
            interval_s=float(c["interval_s"][k]),
            gpus=[gpu],
            memory=memory,
            sensors=sensors,
        )
        return frame


def _offset_fields(offset: ClockOffset) -> tuple[int, int, int, int]:
    return offset.offset_ns, offset.uncertainty_ns, 8, 8


def _sensor_values(c: dict[str, np.ndarray], k: int) -> tuple[float, float, float]:
    sys_w = float(c["sys_total_w"][k])
    return sys_w, round(sys_w * DC_INPUT_RATIO, 6), float(c["power_w"][k])


@dataclass(frozen=True, slots=True)
class BusyRun:
    t_start_ns: int
    t_end_ns: int
    hz: float
    nodes: list[BusyNode]
    windows: list[Window]


def busy_run(
    hours: float, nodes: int, windows: int, *, hz: float = 10.0, seed: int = 0, shift_ns: int = 0
) -> BusyRun:
    """The synthetic run's shapes as agent frames; every time moved by ``shift_ns`` (a TSDB refuses
    samples far from its own now)."""
    rng = np.random.default_rng(seed)
    duration_s = hours * 3600.0
    requests = syn._requests(rng, duration_s, windows)
    warmups = syn._warmup_count(windows)
    layout = syn.Layout(
        t_end_ns=syn.T0_NS + round(duration_s * S),
        hz=hz,
        requests=requests,
        trouble=syn._trouble(requests, nodes),
        first_timed_ns=int(requests.starts[min(warmups, windows - 1)]),
    )
    inputs = [syn._node_input(rng, layout, i, last=False) for i in range(nodes)]
    stamped = syn._windows(rng, requests, warmups)
    replayed = [_busy_node(inp, layout, shift_ns) for inp in inputs]
    moved = [_moved(w, shift_ns) for w in stamped]
    return BusyRun(syn.T0_NS + shift_ns, layout.t_end_ns + shift_ns, hz, replayed, moved)


def _moved(w: Window, shift_ns: int) -> Window:
    stamps = ("t_start_ns", "t_end_ns", "t_first_byte_ns", "t_first_token_ns", "t_last_token_ns")
    return dataclasses.replace(
        w, **{name: getattr(w, name) + shift_ns for name in stamps if getattr(w, name) is not None}
    )


def _busy_node(inp: Any, layout: syn.Layout, shift_ns: int) -> BusyNode:
    """One synthetic node's tracks (all on the same sample times) as quantised agent columns."""
    hello, frames = sim_frames(inp.node, 1, syn.T0_NS)
    template = orjson.loads(frames[0])
    gpu, mem, sig, sys_track = inp.gpus[0], inp.memory, inp.signals[0], inp.domains[0].track
    t = gpu.t_ns + shift_ns
    boot = gpu.segment
    step_ns = round(S / layout.hz)
    first_of_boot = np.array([int(t[boot == b][0]) if (boot == b).any() else 0 for b in (0, 1)])
    # boot 0's monotonic clock has run a day at the run's start; the restarted one's 5 s at its first sample
    mono_offsets = (syn.T0_NS + shift_ns - UPTIME_NS, int(first_of_boot[1]) - RESTART_MONO_NS)
    seq = np.round((t - first_of_boot[boot]) / step_ns).astype(np.int64) + 1
    dt_s = np.diff(t, prepend=t[0]) / S
    power = np.round(gpu.power_w, 3)
    columns = {
        "t_ns": t,
        "boot": boot,
        "seq": seq,
        "wall_ns": t - inp.clock.summary.offset_ns,
        "mono_ns": t - np.array(mono_offsets)[boot],
        "interval_s": np.full(len(t), 1.0 / layout.hz),
        "power_w": power,
        "energy_j": np.floor(gpu.energy_j * 1000) / 1000,  # NVML's counter is whole mJ
        "util_ratio": np.round(gpu.util_ratio, 2),
        "temperature_c": np.round(sig.temperature_c),
        "sm_clock_hz": np.round(sig.sm_clock_hz / 1e6) * 1e6,
        "reasons": sig.reasons,
        "mem_used_bytes": (mem.used_bytes // 1024).astype(np.int64) * 1024,
        "sys_total_w": np.round(sys_track.power_w, 6),
        "spbm_energy_j": np.round(SPBM_GPU_START_J + np.cumsum(power * dt_s), 3),
    }
    boots = tuple(f"{hello['boot_id'][:12]}{b:04x}" for b in range(int(boot.max()) + 1))
    return BusyNode(inp.node, template, hello, boots, columns, inp.clock.summary, mono_offsets)


# ---- into a store ------------------------------------------------------------------------------------


def decoded(lines: Sequence[str]) -> list[SampleFrame]:
    """The lines as a link decodes them (``wire.decode_frame`` on the parsed line)."""
    out = []
    for line in lines:
        frame = decode_frame(line, orjson.loads(line))
        assert isinstance(frame, SampleFrame), line[:80]
        out.append(frame)
    return out


def ingest(store: Store, node: str, frames: Sequence[SampleFrame], batch: int) -> int:
    """``Store.ingest`` in batches of ``batch`` frames, as a link hands them over."""
    new = 0
    for at in range(0, len(frames), batch):
        part = frames[at : at + batch]
        new += store.ingest(node, part[0].boot_id, part)
    return new


def interleaved(
    per_node: dict[str, Callable[[int, int], list[str]]], counts: dict[str, int], batch: int
) -> Iterator[tuple[str, list[str]]]:
    """Every node's lines in turns of ``batch``, round robin (4 links storing at once)."""
    at = 0
    while any(at < n for n in counts.values()):
        for node, lines in per_node.items():
            if at < counts[node]:
                yield node, lines(at, at + batch)
        at += batch
