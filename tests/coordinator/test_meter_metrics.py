"""The coordinator's /metrics shows each wall meter's latest reading only while it is the meter's current
word: not after a failed poll, not once older than the gap limit, never before a first reading. Its failed
polls are always shown (a scraped export breaks the readings where they rose)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest

from sparkwatch.coordinator.api.metrics import coordinator_registry
from sparkwatch.coordinator.loop_lag import LoopLag
from sparkwatch.meters.poller import MeterState
from sparkwatch.meters.spec import MeterSpec

S = 1_000_000_000
NOW = 1_800_000_000 * S


@dataclass
class Poller:
    spec: MeterSpec
    state: MeterState


@dataclass
class Coordinator:
    """What the collector reads of a coordinator, with one metered node."""

    meters: dict[str, Poller]
    loop_lag: LoopLag = field(default_factory=LoopLag)

    def now_ns(self) -> int:
        return NOW

    def states(self) -> list[Any]:
        return []

    def runs(self) -> list[Any]:
        return []

    def agent_name(self, name: str) -> str:
        return f"agent-{name}"


def meter_lines(poller: Poller) -> list[str]:
    text = generate_latest(coordinator_registry(Coordinator({"n1": poller}))).decode()  # type: ignore[arg-type]
    return [line for line in text.splitlines() if line.startswith("sparkwatch_meter_")]


def poller(**state: Any) -> Poller:
    spec = MeterSpec("redfish", "http://bmc.example", interval_s=2.0, domain="chassis")
    return Poller(spec, MeterState(spec.kind, spec.domain, spec.url, spec.interval_s, **state))


LABELS = '{domain="chassis",node="agent-n1",source="meter:redfish"}'
NO_FAILURE = f"sparkwatch_meter_failed_polls_total{LABELS} 0.0"


def test_a_fresh_reading_is_shown_under_the_agents_name() -> None:
    assert meter_lines(poller(last_t_ns=NOW - 5 * S, last_power_w=412.5)) == [
        f"sparkwatch_meter_power_watts{LABELS} 412.5",
        f"sparkwatch_meter_poll_interval_seconds{LABELS} 2.0",
        NO_FAILURE,
    ]


def test_the_meters_own_energy_counter_is_shown_beside_its_power() -> None:
    assert meter_lines(poller(last_t_ns=NOW - 5 * S, last_power_w=412.5, last_energy_j=7.2e6)) == [
        f"sparkwatch_meter_power_watts{LABELS} 412.5",
        f"sparkwatch_meter_energy_joules_total{LABELS} 7.2e+06",
        f"sparkwatch_meter_poll_interval_seconds{LABELS} 2.0",
        NO_FAILURE,
    ]


@pytest.mark.parametrize(
    "state",
    [
        {},  # never read
        {"last_t_ns": NOW - S, "last_power_w": 412.5, "last_energy_j": 1.0, "error": "HTTP 503"},  # failed
        {"last_t_ns": NOW - 7 * S, "last_power_w": 412.5, "last_energy_j": 1.0},  # older than 3 polls of 2 s
        {"last_t_ns": NOW - S, "last_power_w": None},  # the meter answered without a power value
    ],
)
def test_no_reading_is_shown_that_is_not_the_meters_current_word(state: dict[str, Any]) -> None:
    assert meter_lines(poller(**state)) == [NO_FAILURE]


def test_the_meters_failed_polls_are_shown_while_it_fails() -> None:
    lines = meter_lines(poller(last_t_ns=NOW - S, last_power_w=412.5, polls=9, failures=3, error="HTTP 503"))
    assert lines == [f"sparkwatch_meter_failed_polls_total{LABELS} 3.0"]
