"""Assembles one node's sampler from a config: backend, memory reader, sensors, ring, leases."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from sparkwatch_agent.config import AgentConfig
from sparkwatch_agent.gpu_backend import GpuBackend
from sparkwatch_agent.hwmon import HwmonSensors
from sparkwatch_agent.interval_lease import IntervalLeases
from sparkwatch_agent.meminfo import MeminfoReader
from sparkwatch_agent.nvml_backend import NvmlBackend
from sparkwatch_agent.ring import SampleRing
from sparkwatch_agent.sample import Sample, encode_sample
from sparkwatch_agent.sampler import Clocks, MemoryReader, Sampler
from sparkwatch_agent.sim import SimGb10, SimMeminfoReader, SimNvml


@dataclass(frozen=True, slots=True)
class Node:
    sampler: Sampler
    sim: SimGb10 | None


def build_node(
    config: AgentConfig,
    clocks: Clocks | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    on_tick: Callable[[], None] | None = None,
) -> Node:
    clocks = clocks or Clocks(wall_ns=time.time_ns, mono_ns=time.monotonic_ns)
    sim: SimGb10 | None = None
    memory: MemoryReader
    gpu: GpuBackend
    if config.backend == "sim":
        sim = SimGb10(config.node, clocks.mono_ns)
        gpu = NvmlBackend(lib=SimNvml(sim), name="sim", simulated=True)
        memory = SimMeminfoReader(sim)
        sensors = None
    else:
        gpu = NvmlBackend()
        memory = MeminfoReader(config.meminfo_path)
        hwmon = HwmonSensors(config.hwmon_root)
        sensors = hwmon if hwmon.names else None
    sampler = Sampler(
        node=config.node,
        boot_id=secrets.token_hex(8),
        gpu=gpu,
        memory=memory,
        sensors=sensors,
        leases=IntervalLeases(config.interval_s),
        ring=SampleRing(config.ring_size, encode=encode_sample),
        clocks=clocks,
        on_sample=on_sample,
        on_tick=on_tick,
    )
    return Node(sampler=sampler, sim=sim)
