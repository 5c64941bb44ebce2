"""Runtime sampling-interval changes as renewable leases.

A coordinator raises the rate for a run by taking a lease and renewing it; if it dies, the lease lapses
and the configured interval returns — fast sampling neither stops at once nor stays on forever.
With several holders the fastest active request wins, and a lease can only make sampling faster than
the configured interval: a slower one is held (and shown) but has no effect. 9195 leases at 3600 s once
stopped an agent sampling altogether; so there is one lease per holder (renewing replaces it), at most
``MAX_LEASES`` in all, and a lapsed lease is deleted, not just ignored, before any new one is counted.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkwatch_agent.shared.protocol import LEASE_TTL_S, MAX_INTERVAL_S, MIN_INTERVAL_S

MAX_TTL_S = 86400.0
DEFAULT_TTL_S = LEASE_TTL_S
#: Holders at once: a coordinator or two per agent need one each; this leaves room for test rigs and
#: people with curl while keeping every lookup cheap and the memory bounded.
MAX_LEASES = 64


@dataclass(frozen=True, slots=True)
class Lease:
    holder: str
    interval_s: float
    expires_mono_ns: int


class TooManyLeases(Exception):
    """Every lease slot is held by another holder; ``retry_after_s`` says when the first one lapses."""

    def __init__(self, held: int, retry_after_s: float) -> None:
        super().__init__(
            f"{held} leases are held, the most this agent keeps; renew or release one of them, "
            f"or retry after the next one lapses (in {math.ceil(retry_after_s)} s)"
        )
        self.retry_after_s = retry_after_s


#: The longest holder name a lease takes (a coordinator's is 31 characters).
MAX_HOLDER_CHARS = 128


def json_number(body: Mapping[str, Any], key: str, default: float | None = None) -> float | None:
    """``body[key]`` as a finite float (``default`` when absent, None when null); ValueError for anything
    else, a JSON string or boolean included (``"0.05"`` and ``true`` are no numbers)."""
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} must be a number")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{key} is out of range") from None
    if not math.isfinite(number):
        raise ValueError(f"{key} must be finite")
    return number


def lease_asked(
    body: Mapping[str, Any], keys: frozenset[str], holder: str | None = None
) -> tuple[str, float, float]:
    """(holder, interval_s, ttl_s) of a lease request, read by one rule wherever it comes (``PUT
    /v1/interval``, a ``stream --stdio`` command): ValueError saying what is wrong. ``keys``: the body's
    allowed keys; ``holder``: the name taken when the body gives none (None: it must give one)."""
    unknown = set(body) - keys
    if unknown:
        raise ValueError(f"unknown keys: {', '.join(sorted(unknown))}")
    named = holder_of(body, holder)
    interval_s = json_number(body, "interval_s")
    if interval_s is None:
        raise ValueError("interval_s is required")
    ttl_s = json_number(body, "ttl_s", DEFAULT_TTL_S)
    if ttl_s is None:  # given as null: not the default, which leaving it out asks for
        raise ValueError("ttl_s must be a number of seconds (leave it out for the default)")
    return named, interval_s, ttl_s


def holder_of(body: Mapping[str, Any], holder: str | None = None) -> str:
    """The lease holder a request names (``holder`` when it names none); ValueError unless it is 1 to
    ``MAX_HOLDER_CHARS`` printable characters (a name that shows in logs and ``GET /v1/interval``)."""
    return checked_holder(body.get("holder", holder))


def checked_holder(holder: object) -> str:
    """``holder`` when it is 1 to ``MAX_HOLDER_CHARS`` printable characters (a name that shows in logs and
    ``GET /v1/interval``, and that a UTF-8 query can name to release it: no lone surrogate); else
    ValueError."""
    if not isinstance(holder, str) or not 0 < len(holder) <= MAX_HOLDER_CHARS or not holder.isprintable():
        raise ValueError(f"holder must be 1–{MAX_HOLDER_CHARS} printable characters naming the requester")
    return holder


def validate_interval(interval_s: float) -> float:
    if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
        raise ValueError(f"interval must be within [{MIN_INTERVAL_S}, {MAX_INTERVAL_S}] s, got {interval_s}")
    return float(interval_s)


class IntervalLeases:
    """The configured interval plus active leases; all times are monotonic ns passed in by the caller."""

    def __init__(self, configured_s: float) -> None:
        self.configured_s = validate_interval(configured_s)
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        # current_s runs on every tick: cache the answer until the next lease expiry or change
        self._cached_s = self.configured_s
        self._cached_until_ns = -1

    def grant(self, holder: str, interval_s: float, ttl_s: float, now_mono_ns: int) -> Lease:
        validate_interval(interval_s)
        if not 0 < ttl_s <= MAX_TTL_S:
            raise ValueError(f"ttl must be within (0, {MAX_TTL_S:g}] s, got {ttl_s}")
        if not 0 < len(holder) <= MAX_HOLDER_CHARS or not _utf8(holder):
            # the table's own rule (a holder no UTF-8 query can name could never be released); what a
            # request names is checked by checked_holder, stricter, before it gets here
            raise ValueError(f"holder must be a UTF-8 string of 1 to {MAX_HOLDER_CHARS} characters")
        lease = Lease(holder, float(interval_s), now_mono_ns + int(ttl_s * 1e9))
        with self._lock:
            self._drop_lapsed(now_mono_ns)
            if holder not in self._leases and len(self._leases) >= MAX_LEASES:
                first_ns = min(held.expires_mono_ns for held in self._leases.values())
                raise TooManyLeases(len(self._leases), (first_ns - now_mono_ns) / 1e9)
            self._leases[holder] = lease
            self._cached_until_ns = -1
        return lease

    def release(self, holder: str) -> bool:
        with self._lock:
            self._cached_until_ns = -1
            return self._leases.pop(holder, None) is not None

    @property
    def stored(self) -> int:
        """Leases kept in memory right now, lapsed ones not yet deleted included."""
        return len(self._leases)

    def active(self, now_mono_ns: int) -> tuple[Lease, ...]:
        with self._lock:
            self._drop_lapsed(now_mono_ns)
            return tuple(self._leases.values())

    def current_s(self, now_mono_ns: int) -> float:
        """The interval in effect: the fastest lease's, but never slower than the configured one."""
        if now_mono_ns < self._cached_until_ns:
            return self._cached_s
        with self._lock:
            self._drop_lapsed(now_mono_ns)
            leases = self._leases.values()
            self._cached_s = min((lease.interval_s for lease in leases), default=self.configured_s)
            self._cached_s = min(self._cached_s, self.configured_s)
            self._cached_until_ns = min((lease.expires_mono_ns for lease in leases), default=2**63 - 1)
            return self._cached_s

    def _drop_lapsed(self, now_mono_ns: int) -> None:
        for holder in [h for h, lease in self._leases.items() if lease.expires_mono_ns <= now_mono_ns]:
            del self._leases[holder]


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True
