"""Why a meter's polls or an engine's scrapes failed in a span, as the export lists it: each reason once, from
its first time, with how many polls said it and the last time one did; the reasons past ``MAX_REASONS``
counted, not listed.

The export listed the first 20 failed polls: a 20-second outage early in a run (at 1 s polls) hid the reason
of every later gap, and nothing said that more had failed. A dead meter fails the same way every poll, so
its reasons are few however long the run, and each gap is explained by one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

#: The JSON Schema of :meth:`Failures.json`'s fields (in core/export_schema.py's): each reason from its first
#: time, with how many said it until when (fields added since: an export of an earlier sparkwatch has
#: neither), and the failed polls past the reasons listed counted.
FAILURES_SCHEMA: dict[str, Any] = {
    "errors": {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["t_ns", "error"],
            "properties": {
                **{t: {"type": "integer"} for t in ("t_ns", "last_t_ns")},
                "count": {"type": "integer", "minimum": 1},
                "error": {"type": "string"},
            },
        },
    },
    "errors_omitted": {"type": "integer", "minimum": 1},
}
#: Distinct reasons listed per meter (or engine): a reason with changing words (a number in it) may make many.
MAX_REASONS = 20


class Reason(NamedTuple):
    first_ns: int
    last_ns: int
    polls: int  # how many failed polls (or scrapes) said it
    error: str


@dataclass(frozen=True, slots=True)
class Failures:
    """``reasons`` in the order they first appeared; ``omitted``: the failed polls whose reasons are not
    listed (past ``MAX_REASONS``)."""

    reasons: tuple[Reason, ...] = ()
    omitted: int = 0

    @classmethod
    def of(cls, reasons: Sequence[Reason], total: int) -> Failures:
        """The first ``MAX_REASONS`` of ``reasons`` (each a reason's tally, in any order), ``total`` failed
        polls in all: the rest are the omitted ones."""
        kept = tuple(sorted(reasons)[:MAX_REASONS])
        return cls(kept, max(0, total - sum(r.polls for r in kept)))

    def __bool__(self) -> bool:
        return bool(self.reasons) or self.omitted > 0

    def json(self) -> dict[str, Any]:
        """``errors`` (and ``errors_omitted`` where some are): the export's fields."""
        listed = [
            {"t_ns": r.first_ns, "last_t_ns": r.last_ns, "count": r.polls, "error": r.error}
            for r in self.reasons
        ]
        return {"errors": listed, **({"errors_omitted": self.omitted} if self.omitted else {})}
