"""The serving engine's own series (vLLM, SGLang) out of a TSDB that scraped it, as the core's
:class:`EngineSamples`: what the coordinator's ``[engine]`` scrape stores, read from a fleet's engine.

The same tables (engines/families.py) map the same series to the same fields, combined the same way at
each scrape (sums over ranks, the fullest rank, only rank "0" of the replica labels, the first name of a
field the scrape has). The series are those the user's label matchers select (``--engine-metrics
'{job="vllm"}'``): a fleet's engine holds many serving engines, and which one served the benchmark is not
something sparkwatch can guess. The matchers must select one target: two targets' scrapes are not at the
same times, and summing their counters at each other's scrapes would invent values.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from sparkwatch.core.engine import COUNTERS, GAUGES, EngineSamples
from sparkwatch.core.tracks import F64, GAP_INTERVALS
from sparkwatch.engines.families import FAMILIES, Combine, Family, Series
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.align import union_times, values_at
from sparkwatch.sources.prometheus.raw import RawSeries, Reader

#: The labels that tell one scrape target from another (the scrape's own; remote write keeps them).
TARGET_LABELS = ("job", "instance")
#: Targets named in the error for matchers that select several.
TARGETS_SHOWN = 5
#: A field's rank series combined at one scrape (families.py's ``combine``), unknown ranks left out.
COMBINE: Mapping[Combine, Callable[..., Any]] = MappingProxyType(
    {"sum": np.nansum, "max": np.nanmax, "mean": np.nanmean}
)


def engine_samples(
    reader: Reader, matchers: str, t_from_ns: int, t_to_ns: int, margin_ns: int
) -> EngineSamples | None:
    """The engine's scrapes around the span ``t_from_ns`` to ``t_to_ns`` (``margin_ns`` beyond each edge;
    ``matchers``: the label matchers inside a selector's braces), or None when it has none inside the span;
    SourceError (one line) when the matchers select no series of a known engine, or several targets'."""
    found: dict[str, list[RawSeries]] = {}
    for family in FAMILIES:
        names = "|".join(sorted({name for s in family.series for name in s.names}))
        selector = f'{{__name__=~"{names}",{matchers}}}'
        read = reader.read(selector, t_from_ns - margin_ns, t_to_ns + margin_ns)
        found[family.name] = [r for r in read if len(r.t_ns)]
    family = max(FAMILIES, key=lambda f: len(found[f.name]))
    series = found[family.name]
    if not series:
        raise SourceError(
            f"no vLLM or SGLang series match {{{matchers}}} from {(t_from_ns - margin_ns) / 1e9:.3f} to"
            f" {(t_to_ns + margin_ns) / 1e9:.3f} (--engine-metrics)"
        )
    _one_target(series, matchers)
    t = union_times([r.t_ns for r in series])
    if not np.any((t >= t_from_ns) & (t <= t_to_ns)):
        return None
    values: dict[str, F64] = {f: np.full(len(t), np.nan) for f in (*GAUGES, *COUNTERS)}
    sources: dict[str, str] = {}
    for s in family.series:
        values[s.field], source = _field(family, s, series, t)
        if source is not None:
            sources[s.field] = source
    spacing = np.diff(t)
    interval_s = float(np.median(spacing)) / 1e9 if len(spacing) else 1.0
    return EngineSamples(
        family=family.name,
        t_ns=t,
        gap_ns=round(GAP_INTERVALS * interval_s * 1e9),
        values=values,
        sources=sources,
        unknown=(),
        errors=(),
        present=frozenset(f for f, column in values.items() if np.isfinite(column).any()),
    )


def _one_target(series: list[RawSeries], matchers: str) -> None:
    targets = sorted({tuple(r.labels.get(k, "") for k in TARGET_LABELS) for r in series})
    if len(targets) > 1:
        shown = ", ".join(
            "{" + ",".join(f'{k}="{v}"' for k, v in zip(TARGET_LABELS, target, strict=True) if v) + "}"
            for target in targets[:TARGETS_SHOWN]
        )
        more = ", …" if len(targets) > TARGETS_SHOWN else ""
        raise SourceError(
            f"{{{matchers}}} selects the series of {len(targets)} scrape targets ({shown}{more}):"
            " --engine-metrics must name the one engine that served the benchmark"
        )


def _field(family: Family, s: Series, found: list[RawSeries], t: np.ndarray) -> tuple[F64, str | None]:
    """One field at every scrape: at each, the first of its names the scrape has, its ranks combined as
    the table says (scrape.py's rule for one page, here a column at a time); the name of the latest."""
    out = np.full(len(t), np.nan)
    decided = np.zeros(len(t), dtype=bool)
    name_at = np.full(len(t), -1)
    for k, name in enumerate(s.names):
        ranks = [
            values_at(t, r)
            for r in found
            if r.labels.get("__name__") == name
            and all(r.labels.get(label, "0") == "0" for label in family.replica_labels)
        ]
        if not ranks:
            continue
        stacked = np.vstack(ranks)
        has = np.isfinite(stacked).any(axis=0) & ~decided
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: masked out by ``has``
            combined: F64 = COMBINE[s.combine](stacked, axis=0)
        out[has] = combined[has]
        name_at[has] = k
        decided |= has
    if s.zero_is_absent:
        out[out == 0] = np.nan
    known = np.flatnonzero(np.isfinite(out))  # a zero that means "not in use" names no series
    return out, s.names[name_at[known[-1]]] if len(known) else None
