"""The coordinator's own /metrics, rendered from its links' states at scrape time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sparkwatch.core.tracks import GAP_INTERVALS
from sparkwatch.meters.names import (
    METER_ENERGY,
    METER_FAILED_POLLS,
    METER_LABELS,
    METER_POLL_INTERVAL,
    METER_POWER,
)

if TYPE_CHECKING:
    from sparkwatch.coordinator.remote_write.sender import WriterStats
    from sparkwatch.coordinator.service import Coordinator
    from sparkwatch.links.state import LinkState
    from sparkwatch.store.run_rows import RunRow


class CoordinatorCollector(Collector):
    def __init__(self, coordinator: Coordinator) -> None:
        self._coord = coordinator

    def collect(self) -> Iterator[Metric]:
        yield from _link_families(self._coord.states(), self._coord.now_ns())
        yield from _run_families([r for r in self._coord.runs() if r.open])
        yield self._coord.loop_lag.family()
        yield from _meter_families(self._coord)
        writer = getattr(self._coord, "remote_writer", None)  # shapes of a coordinator without one: none
        if writer is not None:
            yield from _remote_write_families(writer.stats)


def _link_families(states: Sequence[LinkState], now: int) -> Iterator[Metric]:
    connected = GaugeMetricFamily(
        "sparkwatch_coordinator_node_connected", "1 while the node's link streams.", labels=["node"]
    )
    last_seq = GaugeMetricFamily(
        "sparkwatch_coordinator_node_last_seq",
        "Last stored seq of the node's boot.",
        labels=["node", "boot_id"],
    )
    lag = GaugeMetricFamily(
        "sparkwatch_coordinator_node_lag_seconds", "Age of the newest stored sample.", labels=["node"]
    )
    ingested = CounterMetricFamily(
        "sparkwatch_coordinator_samples_ingested", "New samples stored.", labels=["node"]
    )
    offset = GaugeMetricFamily(
        "sparkwatch_coordinator_clock_offset_seconds",
        "Agent clock + offset = coordinator clock.",
        labels=["node"],
    )
    uncertainty = GaugeMetricFamily(
        "sparkwatch_coordinator_clock_uncertainty_seconds",
        "Half the smallest probe round trip.",
        labels=["node"],
    )
    reconnects = CounterMetricFamily(
        "sparkwatch_coordinator_link_reconnects", "Link re-dials.", labels=["node"]
    )
    rejected = CounterMetricFamily(
        "sparkwatch_coordinator_frames_rejected",
        "Agent frames skipped, by reason (too_long, not_json, invalid, before_hello, foreign_boot,"
        " seq_not_forward).",
        labels=["node", "reason"],
    )
    for s in states:
        connected.add_metric([s.node], 1.0 if s.connected else 0.0)
        if s.boot_id is not None:
            last_seq.add_metric([s.node, s.boot_id], float(s.last_seq))
        node_lag = s.lag_s(now)
        if node_lag is not None:
            lag.add_metric([s.node], node_lag)
        ingested.add_metric([s.node], float(s.samples_ingested))
        reconnects.add_metric([s.node], float(s.reconnects))
        for reason, count in sorted(s.frames_rejected.items()):
            rejected.add_metric([s.node, reason], float(count))
        if s.offset is not None:
            offset.add_metric([s.node], s.offset.offset_ns / 1e9)
            uncertainty.add_metric([s.node], s.offset.uncertainty_ns / 1e9)
    yield from (connected, last_seq, lag, ingested, offset, uncertainty, reconnects, rejected)


def _run_families(active: Sequence[RunRow]) -> Iterator[Metric]:
    """Open runs by id alone: /metrics is served without a token, and a run's name is made from a command
    line, so it never becomes a label (GET /v1/runs/{id}, behind the token, tells the name)."""
    open_runs = GaugeMetricFamily("sparkwatch_coordinator_open_runs", "Runs opened and not yet ended.")
    run_active = GaugeMetricFamily(
        "sparkwatch_coordinator_run_active",
        "1 while the run is open (for dashboard annotations); absent once it ended.",
        labels=["run_id"],
    )
    run_start = GaugeMetricFamily(
        "sparkwatch_coordinator_run_start_timestamp_seconds",
        "Start of an open run, Unix time on the coordinator's clock.",
        labels=["run_id"],
    )
    open_runs.add_metric([], float(len(active)))
    for r in active:
        run_active.add_metric([r.id], 1.0)
        run_start.add_metric([r.id], r.t_start_ns / 1e9)
    yield from (open_runs, run_active, run_start)


def _meter_families(coord: Coordinator) -> Iterator[Metric]:
    """Each node's wall meter's latest reading, with the name and labels remote write sends its readings by
    (coordinator/remote_write/meters.py), while it is the meter's current word: none after a failed poll
    or once older than the gap limit (GAP_INTERVALS polls), so a scrape never carries a value across a
    meter's silence. The poll interval has its own name here (meters/names.py)."""
    labels = ["node", *METER_LABELS]
    power = GaugeMetricFamily(
        METER_POWER,
        "The node's wall meter's latest reading, W (absent while it does not answer).",
        labels=labels,
    )
    energy = CounterMetricFamily(
        METER_ENERGY,
        "The node's wall meter's own energy counter at its latest reading, J (for increase(); exports"
        " integrate the power readings).",
        labels=labels,
    )
    interval = GaugeMetricFamily(
        METER_POLL_INTERVAL, "How often the coordinator polls the meter, s.", labels=labels
    )
    failed = CounterMetricFamily(
        METER_FAILED_POLLS,
        "The meter's failed polls since the coordinator started (an export breaks its readings there).",
        labels=labels,
    )
    now = coord.now_ns()
    for name, poller in coord.meters.items():
        state, spec = poller.state, poller.spec
        fresh = state.last_t_ns is not None and now - state.last_t_ns <= GAP_INTERVALS * spec.interval_s * 1e9
        failed.add_metric([coord.agent_name(name), spec.domain, spec.source], state.failures)
        if state.error is None and state.last_power_w is not None and fresh:
            values = [coord.agent_name(name), spec.domain, spec.source]
            power.add_metric(values, state.last_power_w)
            interval.add_metric(values, spec.interval_s)
            if state.last_energy_j is not None:
                energy.add_metric(values, state.last_energy_j)
    yield from (power, energy, interval, failed)


#: Every outcome a stored sample can have in the remote writer (each shown from the start, at 0).
REMOTE_WRITE_OUTCOMES = (
    "sent",
    "dropped_queue_full",
    "dropped_rejected",
    "dropped_unreadable",
    "dropped_stopped",
)


def _remote_write_families(stats: WriterStats) -> Iterator[Metric]:
    """Counted in stored samples (an agent's sample or a meter's reading, whatever its number of series)."""
    samples = CounterMetricFamily(
        "sparkwatch_coordinator_remote_write_samples",
        "Stored samples by what became of them in remote write: sent (2xx), dropped_queue_full (the"
        " queue was full), dropped_rejected (a 4xx other than 429, not retried), dropped_unreadable,"
        " dropped_stopped.",
        labels=["outcome"],
    )
    counts = {"sent": stats.sent, **{f"dropped_{k}": v for k, v in stats.dropped.items()}}
    for outcome in REMOTE_WRITE_OUTCOMES:
        samples.add_metric([outcome], float(counts.get(outcome, 0)))
    pending = GaugeMetricFamily(
        "sparkwatch_coordinator_remote_write_pending_samples",
        "Stored samples waiting to be sent (queued or in the request being sent).",
    )
    pending.add_metric([], float(stats.pending))
    capacity = GaugeMetricFamily(
        "sparkwatch_coordinator_remote_write_capacity_samples",
        "Stored samples the queue holds at most; beyond it new ones are dropped (dropped_queue_full).",
    )
    capacity.add_metric([], float(stats.capacity))
    retries = CounterMetricFamily(
        "sparkwatch_coordinator_remote_write_retries",
        "Remote-write requests that failed (5xx, 429, connection error, timeout) and were tried again.",
    )
    retries.add_metric([], float(stats.retries))
    yield from (samples, pending, capacity, retries)


def coordinator_registry(coordinator: Coordinator) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CoordinatorCollector(coordinator))
    return registry
