"""Which of an engine's ``/metrics`` series feed which of our fields: tables (data), not code branches.

Names, types and labels are those of vLLM's ``vllm/v1/metrics/loggers.py`` and ``v1/spec_decode/metrics.py``
and SGLang's ``srt/metrics/collector.py`` (docs/integrations.md). A field lists its names in order of
preference: the first one a scrape has is used (vLLM renamed ``gpu_cache_usage_perc`` to
``kv_cache_usage_perc`` in 0.9 and hides the old name from 0.10). Counters are read as the sample names
the text format shows (``<name>_total``); ``_created`` series are never read.

Several series of one name are combined per ``combine``: counters are summed across vLLM's ``engine``
and SGLang's ``dp_rank`` (``rank_labels``: each data-parallel rank counts its own tokens); request gauges
are summed (requests on every rank run at once); ratios take the fullest rank (``max``: the pressure that
limits the batch), or the ``mean`` of ranks for a per-rank rate. SGLang's tensor, pipeline and expert
ranks report one scheduler's view each: of each group's series only the lowest of those ranks is read
(``replica_labels``: rank 0, or with DP attention each data-parallel group's leader), else one batch would
count once per GPU; a per-priority part of a queue gauge is never read (``breakdown_labels``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["gauge", "counter"]
Combine = Literal["sum", "max", "mean"]


@dataclass(frozen=True, slots=True)
class Series:
    field: str  # our name for it
    names: tuple[str, ...]  # the engine's sample names, preferred first
    kind: Kind
    combine: Combine
    zero_is_absent: bool = False  # a 0 means "not in use" (SGLang's spec gauges without spec decoding)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    prefix: str  # every series of this engine begins with it
    series: tuple[Series, ...]
    rank_labels: tuple[str, ...] = ()  # labels of the data-parallel ranks one engine's series are split by
    replica_labels: tuple[str, ...] = ()  # labels whose higher ranks repeat their group leader's view
    breakdown_labels: tuple[str, ...] = ()  # a series with one of these set is a part of a total beside it


VLLM = Family(
    "vllm",
    "vllm:",
    (
        Series("running_requests", ("vllm:num_requests_running",), "gauge", "sum"),
        Series("waiting_requests", ("vllm:num_requests_waiting",), "gauge", "sum"),
        Series(
            "kv_cache_usage_ratio", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "gauge", "max"
        ),
        Series("prompt_tokens", ("vllm:prompt_tokens_total",), "counter", "sum"),
        Series("generation_tokens", ("vllm:generation_tokens_total",), "counter", "sum"),
        Series(
            "prefix_cache_queries",
            ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
            "counter",
            "sum",
        ),
        Series(
            "prefix_cache_hits",
            ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            "counter",
            "sum",
        ),
        Series("preemptions", ("vllm:num_preemptions_total",), "counter", "sum"),
        Series("spec_drafts", ("vllm:spec_decode_num_drafts_total",), "counter", "sum"),
        Series("spec_draft_tokens", ("vllm:spec_decode_num_draft_tokens_total",), "counter", "sum"),
        Series("spec_accepted_tokens", ("vllm:spec_decode_num_accepted_tokens_total",), "counter", "sum"),
    ),
    rank_labels=("engine",),
)

SGLANG = Family(
    "sglang",
    "sglang:",
    (
        Series("running_requests", ("sglang:num_running_reqs",), "gauge", "sum"),
        Series("waiting_requests", ("sglang:num_queue_reqs",), "gauge", "sum"),
        Series("kv_cache_usage_ratio", ("sglang:token_usage",), "gauge", "max"),
        Series("prompt_tokens", ("sglang:prompt_tokens_total",), "counter", "sum"),
        Series("generation_tokens", ("sglang:generation_tokens_total",), "counter", "sum"),
        # SGLang's hit rate over a span: cached prompt tokens over prompt tokens (its cache_hit_rate gauge
        # is the last prefill batch's, reset to 0 at every decode log: only a fallback)
        Series("prefix_cache_queries", ("sglang:prompt_tokens_total",), "counter", "sum"),
        Series("prefix_cache_hits", ("sglang:cached_tokens_total",), "counter", "sum"),
        Series("prefix_cache_hit_ratio", ("sglang:cache_hit_rate",), "gauge", "mean"),
        Series("preemptions", ("sglang:num_retracted_requests_total",), "counter", "sum"),
        Series("generation_tokens_per_s", ("sglang:gen_throughput",), "gauge", "sum"),
        Series("spec_accept_length", ("sglang:spec_accept_length",), "gauge", "mean", zero_is_absent=True),
        Series("spec_accept_ratio", ("sglang:spec_accept_rate",), "gauge", "mean", zero_is_absent=True),
    ),
    rank_labels=("dp_rank",),
    replica_labels=("tp_rank", "pp_rank", "moe_ep_rank"),
    # with --enable-priority-scheduling the queue gauges add a series per priority beside the total, which
    # keeps priority="" (srt/observability/metrics_collector.py, _log_gauge_queue_count)
    breakdown_labels=("priority",),
)

FAMILIES: tuple[Family, ...] = (VLLM, SGLANG)  # named in defaults.ENGINE_FAMILY_NAMES too (a test holds it)


def family_of(names: set[str]) -> Family | None:
    """The family whose prefix most of the scrape's series carry; None for an engine with no table."""
    counts = [(sum(n.startswith(f.prefix) for n in names), f) for f in FAMILIES]
    best, family = max(counts, key=lambda c: c[0])
    return family if best else None
