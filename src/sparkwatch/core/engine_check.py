"""The engine's generated tokens against the windows' completion tokens: a check whose verdict respects
what a counter scraped every few seconds can tell — from its scrapes inside the scope (a lower bound) to
those around it (an upper bound) — rather than a point interpolated across edges where nothing may have
been generated (a steady run gave −4.7 % that way over 10 s at 1 s scrapes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sparkwatch.core.rounding import rounded
from sparkwatch.core.tracks import F64, I64

#: How far (as a ratio) the windows' token count may lie outside the engine's range before a run note.
TOKEN_AGREEMENT_RATIO = 0.02


def generated_range(t_ns: I64, counter: F64 | None, starts: I64, ends: I64) -> tuple[float, float] | None:
    """What the engine's generation counter allows inside the pieces: from the scrapes inside each piece
    (a lower bound: some of the piece lies outside them) to the scrapes around it (an upper bound); None
    when a piece has no scrape after it or before it, or the counter went down around it."""
    if counter is None:
        return None
    known = np.isfinite(counter)
    t, v = t_ns[known], counter[known]
    low = high = 0.0
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        before, after = np.searchsorted(t, a, "right") - 1, np.searchsorted(t, b, "left")
        if before < 0 or after >= len(t) or np.any(np.diff(v[before : after + 1]) < 0):
            return None
        first, last = np.searchsorted(t, a, "left"), np.searchsorted(t, b, "right") - 1
        low += float(v[last] - v[first]) if last > first else 0.0
        high += float(v[after] - v[before])
    return low, high


def token_check(
    engine_tokens: float | None, bounds: tuple[float, float] | None, window_tokens: int | None, scope: str
) -> tuple[dict[str, Any], str | None]:
    """The check's record, and a run note when the windows' count lies outside the engine's range by more
    than ``TOKEN_AGREEMENT_RATIO`` (another client on the engine, windows that lost their usage, or a
    scope that misses part of the generation). The ``run`` scope also holds warm-up and other unmeasured
    requests' tokens: no verdict there."""
    check: dict[str, Any] = {
        "engine_generation_tokens": rounded(engine_tokens, 1),
        "engine_generation_tokens_range": None
        if bounds is None
        else [rounded(bounds[0], 1), rounded(bounds[1], 1)],
        "window_completion_tokens": window_tokens,
        "difference_ratio": None,
        "agrees": None,
    }
    if engine_tokens is None or bounds is None or not window_tokens or scope == "run":
        return check, None
    ratio = (engine_tokens - window_tokens) / window_tokens
    low, high = bounds
    agrees = low * (1 - TOKEN_AGREEMENT_RATIO) <= window_tokens <= high * (1 + TOKEN_AGREEMENT_RATIO)
    check["difference_ratio"], check["agrees"] = rounded(ratio, 4), agrees
    if agrees:
        return check, None
    return check, (
        f"engine token cross-check: the engine counted {low:.0f}–{high:.0f} generated tokens around the scope"
        f" (about {engine_tokens:.0f}), the measured windows report {window_tokens} completion tokens"
        f" ({ratio * 100:+.1f} %, beyond {TOKEN_AGREEMENT_RATIO * 100:g} % of that range): another client on"
        " the engine, windows without usage, or a scope that misses part of the generation"
    )
