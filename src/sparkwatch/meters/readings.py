"""What a meter's answer must hold to be stored as a reading: one rule for every reader and the poller.

A reading is a power, finite watts in [0, MAX_PLAUSIBLE_NODE_W] (a node only draws, and no one node draws
more), and where the meter has one, its energy counter, finite joules in [0, MAX_COUNTER_J]. JSON gives
more than that: ``1e999`` parses to inf, ``NaN`` to nan, a 400-digit integer to an int no float holds,
``true`` to an int, and a firmware may quote a number. Each is a failed poll whose one line says what the
meter answered; nothing is clamped, read as 0, or dropped while the rest of the answer is kept. So nothing
reaches the store that store/meters.py refuses on read (±inf, text) or would read as unknown (NaN, which
SQLite stores as NULL); the store also takes a negative number, which no reader hands it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from sparkwatch.core.domains import MAX_PLAUSIBLE_NODE_W
from sparkwatch_agent.shared.strict_text import cut_short

#: The largest energy counter taken (≈ 2.5 TWh): past 2**53 J a float64 steps by more than a joule, so the
#: counter no longer counts, and no node's meter reads that (20 kW for 14 000 years).
MAX_COUNTER_J = float(2**53)
#: How much of a wrong value a refusal repeats.
SHOWN_CHARS = 40


class MeterError(Exception):
    """The meter answered, but not with a reading (the message says what it answered, in one line)."""


@dataclass(frozen=True, slots=True)
class Reading:
    power_w: float | None
    energy_j: float | None = None  # the meter's own energy counter, J
    counter_left_out: str | None = None  # why the meter's counter was not taken (its power was)


def number(value: Any, what: str, unit: str) -> float:
    """``value``, as the meter's JSON gave ``what`` (in ``unit``), when it is a finite number of at least 0;
    else a MeterError that names ``what`` and says what it was."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MeterError(f"{what} is {_shown(value)}, not a number")
    try:
        found = float(value)
    except OverflowError:  # an int past a float's range: JSON allows any number of digits
        raise MeterError(f"{what} is an integer past a float's range, not a finite number") from None
    if not math.isfinite(found):
        raise MeterError(f"{what} is {found}, not a finite number")
    if found < 0:  # a meter that also measures what flows back, or is wired the other way round
        raise MeterError(f"{what} is negative ({found:g} {unit}): not a node's draw; check what it meters")
    return found


def counter_j(value: Any, what: str, unit: str, unit_j: float) -> float:
    """A meter's energy counter ``value`` (in ``unit``, each ``unit_j`` J) in joules, or a MeterError: a
    finite count in ``unit`` can still be past what a counter of joules holds (1e305 Wh is inf J)."""
    found = number(value, what, unit)
    joules = found * unit_j
    if not joules <= MAX_COUNTER_J:
        raise MeterError(f"{what} is {found:g} {unit}, more than a meter counts ({MAX_COUNTER_J:g} J)")
    return joules


def with_counter(power_w: float, value: Any, what: str, unit: str, unit_j: float) -> Reading:
    """A power with the meter's energy counter ``value`` where it is one (None: the meter has none). A
    counter that is not one (inf, 1e305 Wh, a string) is left out, why said, and the power kept: the export
    integrates the power; the counter feeds only /metrics and remote write."""
    if value is None:
        return Reading(power_w)
    try:
        return Reading(power_w, counter_j(value, what, unit, unit_j))
    except MeterError as exc:
        return Reading(power_w, None, str(exc))


def refused(reading: Reading) -> str | None:
    """Why ``reading`` is not stored, whichever reader made it; None: it is stored."""
    power, energy = reading.power_w, reading.energy_j
    if power is not None and not 0 <= power <= MAX_PLAUSIBLE_NODE_W:  # also NaN
        # one such reading would pass the export's check on intervals (the mean of two readings)
        return f"{power:g} W, outside [0, {MAX_PLAUSIBLE_NODE_W:g}] W for one node"
    if energy is not None and not 0 <= energy <= MAX_COUNTER_J:
        return f"an energy counter of {energy:g} J, outside [0, {MAX_COUNTER_J:g}] J"
    return None


def _shown(value: Any) -> str:
    """``value`` as JSON wrote it (``true``, a quoted string), cut short; a container by its kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value, ensure_ascii=False)
    return cut_short(text, SHOWN_CHARS)
