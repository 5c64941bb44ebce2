"""The series a wall meter's readings go by, wherever they leave the coordinator (its /metrics, remote
write) and wherever they are read back (an export from a TSDB): one home for the names."""

METER_POWER = "sparkwatch_meter_power_watts"
METER_ENERGY = "sparkwatch_meter_energy_joules_total"
#: Each remote-written reading's poll interval, against which an export from the engine reads gaps.
METER_INTERVAL = "sparkwatch_meter_interval_seconds"
#: The poll interval on the coordinator's /metrics: not METER_INTERVAL, because a scraped reading is a
#: scrape interval after the one before it, not a poll, and an export reads a meter without METER_INTERVAL
#: against its readings' spacing.
METER_POLL_INTERVAL = "sparkwatch_meter_poll_interval_seconds"
#: The meter's failed polls since the coordinator started, with each reading (remote write) and on its
#: /metrics: an export from the engine breaks the readings where it changed, as SQLite's does at each
#: failed poll (the engine holds no error, and a staleness marker is left out of query answers).
METER_FAILED_POLLS = "sparkwatch_meter_failed_polls_total"
#: The labels besides ``node``: the meter's domain (``wall`` unless set) and its source (``meter:<kind>``).
METER_LABELS = ("domain", "source")
