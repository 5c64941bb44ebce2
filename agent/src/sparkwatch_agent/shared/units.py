"""Units both distributions convert with, named once."""

from __future__ import annotations

import math

GIB = 1024**3


def round1(value: float) -> float:
    """One decimal, half away from zero on the float ``value * 10``: ``math.Round(value*10) / 10``, the
    shape of lmx's Go rounding helpers. Python's ``round(x, 1)`` rounds half to even on the exact decimal
    value, so it can print 55.6 where lmx prints 55.7."""
    scaled = value * 10
    if not math.isfinite(scaled):  # past 1.8e307: no decimal to round (Go's math.Round keeps it too)
        return value
    whole = math.trunc(scaled)
    if abs(scaled - whole) >= 0.5:  # exact: a float minus its integer part is representable
        whole += 1 if scaled > 0 else -1
    return whole / 10


def one_decimal(value: float) -> str:
    """``value`` shown to one decimal as it is published (:func:`round1`): a table or a report that
    printed 55.6 beside an lmx field of 55.7 would disagree with the line it is checked against."""
    return f"{round1(value):.1f}"


def lmx_gb(n_bytes: int) -> float:
    """Bytes as an lmx ``...Gb`` field: GiB, since lmx divides MiB by 1024 and bytes by ``1024**3``
    (never by 1e9), rounded by :func:`round1`."""
    return round1(n_bytes / GIB)
