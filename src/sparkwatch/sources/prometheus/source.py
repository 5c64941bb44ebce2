"""A Prometheus-compatible engine as a sample source: one exporter family's series (mappings.py) turned into
the core's per-node tracks.

Sample times are the engine's scrape timestamps: one clock for every node, the scraper's, so no offset is
measured (the node clock says ``tsdb``). Each track's gap limit comes from the spacing actually seen (the
median interval between its scrapes), so a missed scrape or a dead target is a gap exactly as a lost agent
sample is; nothing is carried across it. Series of one scrape share a timestamp, which is how power,
energy and utilisation of a GPU are joined (a value missing at a time is unknown there, never held).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from sparkwatch.core.clock import NodeClock
from sparkwatch.core.domains import DomainInput
from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.run_spec import NodeInput
from sparkwatch.core.stamps import utc_stamp
from sparkwatch.core.throttle import SignalTrack
from sparkwatch.core.tracks import GpuTrack, MemTrack
from sparkwatch.sources import ENGINE_MARGIN_NS, LEAD_NS, NodeMissing, SourceError
from sparkwatch.sources.prometheus.align import (
    PICK_ONE,
    PICK_SPARKWATCH,
    merged,
    nominal_interval,
    single,
)
from sparkwatch.sources.prometheus.channels import meter_domains, sensor_domains
from sparkwatch.sources.prometheus.client import EngineRefusal
from sparkwatch.sources.prometheus.engine_series import engine_samples
from sparkwatch.sources.prometheus.gpus import gpu_tracks
from sparkwatch.sources.prometheus.mappings import (
    Family,
    ReasonFlags,
    Series,
)
from sparkwatch.sources.prometheus.memory import memory_used, page_cache
from sparkwatch.sources.prometheus.node_label import check_nodes_label, check_one_machine
from sparkwatch.sources.prometheus.promql import literal, quoted
from sparkwatch.sources.prometheus.raw import Engine, RawSeries, Reader, refuse_outside
from sparkwatch.sources.prometheus.signals import signal_track, top_hz

_T = TypeVar("_T")
#: Read beyond either edge: the scrape around each edge may be a whole (slow) scrape interval away.
MARGIN_NS = 60 * 1_000_000_000
#: Nodes a "no such node" error lists, of those the engine has.
NODES_SHOWN = 10
CLOCK_NOTE = (
    "sample times are the engine's timestamps (a scraper's clock, or the coordinator's for samples it"
    " remote-wrote); windows are taken to be on that clock; no offset is measured by the export"
)
ENERGY_NOTE = (
    "a window's energy is the energy counter at its edges, each interpolated linearly inside the one"
    " scrape interval that holds it; the trapezoid of power where no counter"
)


class TsdbSource:
    """A :class:`sparkwatch.sources.SampleSource` over a Prometheus-compatible engine."""

    def __init__(
        self,
        reader: Reader,
        family: Family,
        nodes_label: str,
        engine: Engine,
        url: str,
        *,
        engine_matchers: str | None = None,
        series_matchers: str | None = None,
    ) -> None:
        """``engine_matchers``: the label matchers that select the serving engine's series (none: the
        export has no engine block); ``series_matchers``: label matchers every node series read must
        also match (an engine that holds them twice)."""
        check_nodes_label(family, nodes_label)
        self._reader = reader
        self._engine_matchers = engine_matchers
        self._series_matchers = series_matchers
        self._pick = PICK_SPARKWATCH if family.name == "sparkwatch" else PICK_ONE  # what a refusal asks
        self._family = family
        self._label = nodes_label
        self._engine = engine
        self._url = url
        self._read: dict[tuple[str, str, int, int], list[RawSeries]] = {}  # the node being read's only
        self._memory_used: dict[str, str] = {}  # node → the series its memory was read from
        self._page_cache: dict[str, str] = {}  # node → the series its page cache was read from

    def describe(self) -> dict[str, Any]:
        f = self._family
        return {
            "kind": self._engine,
            "metrics": f.name,
            "url": self._url,
            "api": self._reader.api,
            "nodes_label": self._label,
            "gate_series": " or ".join(s.metric for s in f.util),
            "memory_series": "; ".join(sorted(set(self._memory_used.values()))) or "none",
            "page_cache_series": "; ".join(sorted(set(self._page_cache.values()))) or "none",
            "clock": CLOCK_NOTE,
            "energy": ENERGY_NOTE,
            "engine_series": None if self._engine_matchers is None else f"{{{self._engine_matchers}}}",
            "series_matchers": None if self._series_matchers is None else f"{{{self._series_matchers}}}",
        }

    def series(self, s: Series, t_from_ns: int, t_to_ns: int, node: str) -> list[RawSeries]:
        """The series of metric ``s`` of ``node``, scaled to base units. One node's are kept while it is
        read, and no other's: a fleet's export holds one node's samples at a time, not every node's."""
        key = (s.metric, node, t_from_ns, t_to_ns)
        if key not in self._read:
            if any(k[1] != node for k in self._read):
                self._read.clear()  # the next node: the last one's series go
            selector = f"{s.metric}{{{self._label}={quoted(node)}{self._also()}}}"
            found = self._read_series(selector, t_from_ns - LEAD_NS - MARGIN_NS, t_to_ns + MARGIN_NS)
            self._read[key] = [RawSeries(r.labels, r.t_ns, r.values * s.scale) for r in found]
        return self._read[key]

    def _also(self) -> str:
        """The ``--series-matchers`` every node selector adds (none: nothing)."""
        return f",{self._series_matchers}" if self._series_matchers else ""

    def _read_series(self, selector: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]:
        return self._asked(lambda: self._reader.read(selector, t_from_ns, t_to_ns))

    def _asked(self, ask: Callable[[], _T]) -> _T:
        """The engine's answer; with ``--series-matchers``, its refusal of the query says which flag it was
        about (an unreachable or failing engine is not the flag's fault)."""
        try:
            return ask()
        except EngineRefusal as exc:
            if self._series_matchers is None or exc.status not in (400, 422):
                raise
            raise SourceError(f"--series-matchers {{{self._series_matchers}}}: {exc}") from None

    def nodes(self, t_from_ns: int, t_to_ns: int, only: Sequence[str] = ()) -> list[str]:
        """The nodes label's values on the family's GPU power series with a sample in the span read, sorted;
        none is one line. (The engine counts them: no sample is read twice.) With ``only``: those nodes,
        in that order, each checked to have such series (a fleet's engine holds far more nodes than a
        benchmark ran on, and a misspelt name is one line, not a node without samples)."""
        if only:
            return self._named(only, t_from_ns, t_to_ns)
        names = self._listed(t_from_ns, t_to_ns)
        if not names:
            hint = self._labels_hint(t_from_ns, t_to_ns)
            raise SourceError(
                f"no {self._family.power.metric}{self._matching()} series labelled {self._label!r} from"
                f" {utc_stamp(t_from_ns)} to {utc_stamp(t_to_ns)} at {self._url}{hint}"
            )
        return names

    def _listed(self, t_from_ns: int, t_to_ns: int, only: Sequence[str] = ()) -> list[str]:
        """Over the span :meth:`series` reads, so a node listed is one whose samples its figures read; with
        ``only``, counted among those nodes alone (a fleet's count can pass an engine's sample limit)."""
        which = f"=~{quoted('|'.join(literal(n) for n in only))}" if only else '!=""'
        selector = f"{self._family.power.metric}{{{self._label}{which}{self._also()}}}"
        span = (t_from_ns - LEAD_NS - MARGIN_NS, t_to_ns + MARGIN_NS)
        return sorted(self._asked(lambda: self._reader.label_values(selector, self._label, *span)))

    def _named(self, only: Sequence[str], t_from_ns: int, t_to_ns: int) -> list[str]:
        """``only``, once each node was found among those with power series."""
        found = set(self._listed(t_from_ns, t_to_ns, only))
        for node in only:
            if node not in found:
                listed = self._listed(t_from_ns, t_to_ns)  # the fleet's, for the message
                shown = ", ".join(listed[:NODES_SHOWN]) + (", …" if len(listed) > NODES_SHOWN else "")
                hint = f" (nodes with them: {shown})" if listed else self._labels_hint(t_from_ns, t_to_ns)
                raise NodeMissing(
                    f"no {self._family.power.metric}{self._matching()} series with"
                    f" {self._label}={quoted(node)} from {utc_stamp(t_from_ns)} to"
                    f" {utc_stamp(t_to_ns)} at {self._url}{hint}"
                )
        return list(only)

    def _matching(self) -> str:
        return f"{{{self._series_matchers}}}" if self._series_matchers else ""

    def _labels_hint(self, t_from_ns: int, t_to_ns: int) -> str:
        """The labels the power series do carry (when it has any without the nodes label), else that there
        are none of that family's at all."""
        selector = f'{{__name__="{self._family.power.metric}"{self._also()}}}'
        span = (t_from_ns - LEAD_NS, t_to_ns + MARGIN_NS)
        found = self._read_series(selector, *span)
        labels = sorted({k for r in found for k in r.labels if k != "__name__"})
        if labels:
            return f" (its series carry: {', '.join(labels)}; see --nodes-label)"
        if self._series_matchers and self._read_series(selector.replace(self._also(), ""), *span):
            return f" (the engine holds them, but none match --series-matchers {self._series_matchers})"
        family = self._family.name
        # a span a day or an hour off (a local time read as UTC) is as likely as another family's series
        return (
            " (none at all in the span: is that span, in UTC, when the engine sampled them, and does it hold"
            f" the --metrics {family} family's series?)"
        )

    def node_input(self, node: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
        f = self._family
        gpus = self._gpus(node, t_from_ns, t_to_ns)
        keys = [key for key, _ in gpus]
        info = self._info(node, t_from_ns, t_to_ns)
        tracks = [track for _, track in gpus]
        mine = functools.partial(self._mine, node=node, t_from_ns=t_from_ns, t_to_ns=t_to_ns)
        span = (t_from_ns, t_to_ns)
        t_ns, used, name = memory_used(f, mine, self._one, self._by_gpu, gpus=len(gpus), span_ns=span)
        self._memory_used[node] = name
        read = RawSeries({"__name__": self._memory_used[node], self._label: node}, t_ns, used)
        refuse_outside([read], 0.0, math.inf, "memory in use is never negative")
        cache, self._page_cache[node] = page_cache(f, mine, self._one, t_ns, self._memory_used[node])
        nominal = nominal_interval(t_ns, self._said_interval(node, t_from_ns, t_to_ns))
        memory = MemTrack.from_arrays(t_ns, np.zeros(len(t_ns), np.int64), nominal, used, cache)
        models = [labels["memory_model"] for labels in info.values() if labels.get("memory_model")]
        model = models[0] if models else None
        if model is None:
            model = "discrete" if self._memory_used[node] == f.gpu_memory_name() else "unknown"
        names = {key: info.get(key, {}).get(f.name_label) for key in keys}
        return NodeInput(
            node=node,
            gpus=tracks,
            gpu_uuids=keys,
            memory=memory,
            clock=NodeClock(summary=None, method="tsdb", rate_ppm=None),
            memory_model=model,
            hardware={"gpus": [{"uuid": key, "name": name} for key, name in names.items()]},
            domains=[
                *self._domains(node, t_from_ns, t_to_ns, tracks),
                *self._meter_domains(node, t_from_ns, t_to_ns, tracks),
            ],
            signals=self._signals(node, t_from_ns, t_to_ns, keys),
        )

    def engine_input(self, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
        if self._engine_matchers is None:
            return None
        return engine_samples(self._reader, self._engine_matchers, t_from_ns, t_to_ns, ENGINE_MARGIN_NS)

    def _mine(self, s: Series | None, node: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]:
        if s is None:
            return []
        return [r for r in self.series(s, t_from_ns, t_to_ns, node) if r.labels.get(self._label) == node]

    def _gpu_key(self, r: RawSeries) -> str:
        return r.labels.get(self._family.gpu_label) or r.labels.get("gpu") or ""

    def _one(self, found: Sequence[RawSeries], what: str) -> RawSeries:
        return single(found, what, self._label, self._pick)

    def _by_gpu(self, found: Sequence[RawSeries]) -> dict[str, RawSeries]:
        """Per GPU, its one series (label sets one after another merged; two at once refused)."""
        return {
            key: single(p, f"GPU {key!r}", self._label, self._pick)
            for key, p in self._gpu_parts(found).items()
        }

    def _gpu_parts(self, found: Sequence[RawSeries]) -> dict[str, list[RawSeries]]:
        parts: dict[str, list[RawSeries]] = {}
        for r in found:
            parts.setdefault(self._gpu_key(r), []).append(r)
        return parts

    def _gpus(self, node: str, t_from_ns: int, t_to_ns: int) -> list[tuple[str, GpuTrack]]:
        f = self._family
        found = self._mine(f.power, node, t_from_ns, t_to_ns)
        check_one_machine(f, self._label, node, found)  # before any of its series is refused as twice held
        power = self._by_gpu(found)
        energy = self._by_gpu(self._mine(f.energy, node, t_from_ns, t_to_ns))
        util = self._first_by_gpu(f.util, node, t_from_ns, t_to_ns, self._by_gpu, wanted=set(power))
        return gpu_tracks(power, energy, util, self._said_interval(node, t_from_ns, t_to_ns))

    def _said_interval(self, node: str, t_from_ns: int, t_to_ns: int) -> RawSeries | None:
        """The node's agent's own sampling interval per sample (the sparkwatch family), or None."""
        found = self._mine(self._family.sample_interval, node, t_from_ns, t_to_ns)
        return single(found, "the sampling interval", self._label, self._pick) if found else None

    def _domains(
        self, node: str, t_from_ns: int, t_to_ns: int, gpus: Sequence[GpuTrack]
    ) -> list[DomainInput]:
        """The node's power channels beside its GPUs (the agent's hwmon domains): channels.py."""
        f = self._family
        name_label = f.sensor_labels[0]
        parts = {
            part: self._by_label(s, name_label, node, t_from_ns, t_to_ns)
            for part, s in (("power", f.sensor_power), ("energy", f.sensor_energy))
        }
        labels, said = [self._label, *f.sensor_labels[1:]], self._said_interval(node, t_from_ns, t_to_ns)
        return sensor_domains(parts["power"], parts["energy"], labels, gpus, said)

    def _meter_domains(
        self, node: str, t_from_ns: int, t_to_ns: int, gpus: Sequence[GpuTrack]
    ) -> list[DomainInput]:
        """The node's wall meters as the coordinator remote-wrote their readings: channels.py."""
        f = self._family
        powers, intervals, failed = (
            self._by_label(s, f.meter_labels[0], node, t_from_ns, t_to_ns)
            for s in (f.meter_power, f.meter_interval, f.meter_failed_polls)
        )
        return meter_domains(powers, intervals, (self._label, f.meter_labels[1]), gpus, failed)

    def _by_label(
        self, s: Series | None, label: str, node: str, t_from_ns: int, t_to_ns: int
    ) -> dict[str, list[RawSeries]]:
        """The node's series of ``s`` that have samples, by their value of ``label``."""
        found: dict[str, list[RawSeries]] = {}
        for r in self._mine(s, node, t_from_ns, t_to_ns):
            if len(r.t_ns):
                found.setdefault(r.labels.get(label, ""), []).append(r)
        return found

    def _signals(self, node: str, t_from_ns: int, t_to_ns: int, keys: Sequence[str]) -> list[SignalTrack]:
        """Each GPU's clock signals, where the family maps them and the engine holds them (core.throttle:
        no series, no flags; no maximum SM clock, no clock ratio)."""
        s = self._family.signals
        if s is None:
            return []
        span = (node, t_from_ns, t_to_ns)
        clock, temperature, tops = (  # a GPU's series in several label sets are merged, never refused
            self._merged_by_gpu(self._mine(x, *span)) for x in (s.sm_clock, s.temperature, s.max_sm_clock)
        )
        masks = self._first_by_gpu(s.reason_masks, *span, self._merged_by_gpu, wanted=set(keys))
        flags = self._flags(s.reason_flags, *span) if not masks else {}
        out = []
        for key in keys:
            values = {
                "sm_clock": clock.get(key),
                "temperature": temperature.get(key),
                "reasons": masks.get(key),
            }
            track = signal_track(key, values, flags.get(key, {}), top_hz(tops.get(key)))
            if track is not None:
                out.append(track)
        return out

    def _flags(
        self, flags: ReasonFlags | None, node: str, t_from_ns: int, t_to_ns: int
    ) -> dict[str, dict[int, RawSeries]]:
        """Per GPU, each reason's 0/1 series by its bit (a reason the mapping does not name is left out; one
        in several label sets, merged)."""
        if flags is None:
            return {}
        parts: dict[str, dict[int, list[RawSeries]]] = {}
        for r in self._mine(Series(flags.metric), node, t_from_ns, t_to_ns):
            bit = flags.bits.get(r.labels.get(flags.label, ""))
            if bit is not None:
                parts.setdefault(self._gpu_key(r), {}).setdefault(bit, []).append(r)
        return {key: {bit: merged(p) for bit, p in bits.items()} for key, bits in parts.items()}

    def _first_by_gpu(
        self,
        candidates: Sequence[Series],
        node: str,
        t_from_ns: int,
        t_to_ns: int,
        by_gpu: Callable[[Sequence[RawSeries]], dict[str, RawSeries]],
        *,
        wanted: set[str],
    ) -> dict[str, RawSeries]:
        """Per GPU, the first of ``candidates`` it has series of (none: not in it); the later candidates are
        asked only while a GPU of ``wanted`` has none. A GPU with only the fallback (dcgm's SM activity on
        one of its GPUs, no utilisation there) took the node's first: its gate read no sample."""
        out: dict[str, RawSeries] = {}
        for candidate in candidates:
            for key, series in by_gpu(self._mine(candidate, node, t_from_ns, t_to_ns)).items():
                out.setdefault(key, series)
            if out and wanted <= out.keys():
                break
        return out

    def _merged_by_gpu(self, found: Sequence[RawSeries]) -> dict[str, RawSeries]:
        return {key: merged(p) for key, p in self._gpu_parts(found).items()}

    def _info(self, node: str, t_from_ns: int, t_to_ns: int) -> dict[str, dict[str, str]]:
        """Each GPU's identity labels (from the info series, else from the power series)."""
        found = self._mine(self._family.info, node, t_from_ns, t_to_ns)
        found += self._mine(self._family.power, node, t_from_ns, t_to_ns)
        out: dict[str, dict[str, str]] = {}
        for r in found:
            out.setdefault(self._gpu_key(r), r.labels)
        return out
