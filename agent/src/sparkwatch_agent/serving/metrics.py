"""/metrics: a custom Collector on a private registry that renders the latest snapshot.

A scrape never touches hardware. Unknown values are absent series (never 0, never NaN); GPU series vanish
while the GPU is lost rather than repeating a stale value, and every hardware value vanishes while the
sampler is stuck (its last sample older than the health limit), ``gpu_up`` too: a blocked read had the
scrapes serve the values from before it as fresh, for as long as it blocked. The agent's own series stay (its
``last_sample_timestamp_seconds`` says since when), and the stall and the recovery are logged once each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sparkwatch_agent import __version__
from sparkwatch_agent.hardware.readings import GPU_FIELDS, GpuReading
from sparkwatch_agent.sampling.snapshot import Snapshot, is_stale, sample_age_s
from sparkwatch_agent.shared.protocol import CLOCK_EVENT_REASONS

log = logging.getLogger(__name__)

GPU_LABELS = ["node", "gpu", "uuid"]

#: (metric name, help, GpuReading attribute, is counter)
_GPU_VALUES: tuple[tuple[str, str, str, bool], ...] = (
    (
        "sparkwatch_gpu_power_watts",
        "GPU power draw as NVML reports it (GPU rail on GB10; ~1 s average).",
        "power_w",
        False,
    ),
    (
        "sparkwatch_gpu_power_instant_watts",
        "Instantaneous GPU power (NVML_FI_DEV_POWER_INSTANT).",
        "power_instant_w",
        False,
    ),
    ("sparkwatch_gpu_energy_joules", "GPU energy counter since driver load.", "energy_j", True),
    (
        "sparkwatch_gpu_utilization_ratio",
        "Fraction of time a kernel was running (NVML utilization.gpu).",
        "util_ratio",
        False,
    ),
    (
        "sparkwatch_gpu_memory_utilization_ratio",
        "Fraction of time device memory was read or written.",
        "mem_util_ratio",
        False,
    ),
    (
        "sparkwatch_gpu_memory_used_bytes",
        "Device memory used (discrete GPUs; absent on unified memory).",
        "mem_used_bytes",
        False,
    ),
    (
        "sparkwatch_gpu_memory_total_bytes",
        "Device memory total (discrete GPUs; absent on unified memory).",
        "mem_total_bytes",
        False,
    ),
    ("sparkwatch_gpu_power_limit_watts", "Enforced power limit.", "power_limit_w", False),
    ("sparkwatch_gpu_temperature_celsius", "GPU temperature.", "temperature_c", False),
    ("sparkwatch_gpu_sm_clock_hertz", "SM clock.", "sm_clock_hz", False),
    (
        "sparkwatch_gpu_process_memory_bytes",
        "Sum of usedGpuMemory over running compute processes (absent where NVML knows not every one's).",
        "process_mem_bytes",
        False,
    ),
)

_HOST_VALUES: tuple[tuple[str, str, str], ...] = (
    ("sparkwatch_memory_total_bytes", "MemTotal from /proc/meminfo.", "total_bytes"),
    ("sparkwatch_memory_available_bytes", "MemAvailable from /proc/meminfo.", "available_bytes"),
    (
        "sparkwatch_memory_used_bytes",
        "MemTotal - MemAvailable (on unified memory this includes the GPU's).",
        "used_bytes",
    ),
    ("sparkwatch_memory_free_bytes", "MemFree from /proc/meminfo.", "free_bytes"),
    ("sparkwatch_memory_page_cache_bytes", "Cached + SReclaimable from /proc/meminfo.", "page_cache_bytes"),
    ("sparkwatch_memory_swap_used_bytes", "SwapTotal - SwapFree from /proc/meminfo.", "swap_used_bytes"),
)


class SnapshotCollector(Collector):
    """Yields metric families from whatever snapshot ``get_snapshot`` returns at scrape time."""

    def __init__(
        self, get_snapshot: Callable[[], Snapshot], mono_ns: Callable[[], int] = time.monotonic_ns
    ) -> None:
        self._get = get_snapshot
        self._mono_ns = mono_ns
        self._stuck = False  # said once per stall

    def collect(self) -> Iterator[Metric]:
        snap = self._get()
        node = snap.node
        fresh = self._fresh(snap)
        if fresh:
            yield from self._gpu_metrics(snap)
            yield self._clock_event_metrics(snap)
            yield from self._host_metrics(snap)
            yield from self._sensor_metrics(snap)
        yield from self._agent_metrics(snap, node, fresh)

    def _fresh(self, snap: Snapshot) -> bool:
        age_s = sample_age_s(snap, self._mono_ns())
        stuck = is_stale(snap, age_s)
        if stuck and not self._stuck:
            log.warning(
                "no sample for %.1f s (every %g s): a hardware read blocks; /metrics serves no hardware value"
                " until one comes",
                *(age_s, snap.interval_s),
            )
        elif self._stuck and not stuck:
            log.warning("sampling again after a stall: /metrics serves hardware values again")
        self._stuck = stuck
        return not stuck

    @staticmethod
    def _clock_event_metrics(snap: Snapshot) -> Metric:
        """1 per reason NVML gives now for holding the clocks down, 0 per reason it does not, for the reasons
        the GPU says it can report (all named ones when it does not say); no series while unknown."""
        family = GaugeMetricFamily(
            "sparkwatch_gpu_clock_event_active",
            "1 while NVML reports this clock event (throttle) reason for the GPU, else 0.",
            labels=[*GPU_LABELS, "reason"],
        )
        sample = snap.sample
        inventory = snap.inventory if snap.gpu_ok else None
        supported = {g.uuid: g.clock_events_supported for g in (inventory.gpus if inventory else ())}
        for r in sample.gpus if sample is not None and snap.gpu_ok else ():
            if r.clock_event_reasons is None:
                continue
            mask = supported.get(r.uuid)
            for bit, reason in CLOCK_EVENT_REASONS.items():
                if mask is None or mask & bit or r.clock_event_reasons & bit:  # what the GPU can report
                    active = 1.0 if r.clock_event_reasons & bit else 0.0
                    family.add_metric([snap.node, str(r.gpu_index), r.uuid, reason], active)
        return family

    @staticmethod
    def _gpu_metrics(snap: Snapshot) -> Iterator[Metric]:
        sample = snap.sample
        inventory = snap.inventory if snap.gpu_ok else None
        readings: tuple[GpuReading, ...] = sample.gpus if sample is not None and snap.gpu_ok else ()
        for name, doc, attr, counter in _GPU_VALUES:
            family: GaugeMetricFamily | CounterMetricFamily
            if counter:
                family = CounterMetricFamily(name, doc, labels=GPU_LABELS)
            else:
                family = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for r in readings:
                value = getattr(r, attr)
                if value is not None:
                    family.add_metric([snap.node, str(r.gpu_index), r.uuid], float(value))
            yield family
        info = GaugeMetricFamily(
            "sparkwatch_gpu_info",
            "GPU identity (always 1).",
            labels=[*GPU_LABELS, "name", "driver_version", "cuda_driver_version", "memory_model"],
        )
        supported = GaugeMetricFamily(
            "sparkwatch_field_supported",
            "1 when the field is polled; 0 when NVML refused it at probe time or its value is known bogus.",
            labels=["node", "gpu", "field"],
        )
        top = GaugeMetricFamily(
            "sparkwatch_gpu_sm_clock_max_hertz",
            "The GPU's maximum SM clock (NVML max clock info): what the SM clock is a share of.",
            labels=GPU_LABELS,
        )
        if inventory is not None:
            for gpu in inventory.gpus:
                if gpu.max_sm_clock_hz:
                    top.add_metric([snap.node, str(gpu.index), gpu.uuid], float(gpu.max_sm_clock_hz))
                info.add_metric(
                    [
                        snap.node,
                        str(gpu.index),
                        gpu.uuid,
                        gpu.name,
                        inventory.driver_version or "",
                        inventory.cuda_driver_version or "",
                        snap.memory_model,
                    ],
                    1.0,
                )
                for field in GPU_FIELDS:
                    status = gpu.capabilities[field]
                    supported.add_metric([snap.node, str(gpu.index), field], 1.0 if status.polled else 0.0)
        yield info
        yield supported
        yield top

    @staticmethod
    def _host_metrics(snap: Snapshot) -> Iterator[Metric]:
        memory = snap.sample.memory if snap.sample is not None else None
        for name, doc, attr in _HOST_VALUES:
            family = GaugeMetricFamily(name, doc, labels=["node"])
            value = getattr(memory, attr) if memory is not None else None
            if value is not None:
                family.add_metric([snap.node], float(value))
            yield family

    @staticmethod
    def _sensor_metrics(snap: Snapshot) -> Iterator[Metric]:
        power = GaugeMetricFamily(
            "sparkwatch_sensor_power_watts",
            "hwmon power channel; kind says what it measures (system, module, gpu, cpu, other), source where"
            " it was read (hwmon:<chip>).",
            labels=["node", "sensor", "kind", "source"],
        )
        energy = CounterMetricFamily(
            "sparkwatch_sensor_energy_joules",
            "hwmon energy accumulated since agent start, wrap-around handled.",
            labels=["node", "sensor", "kind", "source"],
        )
        for s in snap.sample.sensors if snap.sample is not None else ():
            if s.power_w is not None:
                power.add_metric([snap.node, s.sensor, s.kind, s.source], s.power_w)
            if s.energy_j is not None:
                energy.add_metric([snap.node, s.sensor, s.kind, s.source], s.energy_j)
        yield power
        yield energy
        status = GaugeMetricFamily(
            "sparkwatch_sensor_status",
            "A power controller's status value as its driver gives it (spbm: prochot, pl_level).",
            labels=["node", "status", "source"],
        )
        for x in snap.sample.status if snap.sample is not None else ():
            if x.value is not None:
                status.add_metric([snap.node, x.name, x.source], float(x.value))
        yield status

    @staticmethod
    def _agent_metrics(snap: Snapshot, node: str, fresh: bool) -> Iterator[Metric]:
        """The agent's own series."""
        c = snap.counters
        info = GaugeMetricFamily(
            "sparkwatch_agent_info",
            "Agent identity (always 1).",
            labels=["node", "version", "boot_id", "backend"],
        )
        info.add_metric([node, __version__, snap.boot_id, snap.backend], 1.0)
        yield info
        yield _gpu_up(snap, node, fresh)
        samples = CounterMetricFamily("sparkwatch_agent_samples", "Samples taken.", labels=["node"])
        samples.add_metric([node], float(c.samples_total))
        yield samples
        errors = CounterMetricFamily(
            "sparkwatch_agent_read_errors",
            "Reads of probed-supported fields that failed, by field and NVML reason.",
            labels=["node", "field", "reason"],
        )
        for (field, reason), count in sorted(c.read_errors.items()):
            errors.add_metric([node, field, reason], float(count))
        yield errors
        dropped = CounterMetricFamily(
            "sparkwatch_agent_dropped_samples",
            "Samples dropped from the ring to make room (its oldest block first), whether read or not.",
            labels=["node"],
        )
        dropped.add_metric([node], float(snap.dropped_total))
        yield dropped
        late = CounterMetricFamily(
            "sparkwatch_agent_late_ticks", "Deadlines skipped because a tick overran.", labels=["node"]
        )
        late.add_metric([node], float(c.late_ticks_total))
        yield late
        reinit = CounterMetricFamily(
            "sparkwatch_agent_gpu_reinit", "Attempts to re-initialise the GPU backend.", labels=["node"]
        )
        reinit.add_metric([node], float(c.gpu_reinit_total))
        yield reinit
        interval = GaugeMetricFamily(
            "sparkwatch_agent_interval_seconds", "Current sampling interval.", labels=["node"]
        )
        interval.add_metric([node], snap.interval_s)
        yield interval
        duration = GaugeMetricFamily(
            "sparkwatch_agent_sample_duration_seconds", "Time the last sample took to read.", labels=["node"]
        )
        last = GaugeMetricFamily(
            "sparkwatch_agent_last_sample_timestamp_seconds", "Wall time of the last sample.", labels=["node"]
        )
        if snap.sample is not None:
            duration.add_metric([node], snap.sample.read_duration_s)
            last.add_metric([node], snap.sample.t_wall_ns / 1e9)
        yield duration
        yield last


def make_registry(
    get_snapshot: Callable[[], Snapshot], mono_ns: Callable[[], int] = time.monotonic_ns
) -> CollectorRegistry:
    """A private registry holding only our collector (no default process/platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(get_snapshot, mono_ns))
    return registry


def _gpu_up(snap: Snapshot, node: str, fresh: bool) -> Metric:
    """``gpu_up`` only while sampling: a stuck read may be the GPU's, its last answer is not the present's,
    and a 1 kept every alert quiet."""
    up = GaugeMetricFamily(
        "sparkwatch_agent_gpu_up",
        "1 while the GPU backend answers (absent while sampling stalls).",
        labels=["node"],
    )
    if fresh:
        up.add_metric([node], 1.0 if snap.gpu_ok else 0.0)
    return up
