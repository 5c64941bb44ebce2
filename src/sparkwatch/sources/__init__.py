"""Where a run's samples come from for the core: the coordinator's store (the default) or a
Prometheus-compatible engine. Every source answers the same narrow questions, so the core never knows which
one it was fed by; the export's ``source`` block says it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from sparkwatch.core.baseline import BASELINE_S
from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.export import build_export
from sparkwatch.core.export_nodes import longest_interval_s
from sparkwatch.core.run_spec import NodeInput, RunSpec
from sparkwatch.core.tracks import GAP_INTERVALS
from sparkwatch.core.window_rows import WindowsTap
from sparkwatch.core.windows import Window
from sparkwatch.engines.spec import MAX_INTERVAL_S as ENGINE_MAX_INTERVAL_S
from sparkwatch.meters.spec import MAX_INTERVAL_S as METER_MAX_INTERVAL_S

#: Samples read before the run's start: the memory baseline needs the BASELINE_S before the first window
#: (and a few seconds more, for the clock offset and a window that starts before the run).
LEAD_NS = int((BASELINE_S + 5.0) * 1e9)
#: How far past the span's end its first sample after is looked for: it closes the span's last interval (an
#: agent back at its idle interval once the run's lease is released, 1 s by default, is well within it).
TAIL_NS = 60 * 1_000_000_000
#: The same for a wall meter's readings: its next poll starts at most one poll interval after the end, and is
#: stamped at the middle of its request (a timeout of two intervals at most), so up to 2 intervals later.
METER_TAIL_NS = int(2 * METER_MAX_INTERVAL_S * 1e9)
#: Engine scrapes read beyond the span: the scrape around each edge may be as far as the gap limit at the
#: slowest scrape interval.
ENGINE_MARGIN_NS = int(GAP_INTERVALS * ENGINE_MAX_INTERVAL_S * 1e9)


class SourceError(Exception):
    """What a source cannot give (unreachable, refused, a malformed answer, no series): one line."""


class NodeMissing(SourceError):
    """A node asked for by name has no series in the source (where a run's own nodes are asked, the line
    names them)."""


class SampleSource(Protocol):
    """The core's inputs for a time span, from wherever the samples are kept."""

    def describe(self) -> dict[str, Any]:
        """The export's ``source`` block: the kind, where (never with credentials), which series."""
        ...

    def node_input(self, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
        """One node's GPU tracks, memory track, domains, signals, clock and hardware facts over the span
        (samples on the run's clock, the baseline period before ``t_from_ns`` included)."""
        ...

    def engine_input(self, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
        """The serving engine's scrapes around the span, or None where the source has none."""
        ...


def export_from(
    source: SampleSource,
    spec: RunSpec,
    nodes: Sequence[str],
    windows: Sequence[Window],
    version: str,
    *,
    series_buckets: int | None = None,
    windows_tap: WindowsTap | None = None,
) -> dict[str, Any]:
    """The run's export from ``source``: every window is read whole, even one that starts before the run
    or ends after it. A ``spec`` without a nominal interval (``interval_s`` 0: a TSDB's scrapes) takes the
    longest interval the nodes' samples show, so a window shorter than two of them is low confidence."""
    t_from = min([spec.t_start_ns, *(w.t_start_ns for w in windows)])
    t_to = max([spec.t_end_ns, *(w.t_end_ns for w in windows)])
    engine = source.engine_input(t_from, t_to)  # first: a source's refusal comes before the nodes' reads
    inputs: Iterable[NodeInput] = (source.node_input(n, t_from, t_to) for n in nodes)  # one at a time
    if spec.interval_s <= 0 and series_buckets is not None:  # the series' gap limit needs it first: every
        inputs = list(inputs)  # node read at once (without a series block the core finds it node by node)
        span = (spec.t_start_ns, spec.t_end_ns)
        interval_s = max((longest_interval_s(node.gpus, span) for node in inputs), default=0.0)
        spec = dataclasses.replace(spec, interval_s=interval_s)
    return build_export(
        spec,
        inputs,
        windows,
        version,
        engine,
        series_buckets=series_buckets,
        source=source.describe,
        windows_tap=windows_tap,
    )
