"""guidellm ``benchmarks.json`` → windows.

Two report shapes exist. guidellm ≥ 0.4 keeps every request, warm-up and cool-down included, under
``benchmarks[].requests.{successful,incomplete,errored}[]`` with Unix-seconds floats in ``info.timings`` and
the measured period in ``scheduler_metrics.measure_{start,end}_time``; guidellm 0.2–0.3 reports only measured
requests, with ``start_time``/``end_time``/``first_token_time``/``last_token_time`` on each request.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import Window
from sparkwatch.importers.common import (
    ClockAnchor,
    Problem,
    as_count,
    as_list,
    as_number,
    as_object,
    as_str,
    base_source,
    checked,
    field,
    float_resolution_s,
    looks_like,
    opt,
    read_json,
    seconds_to_ns,
)
from sparkwatch_agent.shared.strict_text import quoted_number

FORMAT = "guidellm"
STATUSES = ("successful", "incomplete", "errored")
MAPPING: dict[str, object] = {
    "kind": "unix_seconds",
    "rule": "exact float value x 1e9, rounded to the nearest ns",
}
ERROR_TEXT_MAX_CHARS = 200


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> list[Window]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise Problem("not a guidellm benchmarks report: no top-level 'benchmarks' list" + looks_like(data))
    windows: list[Window] = []
    for b_index, bench_value in enumerate(data["benchmarks"]):
        where_b = f"benchmarks[{b_index}]"
        bench = as_object(bench_value, where_b)
        requests = as_object(field(bench, "requests", where_b), f"{where_b}.requests")
        _refuse_a_sample(bench, requests, where_b)
        for status in STATUSES:
            items = opt(requests, status)
            for r_index, item in enumerate(
                as_list([] if items is None else items, f"{where_b}.requests.{status}")
            ):
                where = f"{where_b}.requests.{status}[{r_index}]"
                stats = as_object(item, where)
                request_id = _request_id(stats, where)
                window_id = f"guidellm-{b_index}-{request_id if request_id else f'{status}-{r_index}'}"
                if "info" in stats:
                    window = _current(path, bench, stats, where_b=where_b, where=where, window_id=window_id)
                elif "start_time" in stats:
                    window = _legacy(path, stats, where, window_id)
                else:
                    raise Problem(
                        f"{where}: neither 'info.timings' (guidellm >= 0.4) nor 'start_time' (0.2-0.3)"
                    )
                window.source.update(benchmark_index=b_index, status=status)
                if status != "successful":  # errored, or cancelled when the benchmark ended
                    window.source["harness_failed"] = True
                if status == "incomplete" and window.phase == "timed":  # the benchmark's tail, no error
                    window = dataclasses.replace(window, phase="cooldown")
                if request_id:
                    window.source["request_id"] = request_id
                windows.append(window)
    return windows


def _refuse_a_sample(bench: dict[str, Any], requests: dict[str, Any], where: str) -> None:
    """A report that kept only a random sample of the requests made (guidellm's ``--sample-requests``, 20 by
    default in some versions): the windows of a sample are not the load the nodes carried (the others ran
    beside them, drawing power, with no tokens counted), so it is refused. Told by what each version
    records: 0.2-0.3 a ``request_samples`` breakdown (null when nothing was sampled) beside
    ``request_totals``; later, a status list exactly ``sample_requests`` (0.8: ``sample_size``) long where
    ``requests_made`` counts more (fewer kept than the limit is every request: nothing was dropped)."""
    samples = opt(bench, "request_samples")
    settings = opt(bench, "config")
    limit = (
        (opt(settings, "sample_requests") or opt(settings, "sample_size"))
        if isinstance(settings, dict)
        else None
    )
    scheduler = opt(bench, "scheduler_metrics")
    made = opt(bench, "request_totals") if samples is not None else None
    if made is None and isinstance(scheduler, dict):
        made = opt(scheduler, "requests_made")
    if not isinstance(made, dict) or (
        samples is None and (not isinstance(limit, int) or isinstance(limit, bool))
    ):
        return
    for status in STATUSES:
        items, count = opt(requests, status), made.get(status)
        kept = len(items) if isinstance(items, list) else 0
        if not isinstance(count, int) or isinstance(count, bool) or kept >= count:
            continue
        if samples is not None or kept == limit:
            raise Problem(
                f"{where} holds {kept} of the {count} {status} requests guidellm made: a random sample,"
                " whose windows are not the load the nodes carried; run guidellm keeping every request (its"
                " --sample-requests option)"
            )


def _request_id(stats: dict[str, Any], where: str) -> str | None:
    value = opt(stats, "request_id")
    return None if value is None else as_str(value, f"{where}.request_id") or None


def _seconds(obj: dict[str, Any], key: str, where: str) -> int | float | None:
    value = opt(obj, key)
    return None if value is None else as_number(value, f"{where}.{key}")


def _ns(seconds: int | float | None) -> int | None:
    return None if seconds is None else seconds_to_ns(seconds)


def _measured_period_ns(bench: dict[str, Any], where_b: str) -> tuple[int, int]:
    """guidellm's own measured period; requests outside it are warm-up or cool-down."""
    metrics = as_object(field(bench, "scheduler_metrics", where_b), f"{where_b}.scheduler_metrics")
    where = f"{where_b}.scheduler_metrics"
    start = as_number(field(metrics, "measure_start_time", where), f"{where}.measure_start_time")
    end = as_number(field(metrics, "measure_end_time", where), f"{where}.measure_end_time")
    start_s, end_s = quoted_number(start), quoted_number(end)
    if start <= 0 or end <= 0:
        raise Problem(f"{where}: measure_start_time/measure_end_time are unset ({start_s}, {end_s})")
    if end < start:  # every request would read as warm-up or cool-down
        raise Problem(f"{where}: measure_end_time ({end_s}) is before measure_start_time ({start_s})")
    return seconds_to_ns(start), seconds_to_ns(end)


def _current(
    path: Path, bench: dict[str, Any], stats: dict[str, Any], *, where_b: str, where: str, window_id: str
) -> Window:
    info = as_object(field(stats, "info", where), f"{where}.info")
    where_t = f"{where}.info.timings"
    timings = as_object(field(info, "timings", f"{where}.info"), where_t)
    # guidellm's own request_start_time/request_end_time fall back to the resolve stamps the same way
    start_s = _seconds(timings, "request_start", where_t)
    if start_s is None:
        start_s = _seconds(timings, "resolve_start", where_t)
    end_s = _seconds(timings, "request_end", where_t)
    if end_s is None:
        end_s = _seconds(timings, "resolve_end", where_t)
    if start_s is None or end_s is None:
        raise Problem(f"{where_t}: needs request_start/request_end (or resolve_start/resolve_end)")
    t_start_ns, t_end_ns = seconds_to_ns(start_s), seconds_to_ns(end_s)
    measure_start_ns, measure_end_ns = _measured_period_ns(bench, where_b)
    if t_start_ns < measure_start_ns:
        phase = "warmup"
    elif t_end_ns > measure_end_ns:
        phase = "cooldown"
    else:
        phase = "timed"
    source = base_source(FORMAT, path, "unix_s", MAPPING, float_resolution_s(float(start_s)))
    source.update(guidellm_schema=">=0.4", measure_start_ns=measure_start_ns, measure_end_ns=measure_end_ns)
    _note_error(source, opt(info, "error"))
    return checked(
        where,
        Window(
            id=window_id,
            phase=phase,
            t_start_ns=t_start_ns,
            t_end_ns=t_end_ns,
            t_first_byte_ns=_ns(_seconds(timings, "first_request_iteration", where_t)),
            t_first_token_ns=_ns(_seconds(timings, "first_token_iteration", where_t)),
            t_last_token_ns=_ns(_seconds(timings, "last_token_iteration", where_t)),
            prompt_tokens=_count(stats, "prompt_tokens", where),
            completion_tokens=_count(stats, "output_tokens", where),
            cached_tokens=_count(stats, "cached_tokens", where),  # guidellm 0.8: the server's usage
            source=source,
        ),
    )


def _legacy(path: Path, stats: dict[str, Any], where: str, window_id: str) -> Window:
    start_s = as_number(field(stats, "start_time", where), f"{where}.start_time")
    end_s = as_number(field(stats, "end_time", where), f"{where}.end_time")
    source = base_source(FORMAT, path, "unix_s", MAPPING, float_resolution_s(float(start_s)))
    source.update(guidellm_schema="0.2-0.3", warmup_cooldown="dropped from the report by guidellm")
    _note_error(source, opt(stats, "error"))
    return checked(
        where,
        Window(
            id=window_id,
            phase="timed",  # this guidellm wrote only the measured requests
            t_start_ns=seconds_to_ns(start_s),
            t_end_ns=seconds_to_ns(end_s),
            t_first_token_ns=_token_ns(stats, "first_token_time", where, source),
            t_last_token_ns=_token_ns(stats, "last_token_time", where, source),
            prompt_tokens=_count(stats, "prompt_tokens", where),
            completion_tokens=_count(stats, "output_tokens", where),
            source=source,
        ),
    )


def _token_ns(stats: dict[str, Any], key: str, where: str, source: dict[str, Any]) -> int | None:
    """A 0.2–0.3 token stamp; guidellm's unset one is none, said in ``source``: a successful request whose
    stream held no text (an empty answer, a reasoning model's answer all in reasoning_content) has
    ``first_iter_time or -1.0`` (guidellm 0.3.1's aggregator), and no real Unix time is negative."""
    seconds = _seconds(stats, key, where)
    if seconds is not None and seconds < 0:
        source.setdefault("unset_token_stamps", []).append(f"{key} {seconds:g}")
        return None
    return _ns(seconds)


def _note_error(source: dict[str, Any], error: Any) -> None:
    """A failed request's error text, shortened, goes into the window's source."""
    if isinstance(error, str) and error:
        source["error"] = error[:ERROR_TEXT_MAX_CHARS]


def _count(stats: dict[str, Any], key: str, where: str) -> int | None:
    value = opt(stats, key)
    return None if value is None else as_count(value, f"{where}.{key}")
