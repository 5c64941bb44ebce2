"""Which series in a TSDB carry the core's inputs, one table per exporter family: data, not code branches.

Every name, unit and label below was read in the exporter's own source or documentation (named per table);
a scale turns the exporter's unit into the core's base unit (W, J, ratio 0-1, bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from sparkwatch.meters.names import METER_FAILED_POLLS, METER_INTERVAL, METER_LABELS, METER_POWER
from sparkwatch_agent.shared.protocol import CLOCK_EVENT_REASONS

MIB = 1024 * 1024
MHZ = 1e6


@dataclass(frozen=True, slots=True)
class Series:
    metric: str  # the name as the TSDB stores it
    scale: float = 1.0  # value × scale = the core's base unit


@dataclass(frozen=True, slots=True)
class ReasonFlags:
    """Clock event reasons as one 0/1 series per reason: the metric, the label naming the reason, and each
    name's bit (NVML's ``nvmlClocksEventReasons``)."""

    metric: str
    label: str
    bits: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Signals:
    """What marks a window throttled (core.throttle): the SM clock (Hz), the temperature (°C), the clock
    event reasons (a bitmask series, the first of ``reason_masks`` found, else ``reason_flags``), and the
    GPU's maximum SM clock (Hz), without which there is no clock ratio."""

    sm_clock: Series
    temperature: Series | None
    reason_masks: tuple[Series, ...] = ()
    reason_flags: ReasonFlags | None = None
    max_sm_clock: Series | None = None


@dataclass(frozen=True, slots=True)
class Family:
    """One exporter's series for the core: per GPU power, an energy counter, utilisation, memory."""

    name: str
    gpu_label: str  # the label that tells a node's GPUs apart (a UUID where the exporter has one)
    power: Series  # GPU power, W
    energy: Series | None  # GPU energy counter, J (a window's edges are read from it)
    util: tuple[Series, ...]  # utilisation 0-1 for the gate: per GPU, the first the TSDB holds of it
    gpu_memory: Series | None  # device memory used per GPU, bytes (discrete GPUs)
    host_memory: Series | None  # the node's memory used (MemTotal − MemAvailable), bytes
    info: Series | None  # a constant-1 identity series whose labels name the GPU
    name_label: str  # the label of ``info`` (or of the GPU series) with the GPU's model name
    read_in: str  # where these names were checked
    #: Power channels beside the GPU (the agent's hwmon domains: sys_total, dc_input, …), W and J; a
    #: channel's name, kind and source are read from these labels (a missing label reads as "").
    sensor_power: Series | None = None
    sensor_energy: Series | None = None
    sensor_labels: tuple[str, str, str] = ("sensor", "kind", "source")
    #: The coordinator's wall-meter readings (remote-written), W, and the poll interval of each (s); one
    #: system domain per ``domain`` label.
    meter_power: Series | None = None
    meter_interval: Series | None = None
    meter_failed_polls: Series | None = None
    meter_labels: tuple[str, str] = METER_LABELS
    signals: Signals | None = None
    #: The node's page cache (Cached + SReclaimable), bytes, scraped with ``host_memory``: these summed.
    host_page_cache: tuple[Series, ...] = ()
    #: The interval the node's agent says each sample was taken at (s): gaps judged as the store judges them.
    sample_interval: Series | None = None
    #: The exporter's own label naming the machine (None: it has none; the scrape's ``instance`` does), and
    #: the one with a GPU's index on it: how a nodes label that is not a node's is told (node_label.py).
    host_label: str | None = None
    index_label: str | None = None

    def host_memory_name(self) -> str:
        """How a node's memory reads when it is the family's own host series."""
        return self.host_memory.metric if self.host_memory else ""

    def gpu_memory_name(self) -> str:
        """How a node's memory reads when it is its GPUs' device memory summed."""
        return f"sum of {self.gpu_memory.metric}" if self.gpu_memory else "none"


#: sparkwatch's own agent (agent/src/sparkwatch_agent/serving/metrics.py: GPU_LABELS node, gpu, uuid; the
#: energy families are CounterMetricFamily, so prometheus_client exposes them with ``_total``; its power
#: channels are labelled node, sensor, kind, source).
SPARKWATCH = Family(
    name="sparkwatch",
    gpu_label="uuid",
    power=Series("sparkwatch_gpu_power_watts"),
    energy=Series("sparkwatch_gpu_energy_joules_total"),
    util=(Series("sparkwatch_gpu_utilization_ratio"),),
    gpu_memory=Series("sparkwatch_gpu_memory_used_bytes"),
    host_memory=Series("sparkwatch_memory_used_bytes"),
    host_page_cache=(Series("sparkwatch_memory_page_cache_bytes"),),
    sample_interval=Series("sparkwatch_agent_interval_seconds"),
    info=Series("sparkwatch_gpu_info"),
    name_label="name",
    host_label="node",
    index_label="gpu",
    read_in="agent/src/sparkwatch_agent/serving/metrics.py",
    sensor_power=Series("sparkwatch_sensor_power_watts"),
    sensor_energy=Series("sparkwatch_sensor_energy_joules_total"),
    meter_power=Series(METER_POWER),  # the coordinator's series (meters/names.py)
    meter_interval=Series(METER_INTERVAL),
    meter_failed_polls=Series(METER_FAILED_POLLS),
    signals=Signals(
        sm_clock=Series("sparkwatch_gpu_sm_clock_hertz"),
        temperature=Series("sparkwatch_gpu_temperature_celsius"),
        reason_flags=ReasonFlags(
            "sparkwatch_gpu_clock_event_active",
            "reason",
            MappingProxyType({name: bit for bit, name in CLOCK_EVENT_REASONS.items()}),
        ),
        max_sm_clock=Series("sparkwatch_gpu_sm_clock_max_hertz"),
    ),
)

#: NVIDIA dcgm-exporter (etc/default-counters.csv: POWER_USAGE gauge "Power draw (in W)",
#: TOTAL_ENERGY_CONSUMPTION counter "(in mJ)", GPU_UTIL gauge "(in %)", FB_USED gauge "(in MiB)"; labels gpu,
#: UUID, device, modelName, Hostname as in NVIDIA's GPU telemetry guide). DCGM_FI_PROF_SM_ACTIVE (a 0-1
#: ratio, in dcp-metrics-included.csv) gates only where GPU_UTIL is not collected. Clock signals: SM_CLOCK
#: (MHz) and GPU_TEMP (C) are default counters; dcgm_fields.h's CLOCKS_EVENT_REASONS (a bitmask of
#: DCGM_CLOCKS_EVENT_REASON_*, NVML's bits; CLOCK_THROTTLE_REASONS its deprecated name) and MAX_SM_CLOCK
#: (MHz) are read where a site collects them.
DCGM = Family(
    name="dcgm",
    gpu_label="UUID",
    power=Series("DCGM_FI_DEV_POWER_USAGE"),
    energy=Series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),
    util=(Series("DCGM_FI_DEV_GPU_UTIL", 0.01), Series("DCGM_FI_PROF_SM_ACTIVE")),
    gpu_memory=Series("DCGM_FI_DEV_FB_USED", MIB),
    host_memory=None,
    info=None,
    name_label="modelName",
    host_label="Hostname",
    index_label="gpu",
    read_in="NVIDIA/dcgm-exporter etc/default-counters.csv; docs.nvidia.com gpu-telemetry dcgm-exporter",
    signals=Signals(
        sm_clock=Series("DCGM_FI_DEV_SM_CLOCK", MHZ),
        temperature=Series("DCGM_FI_DEV_GPU_TEMP"),
        reason_masks=(
            Series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),
            Series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
        ),
        max_sm_clock=Series("DCGM_FI_DEV_MAX_SM_CLOCK", MHZ),
    ),
)

#: utkuozdemir/nvidia_gpu_exporter (docs/METRICS.md: power.draw [W] → nvidia_smi_power_draw_watts,
#: utilization.gpu [%] → nvidia_smi_utilization_gpu_ratio as 0-1, memory.used [MiB] →
#: nvidia_smi_memory_used_bytes in bytes, nvidia_smi_energy_joules_total only from its NVML backend; every
#: per-GPU series labelled uuid, identity on nvidia_smi_gpu_info{uuid, name, driver_version, …}; clock
#: signals as its recorded pages in internal/integration/testdata show them: clocks.current.sm [MHz] →
#: nvidia_smi_clocks_current_sm_clock_hz in Hz, clocks.max.sm → nvidia_smi_clocks_max_sm_clock_hz,
#: temperature.gpu → nvidia_smi_temperature_gpu, clocks_event_reasons.active (nvidia-smi's bitmask, NVML's
#: bits; clocks_throttle_reasons.active before the rename) → nvidia_smi_clocks_event_reasons_active).
NVIDIA_GPU_EXPORTER = Family(
    name="nvidia_gpu_exporter",
    gpu_label="uuid",
    power=Series("nvidia_smi_power_draw_watts"),
    energy=Series("nvidia_smi_energy_joules_total"),
    util=(Series("nvidia_smi_utilization_gpu_ratio"),),
    gpu_memory=Series("nvidia_smi_memory_used_bytes"),
    host_memory=None,
    info=Series("nvidia_smi_gpu_info"),
    name_label="name",
    read_in="utkuozdemir/nvidia_gpu_exporter docs/METRICS.md, internal/integration/testdata",
    signals=Signals(
        sm_clock=Series("nvidia_smi_clocks_current_sm_clock_hz"),
        temperature=Series("nvidia_smi_temperature_gpu"),
        reason_masks=(
            Series("nvidia_smi_clocks_event_reasons_active"),
            Series("nvidia_smi_clocks_throttle_reasons_active"),
        ),
        max_sm_clock=Series("nvidia_smi_clocks_max_sm_clock_hz"),
    ),
)

#: prometheus/node_exporter's meminfo collector (/proc/meminfo fields in bytes as
#: ``node_memory_<Field>_bytes``, collector/meminfo.go): used memory as the agent computes it,
#: MemTotal − MemAvailable (on unified memory, the GPU's too), and the page cache as the agent reads it,
#: Cached + SReclaimable.
NODE_MEM_TOTAL = Series("node_memory_MemTotal_bytes")
NODE_MEM_AVAILABLE = Series("node_memory_MemAvailable_bytes")
NODE_MEM_USED = f"{NODE_MEM_TOTAL.metric} - {NODE_MEM_AVAILABLE.metric}"  # what memory_series names
NODE_PAGE_CACHE = (Series("node_memory_Cached_bytes"), Series("node_memory_SReclaimable_bytes"))

FAMILIES = MappingProxyType({f.name: f for f in (SPARKWATCH, DCGM, NVIDIA_GPU_EXPORTER)})
