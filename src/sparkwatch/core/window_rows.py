"""Per-window parts of the export kept as columns and made into JSON values a slice at a time when read.

An 8 h run's 10 000 windows on 4 nodes were ~80 MB of dicts, floats and lists, held from the first node
measured to the export written: most of an export's memory. A :class:`WindowRows` holds the same figures
as numpy columns (a few hundred kB per node) and a function that makes the values of windows [lo, hi);
reading it (an index, a slice, iteration, the export's encoders) makes just those, each time it is read
(a reader that walks the windows several times makes them once: ``list(rows)``). The dicts made are fresh
each time, so editing one changes nothing; what they hold may not be (a window's ``source`` dict, its
``engine`` entry), so an export to be edited is copied first (``copy.deepcopy`` gives plain lists).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T")

#: What is handed each slice of windows as it is made: its first index and its values (a tap may keep what it
#: needs of the first pass, so a later reader does not make them again: outputs' window spool).
WindowsTap = Callable[[int, list[Any]], None]

#: Windows made per step of an iteration: large enough that numpy's per-call cost is spread (a slice's
#: figures are rounded a column at a time), small enough that a slice's values are a few MB at most.
CHUNK = 500


class WindowRows(Sequence[T]):
    """``length`` values, ``make(lo, hi)`` giving those of windows [lo, hi) as a list; ``held``: the long
    lists ``make`` reads (the run's windows), for :func:`~sparkwatch.coordinator.big_values.let_go` to
    empty a slice at a time when the export is done with."""

    __slots__ = ("_held", "_length", "_make")

    def __init__(
        self, length: int, make: Callable[[int, int], list[T]], held: Sequence[list[Any]] = ()
    ) -> None:
        self._length = length
        self._make = make
        self._held = tuple(held)

    @property
    def held(self) -> tuple[list[Any], ...]:
        return self._held

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._length)
            if step != 1:
                return self.between(0, self._length)[index]
            return self.between(lo, max(lo, hi))
        k = index + self._length if index < 0 else index
        if not 0 <= k < self._length:
            raise IndexError("window index out of range")
        return self._make(k, k + 1)[0]

    def between(self, lo: int, hi: int) -> list[T]:
        """The values of windows [lo, hi)."""
        return self._make(lo, hi) if hi > lo else []

    def __iter__(self) -> Iterator[T]:
        for lo in range(0, self._length, CHUNK):
            yield from self._make(lo, min(lo + CHUNK, self._length))

    def __reversed__(self) -> Iterator[T]:
        for hi in range(self._length, 0, -CHUNK):
            yield from reversed(self._make(max(0, hi - CHUNK), hi))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WindowRows | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, so as unhashable as one

    def __deepcopy__(self, memo: dict[int, Any]) -> list[T]:
        return copy.deepcopy(list(self), memo)

    def __copy__(self) -> list[T]:
        return list(self)

    def __repr__(self) -> str:
        return f"WindowRows({self._length} windows)"


class FirstPass:
    """A :data:`WindowsTap` keeping every window the first pass makes (the digest's), in order: a reader
    that needs them all as values (the run report) takes them here instead of making them again."""

    def __init__(self) -> None:
        self._values: list[Any] = []
        self._in_order = True

    def __call__(self, lo: int, windows: list[Any]) -> None:
        if lo > len(self._values):  # a slice missed: the first pass began elsewhere
            self._in_order = False
        elif lo == len(self._values) and self._in_order:
            self._values += windows

    def all(self, count: int) -> list[Any] | None:
        """The values of all ``count`` windows, or None where the first pass did not make them all."""
        return self._values if self._in_order and len(self._values) == count else None


def plain(value: Any) -> Any:
    """``value`` with every :class:`WindowRows` inside (through dicts and lists) made a list: what a JSON
    round trip gives, for code that wants plain values (a schema validator, ``json.dumps``)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | WindowRows):
        return [plain(v) for v in value]
    return value


def is_rows(value: Any) -> bool:
    """A list or a :class:`WindowRows`: a JSON array, for the export's encoders."""
    return isinstance(value, list | WindowRows)
