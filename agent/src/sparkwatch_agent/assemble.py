"""One agent from a config: the GPU backend (NVML or the simulated GB10), memory reader, hwmon sensors,
ring and leases wired into a sampler. The top of the agent's house: the CLI builds its parts here and
hands them to a serving mode; the sparkwatch demo runs simulated agents through :func:`running_agent`."""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sparkwatch_agent.config import AgentConfig
from sparkwatch_agent.hardware.gpu_backend import GpuBackend
from sparkwatch_agent.hardware.hwmon import HwmonSensors
from sparkwatch_agent.hardware.meminfo import MeminfoReader
from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
from sparkwatch_agent.hardware.sim import SimGb10, SimMeminfoReader, SimNvml, SimSpbm
from sparkwatch_agent.sampling.clocks import Clocks
from sparkwatch_agent.sampling.leases import IntervalLeases
from sparkwatch_agent.sampling.readers import MemoryReader, SensorReader
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sample import Sample, encode_sample
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.serving.serve import serve_http

__all__ = ["AgentParts", "SimGb10", "assemble", "running_agent"]


@dataclass(frozen=True, slots=True)
class AgentParts:
    sampler: Sampler
    sim: SimGb10 | None  # the simulated GB10 behind a sim backend, which /v1/sim/load drives


def assemble(
    config: AgentConfig,
    clocks: Clocks | None = None,
    on_sample: Callable[[Sample], None] | None = None,
) -> AgentParts:
    """The parts, built and not started: nothing is opened until the sampler's first capture."""
    clocks = clocks or Clocks(wall_ns=time.time_ns, mono_ns=time.monotonic_ns)
    sim: SimGb10 | None = None
    memory: MemoryReader
    sensors: SensorReader | None
    gpu: GpuBackend
    if config.backend == "sim":
        sim = SimGb10(config.node, clocks.mono_ns)
        gpu = NvmlBackend(lib=SimNvml(sim), name="sim", simulated=True)
        memory = SimMeminfoReader(sim)
        sensors = SimSpbm(sim) if config.sim_sensors else None
    else:
        gpu = NvmlBackend()
        memory = MeminfoReader(config.meminfo_path)
        sensors = HwmonSensors(config.hwmon_root)  # none found yet: a driver loaded later is found then
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
    )
    return AgentParts(sampler=sampler, sim=sim)


@asynccontextmanager
async def running_agent(
    parts: AgentParts, host: str = "127.0.0.1", port: int = 0, token: str | None = None
) -> AsyncIterator[str]:
    """The agent's HTTP API on host:port (0: a free port) with its sampler running, until the block ends;
    yields the ``http://`` URL."""
    async with serve_http(parts.sampler, parts.sim, host, port, token) as url:
        yield url
