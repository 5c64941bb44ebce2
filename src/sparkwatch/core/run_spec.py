"""What an export is computed from: the run's method (with its defaults) and each node's tracks and facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkwatch.core.clock import NodeClock
from sparkwatch.core.domains import DomainInput
from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import GpuTrack, MemTrack
from sparkwatch.defaults import DEFAULT_GATE_THRESHOLD, DEFAULT_PHASES, DEFAULT_SCOPE, ScopeKind


@dataclass(frozen=True, slots=True)
class RunSpec:
    id: str
    name: str
    t_start_ns: int
    t_end_ns: int
    interval_s: float
    gate_threshold: float = DEFAULT_GATE_THRESHOLD
    scope: ScopeKind = DEFAULT_SCOPE
    phases: frozenset[str] = frozenset(DEFAULT_PHASES)  # the window phases measured
    command: dict[str, Any] | None = None  # the wrapped benchmark command and its exit code, when known
    ended: bool = True  # False: still open when exported (``t_end_ns`` is then the export's time)


@dataclass(frozen=True, slots=True)
class NodeInput:
    node: str
    gpus: Sequence[GpuTrack]
    gpu_uuids: Sequence[str]
    memory: MemTrack
    clock: NodeClock
    memory_model: str = "unknown"
    hardware: dict[str, Any] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    domains: Sequence[DomainInput] = ()  # power domains beside the GPU rail (hwmon channels, meters)
    signals: Sequence[SignalTrack] = ()  # per GPU: SM clock, temperature, clock event reasons
