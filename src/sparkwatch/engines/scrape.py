"""One ``/metrics`` page to our fields, by the family's table (families.py).

The page is parsed by ``prometheus_client``'s own text parser (the library both engines expose through),
so escaping, label order and exponent forms are the library's business, not ours. A value no engine can
mean (a negative count, a count above 2**53, a ratio above 1: defaults.py) is left out of the scrape as if
the page lacked its series, and named in ``Scrape.refused``: the store would refuse it, and one such value
spoiled every sum it entered (two ranks of 1e308 overflowed ``fsum``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from sparkwatch.defaults import engine_value_max
from sparkwatch.engines.families import Family, Series, family_of

T = TypeVar("T")

#: Raw series names kept of an engine with no table: enough to write one, not a copy of the page.
MAX_UNKNOWN_NAMES = 64
_SUFFIXES_SKIPPED = ("_created",)  # prometheus_client's creation timestamps: never a value of ours

Labelled = list[tuple[Mapping[str, str], float]]


class ScrapeError(ValueError):
    """The page is not Prometheus text exposition (the message says where it broke)."""


@dataclass(frozen=True, slots=True)
class Scrape:
    family: str | None  # vllm, sglang, or None: an engine with no table
    values: dict[str, float] = field(default_factory=dict)  # our field → the combined value
    sources: dict[str, str] = field(default_factory=dict)  # our field → the engine's series it came from
    unknown: tuple[str, ...] = ()  # the raw series names of an engine with no table
    refused: dict[str, float] = field(default_factory=dict)  # a series left out → its value out of bounds


def samples_by_name(text: str) -> dict[str, Labelled]:
    """Every finite sample, by its exposed name (``vllm:prompt_tokens_total``), ``_created`` left out."""
    out: dict[str, Labelled] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(_SUFFIXES_SKIPPED) or not math.isfinite(sample.value):
                    continue
                out.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:  # the parser's ways of saying "not this format"
        raise ScrapeError(f"not Prometheus text format: {' '.join(str(exc).split())[:200]}") from None
    return out


def read_page(text: str) -> Scrape:
    """The page's values by our fields, or, for an engine without a table, its series names."""
    samples = samples_by_name(text)
    family = family_of(set(samples))
    if family is None:
        return Scrape(None, unknown=tuple(sorted(samples)[:MAX_UNKNOWN_NAMES]))
    values, sources = {}, {}
    refused: dict[str, float] = {}
    for series in family.series:
        found = _combined(family, series, samples, refused)
        if found is not None:
            values[series.field], sources[series.field] = found
    return Scrape(family.name, values, sources, refused=refused)


def _combined(
    family: Family, series: Series, samples: dict[str, Labelled], refused: dict[str, float]
) -> tuple[float, str] | None:
    """The first of the series' names the page has, its rank series combined; None when it has none. A name
    with a value read, or a combined value, outside the field's bounds is passed over as if the page lacked
    it (never a partial sum over the other ranks), the value noted in ``refused``."""
    most = engine_value_max(series.field)
    for name in series.names:
        kept = primaries(samples.get(name, ()), family)
        if not kept:
            continue
        bad = next((v for v in kept if not 0 <= v <= most), None)  # bounded inputs: fsum cannot overflow
        value = _combine(series, kept) if bad is None else math.nan
        if not 0 <= value <= most:  # a value read out of bounds, or a sum over ranks beyond them
            refused[name] = value if bad is None else bad
            continue
        if series.zero_is_absent and value == 0:
            return None
        return value, name
    return None


def _combine(series: Series, kept: list[float]) -> float:
    """The rank series' values as one, as the table's ``combine`` says."""
    if series.combine == "sum":
        return math.fsum(kept)
    if series.combine == "max":
        return max(kept)
    return math.fsum(kept) / len(kept)


def primaries(labelled: Iterable[tuple[Mapping[str, str], T]], family: Family) -> list[T]:
    """The items whose series are read: per set of the other labels (a data-parallel rank, a split such as
    SGLang's ``is_streaming``), the one of the lowest replica ranks, the scheduler that logs for its group
    (rank 0; with SGLang's DP attention, dp rank k's leader has ``tp_rank`` k x the attention TP size); a
    series with a non-empty breakdown label (SGLang's ``priority``: its total has ``priority=""``) is a
    part of another and never read."""
    best: dict[tuple[tuple[str, str], ...], tuple[tuple[int, ...], T]] = {}
    for labels, item in labelled:
        if any(labels.get(label, "") for label in family.breakdown_labels):
            continue
        group = tuple(sorted((k, v) for k, v in labels.items() if k not in family.replica_labels))
        rank = tuple(_rank(labels.get(label, "0")) for label in family.replica_labels)
        if group not in best or rank < best[group][0]:
            best[group] = (rank, item)
    return [item for _, item in best.values()]


def _rank(value: str) -> int:
    """A rank label's number (one that is not a number sorts last: never preferred to a real rank 0)."""
    return int(value) if value.isdigit() else 1 << 30
