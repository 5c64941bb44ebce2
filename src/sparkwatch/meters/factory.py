"""The reader for a meter's kind."""

from __future__ import annotations

from sparkwatch.meters.poller import MeterReader
from sparkwatch.meters.prometheus import PrometheusMeter
from sparkwatch.meters.redfish import RedfishMeter
from sparkwatch.meters.shelly import ShellyMeter
from sparkwatch.meters.spec import MeterSpec


def make_reader(spec: MeterSpec) -> MeterReader:
    if spec.kind == "redfish":
        return RedfishMeter(spec)
    if spec.kind == "shelly":
        return ShellyMeter(spec)
    return PrometheusMeter(spec)
