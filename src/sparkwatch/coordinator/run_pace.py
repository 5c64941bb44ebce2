"""What the runs ask of the links: how often the agents sample, and whether what they send is stored at
once or held a few seconds (links/stream.py ``IDLE_HOLD_S``: a commit per idle second wrote ≈ 49 KiB per
sample). Open runs are stored, so both survive a restart."""

from __future__ import annotations

from collections.abc import Iterable

from sparkwatch.store.run_rows import RunRow

#: After a run ends, samples are still stored at once this long: its end waits for them to be stored.
PROMPT_AFTER_END_NS = 60 * 1_000_000_000
FOREVER_NS = 2**63 - 1


def desired_interval(runs: Iterable[RunRow]) -> float | None:
    """The fastest interval any open run asks for; None when no run is open."""
    return min((r.interval_s for r in runs if r.open), default=None)


def prompt_until_ns(runs: Iterable[RunRow]) -> int:
    """Until when samples are stored at once: for ever while a run is open, else PROMPT_AFTER_END_NS after
    the last run ended (0: no run ever ended). Worked out when runs open or end, not per message: the runs
    table is read whole."""
    until = 0
    for run in runs:
        if run.t_end_ns is None:
            return FOREVER_NS
        until = max(until, run.t_end_ns + PROMPT_AFTER_END_NS)
    return until
