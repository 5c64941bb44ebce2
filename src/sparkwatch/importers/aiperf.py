"""AIPerf ``profile_export.jsonl`` → windows.

One JSON record per request: ``metadata`` carries the epoch-ns stamps and the ``benchmark_phase``;
``metrics`` carries per-request values with their display unit (TTFT in ms, inter-chunk latencies in ms,
token counts). Only ``request_start_ns`` is a ``time.time_ns()`` reading: AIPerf 0.13 writes
``request_ack_ns`` (response headers) and ``request_end_ns`` (the last raw SSE message, ``[DONE]``) as that
start plus ``perf_counter_ns`` differences (``compute_time_ns``), so every stamp of a record shares its
start's wall-clock error and none adds its own. Older AIPerf wrote ``timestamp_ns``/``credit_phase`` and the
end as the ``max_response_timestamp`` metric; both are read.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import Window
from sparkwatch.importers.common import (
    ClockAnchor,
    Problem,
    as_count,
    as_int,
    as_list,
    as_number,
    as_object,
    as_str,
    base_source,
    checked,
    epoch_ns,
    looks_like,
    opt,
    read_jsonl,
)

FORMAT = "aiperf"
PHASES = {"profiling": "timed", "warmup": "warmup"}  # other AIPerf phases keep their own (unmeasured) name
UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "sec": 1_000_000_000}
# TTFT and latencies are perf_counter durations printed as ms floats; the end is start + a perf delta in ns.
# A derived token stamp that lands this little past the end is the float print, not the request.
CLAMP_SLACK_NS = 1_000
#: Request metadata copied into each window's source when present.
SOURCE_KEYS = ("x_request_id", "session_num", "request_num", "conversation_id", "turn_index", "was_cancelled")
MAPPING: dict[str, object] = {
    "kind": "identity",
    "rule": "epoch-ns stamps as written; token stamps = request_start_ns + TTFT (+ inter-chunk gaps,"
    " or + request_latency when there is one content chunk)",
}


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> Iterator[Window]:
    for number, record in read_jsonl(path):
        where = f"line {number}"
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("metadata"), dict)
            or "metrics" not in record
        ):
            raise Problem(
                f"{where}: not an AIPerf profile_export.jsonl record (needs 'metadata' and 'metrics')"
                + looks_like(record)
            )
        window = _window(path, record, where, number)
        if window is not None:
            yield window


def _window(path: Path, record: dict[str, Any], where: str, number: int) -> Window | None:
    meta: dict[str, Any] = record["metadata"]
    metrics_value = record["metrics"]
    metrics = as_object({} if metrics_value is None else metrics_value, f"{where}.metrics")
    error_value = opt(record, "error")
    error = None if error_value is None else as_object(error_value, f"{where}.error")
    current = "request_start_ns" in meta  # else the older schema: timestamp_ns, credit_phase
    phase_key = "benchmark_phase" if current else "credit_phase"
    raw_phase = as_str(opt(meta, phase_key), f"{where}.metadata.{phase_key}")
    span = _span(meta, metrics, where, current)
    if span is None:
        if error is not None:
            return None  # an older AIPerf error record: no end stamp, nothing to measure
        raise Problem(f"{where}: no end stamp (metadata.request_end_ns or metrics.max_response_timestamp)")
    t_start_ns, t_end_ns = span
    source = _source(path, meta, where, raw_phase, current)
    first_token_ns, last_token_ns = _token_stamps(metrics, where, span, source)
    first_byte_ns = _stamp(meta, "request_ack_ns", f"{where}.metadata")
    if first_byte_ns is not None:
        source["first_byte"] = "request_ack_ns: HTTP response start, which may precede the first SSE chunk"
    prompt_tokens, completion_tokens, reasoning_tokens = _token_counts(metrics, where, source)
    if error is not None:  # kept, not measured (AIPerf writes code null for a transport error)
        source["harness_failed"] = True
        if t_end_ns == t_start_ns:  # AIPerf 0.13 falls back to the start when no response came
            source["end"] = "unknown: AIPerf wrote the start as the end (no response)"
    request_id = source.get("x_request_id")
    return checked(
        where,
        Window(
            id=f"aiperf-{request_id}"
            if isinstance(request_id, str) and request_id
            else f"aiperf-line{number}",
            phase=PHASES.get(raw_phase, raw_phase),
            t_start_ns=t_start_ns,
            t_end_ns=t_end_ns,
            t_first_byte_ns=first_byte_ns,
            t_first_token_ns=first_token_ns,
            t_last_token_ns=last_token_ns,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            reasoning_tokens=reasoning_tokens,
            http_status=_http_status(error, source),
            source=source,
        ),
    )


def _span(meta: dict[str, Any], metrics: dict[str, Any], where: str, current: bool) -> tuple[int, int] | None:
    """Start and end in epoch ns; ``None`` when the record has no end stamp."""
    start_key = "request_start_ns" if current else "timestamp_ns"
    t_start_ns = _stamp(meta, start_key, f"{where}.metadata")
    if t_start_ns is None:
        raise Problem(f"{where}.metadata: missing field '{start_key}'")
    if current:
        t_end_ns = _stamp(meta, "request_end_ns", f"{where}.metadata")
    else:
        t_end_ns = _duration_ns(metrics, "max_response_timestamp", where)
    if t_end_ns is None:
        return None
    epoch_ns(t_end_ns, f"{where}: request end")
    return t_start_ns, t_end_ns


def _source(path: Path, meta: dict[str, Any], where: str, raw_phase: str, current: bool) -> dict[str, Any]:
    source = base_source(FORMAT, path, "unix_ns", MAPPING, 1e-9)
    source.update(aiperf_phase=raw_phase, aiperf_schema="request_start_ns" if current else "timestamp_ns")
    for key in SOURCE_KEYS:
        if opt(meta, key) is not None:
            value = meta[key]
            source[key] = value if isinstance(value, str | bool) else as_int(value, f"{where}.{key}")
    if "x_request_id" in source:
        source["request_id"] = source["x_request_id"]
    return source


def _token_stamps(
    metrics: dict[str, Any], where: str, span: tuple[int, int], source: dict[str, Any]
) -> tuple[int | None, int | None]:
    """First and last token: start + TTFT, and start + TTFT + Σ inter-chunk gaps, clamped to the end
    (noted in source).

    AIPerf writes ``inter_chunk_latency`` only for two or more content chunks, so a one-token answer has
    none; its last token is then start + ``request_latency`` (0.13: last content chunk − start, the same
    perf_counter reading as TTFT for one chunk). The gaps stay first where present: in 0.13 both land on the
    same ns (AIPerf's own pipeline, fixture README), while AIPerf ≤ 0.1 ended ``request_latency`` at the
    last response of any kind (its ``max_response_timestamp``), past the token, which is why the older
    schema gets no fallback.
    """
    t_start_ns, t_end_ns = span
    ttft_ns = _duration_ns(metrics, "time_to_first_token", where)
    if ttft_ns is None:
        ttft_ns = _duration_ns(metrics, "ttft", where)  # older AIPerf tag
    if ttft_ns is None:
        return None, None
    first_token_ns = _clamped(t_start_ns + ttft_ns, t_end_ns, source, "t_first_token_ns")
    gaps_ns = _durations_ns(metrics, "inter_chunk_latency", where)
    if gaps_ns is not None:
        last_ns = t_start_ns + ttft_ns + sum(gaps_ns)
    elif source["aiperf_schema"] == "request_start_ns":
        latency_ns = _duration_ns(metrics, "request_latency", where)
        if latency_ns is None:
            return first_token_ns, None
        if latency_ns < ttft_ns:
            raise Problem(f"{where}.metrics: request_latency is shorter than time_to_first_token")
        source["last_token"] = (
            "request_start_ns + request_latency (one content chunk: no inter_chunk_latency)"
        )
        last_ns = t_start_ns + latency_ns
    else:
        return first_token_ns, None
    return first_token_ns, _clamped(last_ns, t_end_ns, source, "t_last_token_ns")


def _http_status(error: dict[str, Any] | None, source: dict[str, Any]) -> int | None:
    """The error's HTTP code, where it is one (AIPerf writes ``code: null`` for a transport error such as
    ServerDisconnectedError, with a normal end stamp); its type goes into ``source``."""
    if error is None:
        return None
    if isinstance(opt(error, "type"), str):
        source["error_type"] = error["type"]
    code = opt(error, "code")
    return code if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599 else None


def _stamp(meta: dict[str, Any], key: str, where: str) -> int | None:
    value = opt(meta, key)
    return None if value is None else epoch_ns(as_int(value, f"{where}.{key}"), f"{where}.{key}")


def _metric(metrics: dict[str, Any], tag: str, where: str) -> tuple[Any, str] | None:
    value = opt(metrics, tag)
    if value is None:
        return None
    metric = as_object(value, f"{where}.metrics.{tag}")
    unit = as_str(opt(metric, "unit"), f"{where}.metrics.{tag}.unit")
    return opt(metric, "value"), unit


def _scale(tag: str, unit: str, where: str) -> int:
    if unit not in UNIT_NS:
        raise Problem(f"{where}.metrics.{tag}: unit {unit!r} is not a time unit ({', '.join(UNIT_NS)})")
    return UNIT_NS[unit]


def _duration_ns(metrics: dict[str, Any], tag: str, where: str) -> int | None:
    found = _metric(metrics, tag, where)
    if found is None:
        return None
    value = as_number(found[0], f"{where}.metrics.{tag}.value")
    ns = round(Fraction(value) * _scale(tag, found[1], where))
    if ns < 0:
        raise Problem(f"{where}.metrics.{tag} is negative: {value}")
    return ns


def _durations_ns(metrics: dict[str, Any], tag: str, where: str) -> list[int] | None:
    found = _metric(metrics, tag, where)
    if found is None:
        return None
    scale = _scale(tag, found[1], where)
    values = as_list(found[0], f"{where}.metrics.{tag}.value")
    out = [
        round(Fraction(as_number(v, f"{where}.metrics.{tag}.value[{i}]")) * scale)
        for i, v in enumerate(values)
    ]
    if any(ns < 0 for ns in out):
        raise Problem(f"{where}.metrics.{tag} has a negative gap")
    return out


#: The server's counts (its ``usage``, AIPerf 0.13) beside AIPerf's own tokenizer's (output + reasoning).
USAGE_COUNTS = (
    ("usage_prompt_tokens", "input_sequence_length"),
    ("usage_completion_tokens", "output_sequence_length"),
    ("usage_reasoning_tokens", "reasoning_token_count"),  # usage.completion_tokens_details.reasoning_tokens
)


def _token_counts(
    metrics: dict[str, Any], where: str, source: dict[str, Any]
) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and reasoning tokens: the server's ``usage`` where AIPerf recorded it (what the
    proxy and the other harnesses' importers count; AIPerf's own re-tokenizing can differ, a tokenizer not
    the server's by 2x), else AIPerf's own counts (a prompt of an error record: ``error_isl``), each count
    on its own. Where the two differ, AIPerf's are kept in ``source.aiperf_counts``."""
    out: list[int | None] = []
    differ: dict[str, int] = {}
    for usage, own in USAGE_COUNTS:
        server, client = _count(metrics, usage, where), _count(metrics, own, where)
        if server is not None and client is not None and client != server:
            differ[own] = client
        out.append(server if server is not None else client)
    if out[0] is None:
        out[0] = _count(metrics, "error_isl", where)
    if differ:
        source["aiperf_counts"] = differ
    return out[0], out[1], out[2]


def _count(metrics: dict[str, Any], tag: str, where: str) -> int | None:
    found = _metric(metrics, tag, where)
    return None if found is None else as_count(found[0], f"{where}.metrics.{tag}.value")


def _clamped(t_ns: int, t_end_ns: int, source: dict[str, object], name: str) -> int:
    """Derived stamps a hair past the end (float print rounding) are put back on the end and noted."""
    if t_end_ns < t_ns <= t_end_ns + CLAMP_SLACK_NS:
        source[f"{name}_clamped_by_ns"] = t_ns - t_end_ns
        return t_end_ns
    return t_ns
