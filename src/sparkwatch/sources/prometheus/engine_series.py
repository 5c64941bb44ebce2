"""The serving engine's own series (vLLM, SGLang) out of a TSDB that scraped it, as the core's
:class:`EngineSamples`: what the coordinator's ``[engine]`` scrape stores, read from a fleet's engine.

The same tables (engines/families.py) map the same series to the same fields, combined the same way at
each scrape (sums over ranks, the fullest rank, each group's lowest of the replica labels, never a
per-priority part, the first name of a field the scrape has). The series are those the user's label
matchers select (``--engine-metrics '{job="vllm"}'``): a fleet's engine holds many serving engines, and
which one served the benchmark is not something sparkwatch can guess. The matchers must select one engine:
two series of one name and rank at the same time (two pods, two scrapers without deduplication) would be
summed into a count neither had, and are refused; one after the other (a pod restarted under a new
address) are one engine's life, its counters starting again (the core reads no span across that drop).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from sparkwatch.core.engine import COUNTERS, GAUGES, EngineSamples
from sparkwatch.core.failures import Failures
from sparkwatch.core.intervals import seen_interval_s
from sparkwatch.core.stamps import utc_stamp
from sparkwatch.core.tracks import F64, GAP_INTERVALS, I64
from sparkwatch.defaults import engine_value_max
from sparkwatch.engines.families import FAMILIES, Combine, Family, Series
from sparkwatch.engines.scrape import primaries
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.align import first_overlap, told_apart, union_times, values_at
from sparkwatch.sources.prometheus.raw import RawSeries, Reader

#: A field's rank series combined at one scrape (families.py's ``combine``), unknown ranks left out.
COMBINE: Mapping[Combine, Callable[[F64], F64]] = MappingProxyType(
    {
        "sum": lambda ranks: np.nansum(ranks, axis=0),
        "max": lambda ranks: np.nanmax(ranks, axis=0),
        "mean": lambda ranks: np.nanmean(ranks, axis=0),
    }
)
ONE_ENGINE = "--engine-metrics must name the one engine that served the benchmark"


def engine_samples(
    reader: Reader, matchers: str, t_from_ns: int, t_to_ns: int, margin_ns: int
) -> EngineSamples | None:
    """The engine's scrapes around the span ``t_from_ns`` to ``t_to_ns`` (``margin_ns`` beyond each edge;
    ``matchers``: the label matchers inside a selector's braces), or None when it has none inside the span;
    SourceError (one line) when the matchers select no series of a known engine, or several engines'."""
    found = {f.name: _read(reader, f, matchers, t_from_ns - margin_ns, t_to_ns + margin_ns) for f in FAMILIES}
    families = [f for f in FAMILIES if found[f.name]]
    if not families:
        raise SourceError(
            f"no vLLM or SGLang series match {{{matchers}}} from {utc_stamp(t_from_ns - margin_ns)} to"
            f" {utc_stamp(t_to_ns + margin_ns)} (--engine-metrics)"
        )
    if len(families) > 1:
        raise SourceError(f"{{{matchers}}} selects both vLLM and SGLang series: {ONE_ENGINE}")
    family = families[0]
    series = found[family.name]
    _one_engine(family, series, matchers)
    t = union_times([r.t_ns for r in series])
    if not np.any((t >= t_from_ns) & (t <= t_to_ns)):
        return None
    values: dict[str, F64] = {f: np.full(len(t), np.nan) for f in (*GAUGES, *COUNTERS)}
    sources: dict[str, str] = {}
    for s in family.series:
        values[s.field], source = _field(family, s, series, t)
        if source is not None:
            sources[s.field] = source
    interval_s = seen_interval_s(t, np.zeros(len(t), dtype=np.int64)) or 1.0
    return EngineSamples(
        family=family.name,
        t_ns=t,
        gap_ns=round(GAP_INTERVALS * interval_s * 1e9),
        values=values,
        sources=sources,
        unknown=(),
        errors=Failures(),
        present=frozenset(f for f, column in values.items() if np.isfinite(column).any()),
    )


def _read(reader: Reader, family: Family, matchers: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]:
    """The family's table series the matchers select, with samples (only those: matchers may add series
    of their own, ``a or b`` in VictoriaMetrics); the engine's refusal says which flag it was about."""
    names = sorted({name for s in family.series for name in s.names})
    selector = f'{{__name__=~"{"|".join(names)}",{matchers}}}'
    try:
        read = reader.read(selector, t_from_ns, t_to_ns)
    except SourceError as exc:
        raise SourceError(f"--engine-metrics {{{matchers}}}: {exc}") from None
    wanted = set(names)
    return [
        r
        for r in read
        if len(r.t_ns)
        and r.labels.get("__name__") in wanted
        and not any(r.labels.get(label) for label in family.breakdown_labels)  # a part, beside its total
    ]


def _one_engine(family: Family, series: list[RawSeries], matchers: str) -> None:
    """SourceError when two series of one name and one rank have samples over the same time."""
    ranks = (*family.rank_labels, *family.replica_labels)
    groups: dict[tuple[str, ...], list[RawSeries]] = {}
    for r in series:
        key = (r.labels.get("__name__", ""), *(r.labels.get(label, "") for label in ranks))
        groups.setdefault(key, []).append(r)
    for (name, *_), found in groups.items():
        pair = first_overlap(found)
        if pair is not None:
            a, b = told_apart(*pair)
            raise SourceError(
                f"{{{matchers}}} selects two engines' {name} at once ({a} and {b}): {ONE_ENGINE}"
            )


def _field(family: Family, s: Series, found: list[RawSeries], t: I64) -> tuple[F64, str | None]:
    """One field at every scrape: at each, the first of its names the scrape has, its ranks combined as
    the table says (scrape.py's rule for one page, here a column at a time); the name of the latest."""
    out = np.full(len(t), np.nan)
    decided = np.zeros(len(t), dtype=bool)
    name_at = np.full(len(t), -1)
    for k, name in enumerate(s.names):
        named = [(r.labels, r) for r in found if r.labels.get("__name__") == name]
        ranks = [values_at(t, r) for r in primaries(named, family)]
        if not ranks:
            continue
        stacked = np.vstack(ranks)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: masked out by ``has``
            combined = COMBINE[s.combine](stacked)
        # a value no engine can mean (defaults.engine_value_max), or ranks that add up past it: at that
        # scrape the name is left out as the coordinator's scrape leaves it out (engines/scrape.py)
        top = engine_value_max(s.field)
        with np.errstate(invalid="ignore"):
            refused = ((stacked < 0) | (stacked > top)).any(axis=0) | (combined > top)
        has = np.isfinite(stacked).any(axis=0) & ~decided & ~refused
        out[has] = combined[has]
        name_at[has] = k
        decided |= has
    if s.zero_is_absent:
        out[out == 0] = np.nan
    known = np.flatnonzero(np.isfinite(out))  # a zero that means "not in use" names no series
    return out, s.names[name_at[known[-1]]] if len(known) else None
