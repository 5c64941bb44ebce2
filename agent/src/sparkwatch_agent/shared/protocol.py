"""Names both ends of the agent's stream agree on: frame types, close codes and the interval lease's default
lifetime."""

from __future__ import annotations

FRAME_SAMPLE = "sample"
FRAME_HELLO = "hello"
FRAME_GAP = "gap"
FRAME_TIME = "time"  # a clock-probe reply on the stdio stream
FRAME_ERROR = "error"  # the agent refuses the stream: ``error`` (a code) and ``reason``; the stream ends

#: WebSocket close code after an ``error`` frame for ``?after=`` beyond the newest seq (4000 + HTTP 416,
#: "range not satisfiable"); the close reason repeats the frame's reason, cut to the 123 bytes allowed.
CLOSE_AFTER_BEYOND_NEWEST = 4416

#: How long an interval lease lasts unless renewed; a holder renews well before (the coordinator every 2 min).
LEASE_TTL_S = 600.0
#: The sampling intervals an agent takes (configured or leased), and so the ones a sample may carry.
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0
