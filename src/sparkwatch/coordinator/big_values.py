"""Building and letting go of values with millions of objects (a 500 000-window export) in a worker thread
without long stalls of the GIL, which that thread shares with the event loop.

While such a value grows, each automatic full collection walks every object alive and takes longer the
larger the value is (415 ms at 500 000 windows, measured); freeing it in one go walks them all again. So
the cyclic collector is paused while any export is built, and long lists are emptied a slice at a time.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

from sparkwatch.core.window_rows import WindowRows

T = TypeVar("T")
_DONE = object()

#: Items freed per slice: a few hundred windows, well under a millisecond.
SLICE_ITEMS = 500


class CollectorPause:
    """Cyclic garbage collection paused while any holder is inside; left as it was found when the last one
    leaves. One per process that uses it (the coordinator holds it), shared by its export threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    def __enter__(self) -> CollectorPause:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._was_enabled:
                gc.enable()

    def each(self, items: Iterator[T]) -> Iterator[T]:
        """``items``, the collector paused while each is made and running between them (while a consumer
        that sets its own pace, such as a slow client, holds one)."""
        while True:
            with self:
                item = next(items, _DONE)
            if item is _DONE:
                return
            yield item  # type: ignore[misc]


def let_go(value: Any) -> None:
    """Empty every long list inside ``value`` (through dicts, and the lists an export's windows are made
    from) a slice at a time, so that dropping the last reference afterwards frees little at once."""
    if isinstance(value, dict):
        for item in value.values():
            let_go(item)
    elif isinstance(value, WindowRows):  # the run's windows it reads: it makes none after this
        for held in value.held:
            let_go(held)
    elif isinstance(value, list) and len(value) > SLICE_ITEMS:
        while value:
            del value[-SLICE_ITEMS:]
