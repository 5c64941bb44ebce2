"""Request windows and measurement scopes (sets of disjoint time intervals on the coordinator's clock)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

ScopeKind = Literal["request", "decode", "run"]


@dataclass(frozen=True, slots=True)
class Window:
    """One benchmark request, Unix epoch ns on the coordinator's clock."""

    id: str
    phase: str
    t_start_ns: int
    t_end_ns: int
    t_first_byte_ns: int | None = None
    t_first_token_ns: int | None = None
    t_last_token_ns: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    source: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """Every field by name, as the API takes a window and the export shows it."""
        return {name: getattr(self, name) for name in self.__slots__}

    @property
    def failed(self) -> bool:
        """An HTTP error answer: its time is not serving the benchmark, so no scope measures it."""
        return self.http_status is not None and self.http_status >= 400

    def span(self, kind: ScopeKind) -> tuple[int, int] | None:
        """The part of this request a scope measures; ``None`` when the window lacks the needed stamps."""
        if kind == "decode":
            if self.t_first_token_ns is None or self.t_last_token_ns is None:
                return None
            return self.t_first_token_ns, self.t_last_token_ns
        return self.t_start_ns, self.t_end_ns


@dataclass(frozen=True, slots=True)
class Scope:
    """A union of disjoint, sorted, half-open intervals [starts[i], ends[i])."""

    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]

    @property
    def seconds(self) -> float:
        return float(np.sum(self.ends - self.starts)) / 1e9

    @property
    def empty(self) -> bool:
        return len(self.starts) == 0

    def contains(self, t_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which timestamps fall inside the scope."""
        piece = np.searchsorted(self.starts, t_ns, side="right") - 1
        inside = piece >= 0
        inside[inside] = t_ns[inside] < self.ends[piece[inside]]
        return inside

    def to_json(self) -> list[list[int]]:
        return [[int(a), int(b)] for a, b in zip(self.starts, self.ends, strict=True)]


def union(spans: Iterable[tuple[int, int]]) -> Scope:
    """Merge possibly overlapping [a, b) spans into a Scope; empty and reversed spans are dropped."""
    pairs = np.array([s for s in spans if s[1] > s[0]], dtype=np.int64).reshape(-1, 2)
    if len(pairs) == 0:
        return Scope(np.empty(0, np.int64), np.empty(0, np.int64))
    pairs = pairs[np.argsort(pairs[:, 0], kind="stable")]
    starts, ends = pairs[:, 0], pairs[:, 1]
    running_end = np.maximum.accumulate(ends)
    # a new piece begins where a start lies beyond every earlier end
    new_piece = np.ones(len(starts), dtype=bool)
    new_piece[1:] = starts[1:] > running_end[:-1]
    first = np.flatnonzero(new_piece)
    last = np.append(first[1:] - 1, len(starts) - 1)
    return Scope(starts[first].copy(), running_end[last].copy())


def scope_for(
    windows: Sequence[Window],
    kind: ScopeKind,
    run_span: tuple[int, int],
    phases: frozenset[str] = frozenset({"timed"}),
) -> Scope:
    """The measured time: the run itself, or the union of the selected phases' request/decode spans."""
    if kind == "run":
        return union([run_span])
    spans = [s for w in windows if w.phase in phases and not w.failed and (s := w.span(kind)) is not None]
    return union(spans)
