"""A node's memory in use over a TSDB, and its page cache: which series they are read from.

In order: the family's own host series, node_exporter's MemTotal − MemAvailable, the GPUs' device memory
summed. The first that has a sample inside the span is taken, else the first with any around it (a run
shorter than a scrape): node_exporter's series that only began after the run, inside the margin read beyond
it, had taken the place of the GPUs' memory that covered the run, and the export's memory was null.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
    """The node's used memory; the GPUs' summed only at the scrapes where every GPU has it."""

    def own() -> Used | None:
        found = mine(f.host_memory)
        return None if not found else _of(one(found, "the memory"), f.host_memory_name())

    def node_exporter() -> Used | None:
        total, available = mine(NODE_MEM_TOTAL), mine(NODE_MEM_AVAILABLE)
        if not (total and available):
            return None
        total_b, available_b = one(total, "the memory"), one(available, "the memory")
        return total_b.t_ns, total_b.values - values_at(total_b.t_ns, available_b), NODE_MEM_USED

    def summed() -> Used | None:
        per_gpu = by_gpu(mine(f.gpu_memory))
        if not per_gpu or len(per_gpu) != gpus:
            return None
        t = union_times([r.t_ns for r in per_gpu.values()])
        used = np.sum([values_at(t, r) for r in per_gpu.values()], axis=0)  # NaN where any GPU lacks it
        return t, used, f.gpu_memory_name()

    around = None
    for read in (make() for make in (own, node_exporter, summed)):
        if read is None:
            continue
        if np.any((read[0] >= span_ns[0]) & (read[0] <= span_ns[1])):
            return read
        around = around or read
    return around or (np.empty(0, np.int64), np.empty(0), "none")


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
