"""Names both ends of the agent's stream agree on: frame types and the interval lease's default lifetime."""

from __future__ import annotations

FRAME_SAMPLE = "sample"
FRAME_HELLO = "hello"
FRAME_GAP = "gap"
FRAME_TIME = "time"  # a clock-probe reply on the stdio stream

#: How long an interval lease lasts unless renewed; a holder renews well before (the coordinator every 2 min).
LEASE_TTL_S = 600.0
