"""One ``/metrics`` page to our fields, by the family's table (families.py).

The page is parsed by ``prometheus_client``'s own text parser (the library both engines expose through),
so escaping, label order and exponent forms are the library's business, not ours."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

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
    for series in family.series:
        found = _combined(family, series, samples)
        if found is not None:
            values[series.field], sources[series.field] = found
    return Scrape(family.name, values, sources)


def _combined(family: Family, series: Series, samples: dict[str, Labelled]) -> tuple[float, str] | None:
    """The first of the series' names the page has, its rank series combined; None when it has none."""
    for name in series.names:
        kept = primaries(samples.get(name, ()), family)
        if not kept:
            continue
        if series.combine == "sum":
            value = math.fsum(kept)
        elif series.combine == "max":
            value = max(kept)
        else:
            value = math.fsum(kept) / len(kept)
        if series.zero_is_absent and value == 0:
            return None
        return value, name
    return None


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
