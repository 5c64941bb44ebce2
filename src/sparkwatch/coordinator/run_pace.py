"""What the runs ask of the links: how often the agents sample, and whether what they send is stored at
once or held a few seconds (links/stream.py ``IDLE_HOLD_S``: a commit per idle second wrote ≈ 49 KiB per
sample). Open runs are stored, so both survive a restart."""

from __future__ import annotations

from collections.abc import Iterable

from sparkwatch.store.db import RunRow

#: After a run ends, samples are still stored at once this long: its end waits for them to be stored.
PROMPT_AFTER_END_NS = 60 * 1_000_000_000


def desired_interval(runs: Iterable[RunRow]) -> float | None:
    """The fastest interval any open run asks for; None when no run is open."""
    return min((r.interval_s for r in runs if r.open), default=None)


def store_promptly(runs: Iterable[RunRow], now_ns: int) -> bool:
    """While a run is open, and for PROMPT_AFTER_END_NS after one ended."""
    since = now_ns - PROMPT_AFTER_END_NS
    return any(r.open or (r.t_end_ns is not None and r.t_end_ns >= since) for r in runs)
