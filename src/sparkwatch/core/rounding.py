"""A column of figures as JSON numbers: rounded to a few decimals, unknown (NaN, ±inf) as ``None``.

Exactly what ``round(x, digits)`` gives each value (the double nearest the correctly rounded decimal), with
a figure that rounds to zero from below written 0.0, not -0.0 (an energy of "-0.0 J" says nothing true), but
vectorised: an export rounds a few figures per window and node, about 600 000 of them for an 8 h run with
10 000 windows, and ``round`` on a float costs a decimal conversion each.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: Past this, ``x · 10^digits`` has no fractional bits left to round: such values go through ``round``.
EXACT_LIMIT = 2.0**52
#: How close (in units of the last place) to a half the scaled value may lie before its rounding could
#: differ from the exact decimal's: those few go through ``round`` too.
TIE_ULPS = 4


def rounded_list(values: npt.ArrayLike, digits: int = 3) -> list[float | None]:
    """``[round(v, digits) if finite else None for v in values]``, without a Python call per value."""
    x = np.asarray(values, dtype=np.float64)
    scale = 10.0**digits
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = x * scale
        out: list[float | None] = (np.rint(scaled) / scale + 0.0).tolist()  # + 0.0: no -0.0
        half = np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5)
        # rint(fl(x·10^d)) is the correctly rounded integer unless x·10^d lies next to a half
        doubtful = ~(half > TIE_ULPS * np.spacing(np.abs(scaled))) | ~(np.abs(scaled) < EXACT_LIMIT)
    finite = np.isfinite(x)
    for i in np.flatnonzero(doubtful & finite).tolist():
        out[i] = round_figure(float(x[i]), digits)
    for i in np.flatnonzero(~finite).tolist():
        out[i] = None
    return out


def round_figure(value: float, digits: int = 3) -> float:
    """``round(value, digits)``, 0.0 where that is -0.0."""
    return round(value, digits) + 0.0


def rounded(value: float | None, digits: int = 3) -> float | None:
    """A figure as the export writes it: :func:`round_figure`, ``None`` (unknown) kept."""
    return None if value is None else round_figure(float(value), digits)


#: How far below a decimal a ratio may lie and still be written as it: sums of float intervals miss a whole
#: 1.0 by a few ulps (1e-9 of an 8 h scope is 29 µs, far below any sampling interval).
NOISE = 1e-9


def floored_list(values: npt.ArrayLike, digits: int = 4) -> list[float | None]:
    """Each value as the largest ``digits``-decimal figure not above it (unknown as ``None``): how a ratio
    judged against a threshold is written (a coverage of 0.99996 is not 1.0, whole, and 0.94996 not 0.95,
    enough), so that a reader comparing the figure with the threshold judges as the export did."""
    x = np.asarray(values, dtype=np.float64)
    scale = 10.0**digits
    with np.errstate(invalid="ignore", over="ignore"):
        steps = np.rint(x * scale)
        # k / 10^d: the double nearest that decimal; float noise below it (a whole coverage summed to
        # 0.9999999999) is not a shortfall
        steps = np.where(steps / scale > x + NOISE, steps - 1, steps)
        out: list[float | None] = (steps / scale + 0.0).tolist()
    for i in np.flatnonzero(~np.isfinite(x)).tolist():
        out[i] = None
    return out


def floored(value: float | None, digits: int = 4) -> float | None:
    """:func:`floored_list` of one figure."""
    return None if value is None else floored_list([value], digits)[0]


def ratio_text(value: float, digits: int = 3) -> str:
    """A ratio in a sentence beside its threshold (``coverage 0.949 < 0.95``), never rounded up to it."""
    return f"{floored(value, digits):.{digits}f}"
