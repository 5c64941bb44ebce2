"""What the serving engine was doing in each window and in the scope, from its scraped ``/metrics``.

Gauges (requests running and waiting, KV-cache usage) are read as they were during the span: the scrapes
inside it, plus the one just before its start (a gauge holds its value between scrapes; one older than
``GAP_INTERVALS`` scrapes, or with a failed scrape after it, is a gap, not a value). Counters (tokens,
prefix-cache queries and hits, preemptions, speculative drafts) are interpolated at the span's edges; an
edge with no scrape on both sides within the gap limit is unknown, and so is a span across which the
counter went down: the stored value is the sum over the engine's ranks, so a restart of one rank cannot be
told from the others' totals (counting the new sum from zero, as Prometheus' per-series ``increase``
would, would add every other rank's lifetime count).
Several pieces (a scope) add their counter deltas and pool their gauge scrapes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from sparkwatch.core.engine_check import generated_range, token_check
from sparkwatch.core.failures import Failures
from sparkwatch.core.rounding import rounded as _r
from sparkwatch.core.tracks import F64, GAP_INTERVALS, I64

GAUGES = (
    "running_requests",
    "waiting_requests",
    "kv_cache_usage_ratio",
    "prefix_cache_hit_ratio",
    "generation_tokens_per_s",
    "spec_accept_length",
    "spec_accept_ratio",
)
COUNTERS = (
    "prompt_tokens",
    "generation_tokens",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)
NO_SERIES = "the engine's /metrics has no series for it"
NO_GAUGE = "no engine scrape inside the span or just before it"
FAILED_GAUGE = (
    "the engine's scrapes failed in the span (the scope's errors say why): no value is carried over"
)
NO_SCRAPE = "no engine scrape succeeded (the scope's errors say why)"
NO_EDGES = (
    "no engine scrapes around both edges of the span (a failed or missing scrape), or the counter went down"
    " between them (a restart of the engine or of one of its ranks)"
)
NO_SPEC = "the engine reports no speculative decoding"


@dataclass(frozen=True, slots=True)
class EngineSamples:
    """One engine family's scrapes, in time order: each field a column (NaN: not in that scrape)."""

    family: str | None
    t_ns: I64
    gap_ns: int  # GAP_INTERVALS × the scrape interval
    values: dict[str, F64]
    sources: dict[str, str]  # field → the engine's series name (the latest scrape's)
    unknown: tuple[str, ...]  # raw series names of an engine with no table
    errors: Failures  # why scrapes failed in the span
    present: frozenset[str] = frozenset()  # the fields any scrape had
    failed_ns: I64 = field(default_factory=lambda: np.empty(0, np.int64))  # every failed scrape, in order

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[tuple[int, str | None, float, Mapping[str, float], Mapping[str, str], Sequence[str]]],
        errors: Failures,
        span: tuple[int, int],
        *,
        failed_ns: Sequence[int] = (),
    ) -> EngineSamples:
        """Stored scrapes (t_ns, family, interval_s, fields, sources, unknown) of the family most scrapes
        inside ``span`` came from (another engine on the same URL before or after is left out)."""
        inside = [r[1] for r in rows if span[0] <= r[0] <= span[1]] or [r[1] for r in rows]
        family = Counter(inside).most_common(1)[0][0] if inside else None
        mine = sorted((r for r in rows if r[1] == family), key=lambda r: r[0])
        interval_s = float(np.median([r[2] for r in mine])) if mine else 1.0
        sources: dict[str, str] = {}
        for r in mine:
            sources.update(r[4])
        values = {f: np.array([r[3].get(f, np.nan) for r in mine], np.float64) for f in (*GAUGES, *COUNTERS)}
        return cls(
            family=family,
            t_ns=np.array([r[0] for r in mine], dtype=np.int64),
            gap_ns=round(GAP_INTERVALS * interval_s * 1e9),
            values=values,
            sources=sources,
            unknown=tuple(sorted({n for r in mine for n in r[5]})),
            errors=errors,
            present=frozenset(f for f, column in values.items() if np.isfinite(column).any()),
            failed_ns=np.array(sorted(failed_ns), dtype=np.int64),
        )


@dataclass(frozen=True, slots=True)
class Gauge:
    total: list[float]  # sum of the values read per span
    count: list[float]
    top: list[float]  # NaN where none


@dataclass(frozen=True, slots=True)
class Spans:
    """Each span's figures, by column (lists: a block is made per window in Python): gauges pooled,
    counter deltas (NaN: unknown)."""

    seconds: list[float]
    scrapes: list[int]
    gauges: dict[str, Gauge]
    deltas: dict[str, list[float]]
    failed: list[int]  # scrapes that failed inside the span, or since the last good one before it


def read_spans(s: EngineSamples, starts: I64, ends: I64) -> Spans:
    """Every span [start, end) at once (vectorised: an export may have 100 000 windows)."""
    i0, i1 = np.searchsorted(s.t_ns, starts, "left"), np.searchsorted(s.t_ns, ends, "left")
    # failed scrapes since the last good one before the span (a held value they forbid) and inside it
    since = np.where(i0 > 0, s.t_ns[np.clip(i0 - 1, 0, None)], starts) if len(s.t_ns) else starts
    failed = np.searchsorted(s.failed_ns, ends, "left") - np.searchsorted(s.failed_ns, since, "right")
    return Spans(
        seconds=((ends - starts).astype(np.float64) / 1e9).tolist(),
        scrapes=(i1 - i0).tolist(),
        gauges={f: _gauge(s.t_ns, s.values[f], (starts, ends), s.gap_ns, s.failed_ns) for f in GAUGES},
        deltas={f: _delta(s.t_ns, s.values[f], starts, ends, s.gap_ns).tolist() for f in COUNTERS},
        failed=failed.tolist(),
    )


def _gauge(t_ns: I64, v: F64, span: tuple[I64, I64], gap_ns: int, failed_ns: I64) -> Gauge:
    """Each span's reads of one gauge: its scrapes inside, and the one before its start where that is
    held (within the gap limit, and no scrape failed between it and the span's first own read: a value
    is not carried across scrapes that failed)."""
    starts, ends = span
    known = np.isfinite(v)
    t, v = t_ns[known], v[known]
    i0, i1 = np.searchsorted(t, starts, "left"), np.searchsorted(t, ends, "left")
    before = np.clip(i0 - 1, 0, None)
    held = (i0 > 0) & (starts - t[before] <= gap_ns) if len(t) else np.zeros(len(starts), bool)
    if len(t) and len(failed_ns):
        first_read = np.where(i0 < i1, t[np.clip(i0, 0, len(t) - 1)], ends)
        between = np.searchsorted(failed_ns, first_read, "left") - np.searchsorted(
            failed_ns, t[before], "right"
        )
        held &= between == 0
    lo = i0 - held.astype(np.int64)
    count = (i1 - lo).astype(np.float64)
    total, top = np.zeros(len(starts)), np.full(len(starts), np.nan)
    some = count > 0
    if some.any():
        # each span's own values summed, not a difference of running sums: one huge value elsewhere would
        # swallow every smaller one after it
        padded = np.append(v, np.nan)
        pairs = np.column_stack([lo[some], i1[some]]).ravel()
        total[some] = np.add.reduceat(padded, pairs)[::2]
        top[some] = np.maximum.reduceat(padded, pairs)[::2]
    return Gauge(total.tolist(), count.tolist(), top.tolist())


def _delta(t_ns: I64, v: F64, starts: I64, ends: I64, gap_ns: int) -> F64:
    known = np.isfinite(v)
    t, v = t_ns[known], v[known]
    if len(t) == 0:
        return np.full(len(starts), np.nan)
    drop = np.flatnonzero(np.diff(v) < 0)  # between scrapes i and i + 1 the (summed) counter went down
    # a span is spoiled by a drop whose interval (t[i], t[i + 1]] reaches inside it
    spoiled = np.searchsorted(t[drop], ends, "left") - np.searchsorted(t[drop + 1], starts, "right") > 0
    at_start, at_end = (np.interp(x, t, v) for x in (starts, ends))
    known = _bracketed(t, starts, gap_ns) & _bracketed(t, ends, gap_ns) & ~spoiled
    return np.where(known, at_end - at_start, np.nan)


def _bracketed(t: I64, x: I64, gap_ns: int) -> npt.NDArray[np.bool_]:
    """Whether each x lies between two scrapes no further apart than the gap limit (or on one)."""
    j = np.searchsorted(t, x, "right")
    on = (j > 0) & (t[np.clip(j - 1, 0, None)] == x)
    inside = (j > 0) & (j < len(t))
    width = t[np.clip(j, 0, len(t) - 1)] - t[np.clip(j - 1, 0, None)]
    bracketed: npt.NDArray[np.bool_] = on | (inside & (width <= gap_ns))
    return bracketed


def pooled(spans: Spans) -> Spans:
    """The pieces of a scope as one span: seconds, scrapes and deltas added, gauge reads pooled."""

    def one(values: list[float], how: str = "sum") -> list[float]:
        if how == "max":
            return [max((v for v in values if math.isfinite(v)), default=math.nan)]
        return [math.fsum(values)]

    return Spans(
        seconds=one(spans.seconds),
        scrapes=[sum(spans.scrapes)],
        gauges={f: Gauge(one(g.total), one(g.count), one(g.top, "max")) for f, g in spans.gauges.items()},
        deltas={f: one(d) for f, d in spans.deltas.items()},
        failed=[sum(spans.failed)],
    )


def block(s: EngineSamples, spans: Spans, k: int) -> dict[str, Any]:
    """Span ``k`` as the export's ``engine`` block: figures, the series each came from, why any is null."""
    r = _Reader(s, spans, k)
    seconds = float(spans.seconds[k])
    prompt = r.delta("prompt_tokens", "prompt_tokens")
    generated = r.delta("generation_tokens", "generation_tokens")
    out: dict[str, Any] = {
        "family": s.family,
        "scrapes": int(spans.scrapes[k]),
        "running_requests": {
            "mean": _r(r.gauge("running_requests", "running_requests", "mean")),
            "max": _r(r.gauge("running_requests", "running_requests", "max")),
        },
        "waiting_requests": {
            "mean": _r(r.gauge("waiting_requests", "waiting_requests", "mean")),
            "max": _r(r.gauge("waiting_requests", "waiting_requests", "max")),
        },
        "kv_cache_usage_ratio_max": _r(r.gauge("kv_cache_usage_ratio", "kv_cache_usage_ratio_max", "max"), 4),
        "prefix_cache_hit_ratio": r.hit_ratio(),
        "prompt_tokens": _r(prompt, 1),
        "generation_tokens": _r(generated, 1),
        "prompt_tokens_per_s": _per_s(prompt, seconds, "prompt_tokens_per_s", r.reasons, "prompt_tokens"),
        "generation_tokens_per_s": _per_s(
            generated, seconds, "generation_tokens_per_s", r.reasons, "generation_tokens"
        ),
        "preemptions": _r(r.delta("preemptions", "preemptions"), 1),
        **r.speculative(),
    }
    if out["generation_tokens_per_s"] is None and _has(s, "generation_tokens_per_s"):
        rate = r.gauge("generation_tokens_per_s", "generation_tokens_per_s", "mean")  # the engine's own
        if rate is not None:
            out["generation_tokens_per_s"] = _r(rate)
            r.reasons.pop("generation_tokens_per_s", None)
    out["sources"] = r.used
    out["null_reasons"] = {key: why for key, why in r.reasons.items() if _is_null(out, key)}
    return out


@dataclass(slots=True)
class _Reader:
    """One span's figures, noting which series each came from (``used``) and why one is null."""

    s: EngineSamples
    spans: Spans
    k: int
    used: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def gauge(self, name: str, key: str, what: str) -> float | None:
        g = self.spans.gauges[name]
        value = (
            (g.total[self.k] / g.count[self.k] if what == "mean" else g.top[self.k])
            if g.count[self.k]
            else None
        )
        return self._noted(value, key, name, FAILED_GAUGE if self.spans.failed[self.k] else NO_GAUGE)

    def delta(self, name: str, key: str) -> float | None:
        value = self.spans.deltas[name][self.k]
        return self._noted(value if math.isfinite(value) else None, key, name, NO_EDGES)

    def _noted(self, value: float | None, key: str, name: str, why: str) -> float | None:
        if value is not None:
            self.used.setdefault(key, self.s.sources.get(name, name))
        elif key not in self.reasons:
            self.reasons[key] = why if _has(self.s, name) else self._absent()
        return None if value is None else float(value)

    def hit_ratio(self) -> float | None:
        """Δhits / Δqueries; an engine with no hit counter falls back to the mean of its hit-rate gauge."""
        key = "prefix_cache_hit_ratio"
        if not _has(self.s, "prefix_cache_hits"):
            return _r(self.gauge(key, key, "mean"), 4)
        hits, queries = self.delta("prefix_cache_hits", key), self.delta("prefix_cache_queries", key)
        if hits is None or queries is None:
            return None
        self.used[key] = " / ".join(
            self.s.sources.get(f, f) for f in ("prefix_cache_hits", "prefix_cache_queries")
        )
        if queries <= 0:
            self.reasons[key] = "no prefix-cache queries in the span"
            return None
        return _r(hits / queries, 4)

    def speculative(self) -> dict[str, float | None]:
        """vLLM: accepted / draft tokens and 1 + accepted / drafts from its counters; SGLang: its gauges."""
        ratio, length = "spec_decode_acceptance_ratio", "spec_decode_mean_acceptance_length"
        out: dict[str, float | None] = {ratio: None, length: None}
        if _has(self.s, "spec_accepted_tokens"):
            accepted = self.delta("spec_accepted_tokens", ratio)
            tokens, drafts = self.delta("spec_draft_tokens", ratio), self.delta("spec_drafts", length)
            if accepted is not None and tokens:
                out[ratio] = _r(accepted / tokens, 4)
            if accepted is not None and drafts:
                out[length] = _r(1 + accepted / drafts, 4)
            for key in (ratio, length):
                if out[key] is None and key not in self.reasons:
                    self.reasons[key] = "no speculative drafts in the span"
        elif _has(self.s, "spec_accept_ratio") or _has(self.s, "spec_accept_length"):
            out[ratio] = _r(self.gauge("spec_accept_ratio", ratio, "mean"), 4)
            out[length] = _r(self.gauge("spec_accept_length", length, "mean"), 4)
        else:
            self.reasons[ratio] = self.reasons[length] = NO_SPEC if len(self.s.t_ns) else self._absent()
        return out

    def _absent(self) -> str:
        """Why a field no scrape had is null: the page lacks it, or no scrape succeeded at all."""
        return NO_SERIES if len(self.s.t_ns) or not (self.s.errors or len(self.s.failed_ns)) else NO_SCRAPE


def _per_s(
    count: float | None, seconds: float, key: str, reasons: dict[str, str], count_key: str
) -> float | None:
    """A count over the span's length; unknown for the count's own reason (``count_key``'s)."""
    if count is None:
        reasons[key] = reasons.get(count_key, NO_EDGES)
        return None
    if seconds <= 0:
        reasons[key] = "the span has no length"
        return None
    return _r(count / seconds)


def _has(s: EngineSamples, field: str) -> bool:
    return field in s.present


def _is_null(out: dict[str, Any], key: str) -> bool:
    value = out.get(key)
    return value is None or (isinstance(value, dict) and None in value.values())


def engine_export(
    s: EngineSamples, scope_starts: I64, scope_ends: I64, window_starts: I64, window_ends: I64
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The scope's block (with the scrape errors and an unknown engine's series) and each window's."""
    windows = read_spans(s, window_starts, window_ends)
    per_window = [block(s, windows, k) for k in range(len(window_starts))]
    scope = block(s, pooled(read_spans(s, scope_starts, scope_ends)), 0)
    scope.update(s.errors.json())
    if s.family is None:
        scope["unknown_series"] = list(s.unknown)
        scope["reason"] = (
            "no mapping table for this engine (only vLLM and SGLang have one): its series are listed by name"
            if s.unknown
            else "no engine scrape succeeded in the run's span"
        )
    return scope, per_window


def attach_engine(
    export: dict[str, Any], samples: EngineSamples | None, scope: tuple[I64, I64], spans: tuple[I64, I64]
) -> list[dict[str, Any] | None]:
    """The export's ``engine`` (the scope's block, null when no engine was scraped) and the token
    cross-check's note in ``run.notes`` when the engine and the windows disagree; returns each window's
    ``engine`` entry (in the order of ``spans``) for the windows to show."""
    if samples is None:
        export["engine"] = None
        return [None] * len(spans[0])
    block_of_scope, per_window = engine_export(samples, *scope, *spans)
    # no span (failed, unstamped): nothing to read
    entries = [entry if end > start else None for entry, start, end in zip(per_window, *spans, strict=True)]
    if samples.family is not None:
        check, note = token_check(
            block_of_scope["generation_tokens"],
            generated_range(samples.t_ns, samples.values.get("generation_tokens"), *scope),
            export["totals"]["completion_tokens"],
            export["method"]["scope"],
        )
        block_of_scope["token_cross_check"] = check
        if note is not None:
            export["run"].setdefault("notes", []).append(note)
    export["engine"] = block_of_scope
    return entries
