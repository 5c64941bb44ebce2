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
#: WebSocket close code when the API token the stream was let in with is no longer the one in force (4000 +
#: HTTP 401): a rotated token also ends what the old one opened. The client connects again with the new one.
CLOSE_TOKEN_ROTATED = 4401

#: How long an interval lease lasts unless renewed; a holder renews well before (the coordinator every 2 min).
LEASE_TTL_S = 600.0
#: The sampling intervals an agent takes (configured or leased), and so the ones a sample may carry.
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0

#: NVML's clock event (throttle) reason bits (nvml.h), by dcgm-exporter's names and two newer ones.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}
