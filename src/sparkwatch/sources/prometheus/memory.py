"""A node's memory in use over a TSDB, and its page cache: which series they are read from.

In order: the family's own host series, node_exporter's MemTotal − MemAvailable, the GPUs' device memory
summed. The first that has a sample inside the span (the run and its windows) is taken, else the first with
any around it (a span shorter than a scrape): node_exporter's series that only began after the run, inside
the margin read beyond it, had taken the place of the GPUs' memory that covered the run, and the export's
memory was null.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from sparkwatch.core.tracks import F64, I64
from sparkwatch.sources.prometheus.align import union_times, values_at
from sparkwatch.sources.prometheus.mappings import (
    NODE_MEM_AVAILABLE,
    NODE_MEM_TOTAL,
    NODE_MEM_USED,
    NODE_PAGE_CACHE,
    Family,
    Series,
)
from sparkwatch.sources.prometheus.raw import RawSeries

#: A node's series of one metric, read over the span and its margins.
Mine = Callable[[Series | None], list[RawSeries]]
#: The one series among those found (several at once refused), named for the refusal by what they are.
One = Callable[[Sequence[RawSeries], str], RawSeries]
#: Per GPU, its one series.
ByGpu = Callable[[Sequence[RawSeries]], dict[str, RawSeries]]
#: Times, bytes, and what they were read from.
Used = tuple[I64, F64, str]


def memory_used(
    f: Family, mine: Mine, one: One, by_gpu: ByGpu, *, gpus: int, span_ns: tuple[int, int]
) -> Used:
    """The node's used memory; the GPUs' summed only at the scrapes where every GPU has it. The choice is
    made on the series' times, before any is checked for duplicates: a source not taken refuses nothing."""

    def sources() -> Iterator[tuple[list[list[RawSeries]], Callable[[], Used | None]]]:
        own = [mine(f.host_memory)]
        yield own, lambda: _of(one(own[0], "the memory"), f.host_memory_name())
        pair = [mine(NODE_MEM_TOTAL), mine(NODE_MEM_AVAILABLE)]
        yield pair, lambda: _used(one(pair[0], "the memory"), one(pair[1], "the memory"))
        per_gpu = [mine(f.gpu_memory)]
        yield per_gpu, lambda: _summed(by_gpu(per_gpu[0]), gpus, f.gpu_memory_name())

    around = None
    for parts, build in sources():
        if not all(parts):
            continue
        if all(_holds(found, span_ns) for found in parts):
            read = build()
            if read is not None:
                return read
        elif around is None:
            around = build  # a run shorter than a scrape: the first source with samples around it
    read = around() if around is not None else None
    return read or (np.empty(0, np.int64), np.empty(0), "none")


def page_cache(f: Family, mine: Mine, one: One, t_ns: I64, used: str) -> tuple[F64, str]:
    """The node's page cache at the memory's times (NaN where it was not read), and what it was read
    from: the series scraped with the memory ``used`` was read from (the family's own host series, or
    node_exporter's Cached + SReclaimable beside its MemTotal − MemAvailable); none beside GPU memory."""
    wanted = {f.host_memory_name(): f.host_page_cache, NODE_MEM_USED: NODE_PAGE_CACHE}.get(used, ())
    found = [mine(s) for s in wanted]
    if not wanted or not all(found):
        return np.full(len(t_ns), np.nan), "none"
    parts = [values_at(t_ns, one(x, "the page cache")) for x in found]
    return np.sum(parts, axis=0), " + ".join(s.metric for s in wanted)


def _of(series: RawSeries, name: str) -> Used:
    return series.t_ns, series.values, name


def _used(total: RawSeries, available: RawSeries) -> Used:
    """node_exporter's MemTotal − MemAvailable, at MemTotal's scrapes."""
    return total.t_ns, total.values - values_at(total.t_ns, available), NODE_MEM_USED


def _summed(per_gpu: dict[str, RawSeries], gpus: int, name: str) -> Used | None:
    """Every GPU's device memory summed, where each has it (NaN elsewhere); none unless every GPU has some."""
    if not per_gpu or len(per_gpu) != gpus:
        return None
    t = union_times([r.t_ns for r in per_gpu.values()])
    return t, np.sum([values_at(t, r) for r in per_gpu.values()], axis=0), name


def _holds(found: Sequence[RawSeries], span_ns: tuple[int, int]) -> bool:
    """Whether any of the series has a sample inside ``span_ns``."""
    return any(np.any((r.t_ns >= span_ns[0]) & (r.t_ns <= span_ns[1])) for r in found)
