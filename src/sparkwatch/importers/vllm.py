"""``vllm bench serve --save-result --save-detailed`` JSON → windows, placed on the wall clock by an anchor.

vLLM stamps each request's start with ``time.perf_counter()`` (seconds, monotonic, meaningless across hosts
or boots), and measures ``ttfts`` and ``latencies`` from it. A :class:`ClockAnchor` — one wall/monotonic pair
read together on the benchmark host, in the same boot — places them: wall = anchor.wall_ns + (perf_ns −
anchor.mono_ns). On Linux ``perf_counter`` is CLOCK_MONOTONIC, the clock ``time.monotonic_ns()`` reads.

vLLM's ``ttft`` for chat completions (``backend`` ``openai-chat``) is, up to at least 0.15, the arrival of the
first chunk with ``choices`` — the role-only one — and in later releases (0.34) the first with content,
reasoning or a tool call; the file does not say which vLLM wrote it, so it is recorded as the first byte and
the first token is left unknown. A completions stream (``vllm``, ``openai``: every release read) has no role
chunk: its first chunk with ``choices`` is the first token. ``latency`` ends at the last chunk with
``choices`` (the trailing usage chunk and ``[DONE]`` are not timed): that is both the last token and the end
of the window. A failed request (``errors[i]`` set, or no ttft at all) is kept, not measured
(``harness_failed``); where vLLM left its ``latency`` 0 (no chunk came, or an exception cut the stream) its
end is its start, said in ``source.end``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import Window
from sparkwatch.importers.common import (
    NS_PER_S,
    ClockAnchor,
    Problem,
    as_count,
    as_list,
    as_number,
    base_source,
    checked,
    float_resolution_s,
    looks_like,
    read_json,
    seconds_to_ns,
)

FORMAT = "vllm"
NEEDS_ANCHOR_HINT = (
    "vllm start_times are time.perf_counter() seconds; pass a clock anchor WALL_NS:MONO_NS[:UNCERTAINTY_NS] "
    "read on the benchmark host in the same boot"
)
END_NOTE = "latency ends at the last chunk with choices (= t_last_token_ns); usage chunk, [DONE] untimed"
#: What ``ttft`` is, for a chat backend (or one the file does not name) and for a completions one.
NOTES = {
    "first_token": "unknown: vLLM's ttft is its first chunk (a role-only one counts), kept as first byte",
    "end": END_NOTE,
}
COMPLETIONS_NOTES = {
    "first_token": "vLLM's ttft: the first chunk with choices, which opens a completions stream's text",
    "end": END_NOTE,
}
#: ``backend`` values whose requests go to /v1/completions (vLLM's ASYNC_REQUEST_FUNCS, 0.11 to 0.34).
COMPLETIONS_BACKENDS = frozenset({"vllm", "openai"})
ERROR_TEXT_MAX_CHARS = 200
#: A request vLLM marked failed without a reason (``response.reason or ""``): no ttft, no latency.
NO_ERROR_TEXT = "failed without an error text (vLLM recorded no ttft and no latency)"
#: A failed request whose latency vLLM left 0: no chunk came, or an exception cut the stream.
UNKNOWN_END = "unknown: vLLM recorded no latency for this failed request (its end is its start here)"


NOT_VLLM = "not a vllm bench serve result"


def missing_anchor(path: Path) -> str:
    """Why ``path`` cannot be read without a clock anchor: the anchor, unless the file could not be read
    with one either (missing, not JSON, another harness's report, a result without ``start_times``): the
    user is not sent to fetch an anchor only to be told that next."""
    try:
        _shaped(read_json(path))
    except Problem as problem:
        return str(problem)
    return NEEDS_ANCHOR_HINT


def _shaped(data: Any) -> dict[str, Any]:
    """The result's top level, where it has each request's ``start_times``; else the Problem naming what
    the file is instead."""
    if not isinstance(data, dict) or "start_times" not in data:
        if isinstance(data, dict) and "ttfts" in data:
            raise Problem(
                "vllm result has no per-request 'start_times': rerun with --save-result --save-detailed "
                "on a vLLM that records start_times"
            )
        raise Problem(f"{NOT_VLLM}: no 'start_times' list" + looks_like(data))
    return data


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> list[Window]:
    if clock_anchor is None:
        raise Problem(NEEDS_ANCHOR_HINT)
    data = _shaped(read_json(path))
    starts = as_list(data["start_times"], "start_times")
    count = len(starts)
    ttfts = _aligned(data, "ttfts", count)
    input_lens = _aligned(data, "input_lens", count)
    output_lens = _aligned(data, "output_lens", count)
    latencies = _aligned_optional(data, "latencies", count)
    itls = _aligned_optional(data, "itls", count)
    errors = _aligned_optional(data, "errors", count)
    if latencies is None and itls is None:
        raise Problem("needs 'latencies' (or 'itls') to know when each request ended")
    backend = data.get("backend", data.get("endpoint_type"))
    backend = backend if isinstance(backend, str) else None
    windows: list[Window] = []
    for i in range(count):
        error = errors[i] if errors is not None and isinstance(errors[i], str) and errors[i] else None
        start_s = as_number(starts[i], f"start_times[{i}]")
        ttft_s = _non_negative(ttfts[i], f"ttfts[{i}]")
        if latencies is not None:
            latency_s = _non_negative(latencies[i], f"latencies[{i}]")
        else:
            assert itls is not None
            gaps = as_list(itls[i], f"itls[{i}]")
            latency_s = ttft_s + sum(_non_negative(g, f"itls[{i}][{j}]") for j, g in enumerate(gaps))
        if error is None and ttft_s == 0:  # success needs a first chunk, a ttft above 0: an empty reason
            error = NO_ERROR_TEXT
        if latency_s < ttft_s and error is None:
            raise Problem(
                f"request {i}: latency {float(latency_s)} s is shorter than its ttft {float(ttft_s)} s"
            )
        extra: dict[str, Any] = {} if backend is None else {"backend": backend}
        if error is not None:  # kept, not measured, as the other harnesses' failed requests
            extra.update(harness_failed=True, error=_last_line(error))
            if latency_s == 0:
                extra["end"] = UNKNOWN_END
        windows.append(
            _window(
                path,
                clock_anchor,
                index=i,
                start_s=Fraction(start_s),
                ttft_s=None if error is not None else ttft_s,
                latency_s=latency_s,
                tokens=(input_lens[i], None if error is not None else output_lens[i]),
                completions=backend in COMPLETIONS_BACKENDS,
                extra=extra,
            )
        )
    return windows


def _last_line(error: str) -> str:
    """A failed request's error, shortened: a traceback's last line names the exception."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    return (lines[-1] if lines else error)[:ERROR_TEXT_MAX_CHARS]


def _window(
    path: Path,
    anchor: ClockAnchor,
    *,
    index: int,
    start_s: Fraction,
    ttft_s: Fraction | None,
    latency_s: Fraction,
    tokens: tuple[Any, Any],
    completions: bool,
    extra: dict[str, Any],
) -> Window:
    """``ttft_s`` None: a failed request, whose chunks (if any came) are not its answer; ``extra``: more of
    its ``source`` (checked with the rest)."""
    mono_start_ns = seconds_to_ns(start_s)
    # each float carries up to half an ulp; start, the measured stamp and their difference each add one
    rounding_ns = math.ceil(1.5 * math.ulp(float(abs(start_s) + latency_s)) * NS_PER_S) + 1
    source = base_source(
        FORMAT,
        path,
        "perf_counter_s",
        {"kind": "anchor", "rule": "wall = wall_ns + (perf_counter_ns - mono_ns)", **anchor.to_json()},
        float_resolution_s(float(start_s)),
    )
    source.update(
        uncertainty_ns=anchor.uncertainty_ns + rounding_ns,
        float_rounding_ns=rounding_ns,
        anchor_distance_s=(mono_start_ns - anchor.mono_ns) / NS_PER_S,
        request_index=index,
        **(COMPLETIONS_NOTES if completions else NOTES),
    )
    source.update(extra)
    t_end_ns = anchor.to_wall_ns(seconds_to_ns(start_s + latency_s))
    first_ns = None if ttft_s is None else anchor.to_wall_ns(seconds_to_ns(start_s + ttft_s))
    input_len, output_len = tokens
    return checked(
        f"request {index}",
        Window(
            id=f"vllm-{index}",
            phase="timed",  # --num-warmups requests are not saved in the result
            t_start_ns=anchor.to_wall_ns(mono_start_ns),
            t_end_ns=t_end_ns,
            t_first_byte_ns=first_ns,
            t_first_token_ns=first_ns if completions else None,
            t_last_token_ns=None if ttft_s is None else t_end_ns,
            prompt_tokens=as_count(input_len, f"input_lens[{index}]"),
            completion_tokens=None if output_len is None else as_count(output_len, f"output_lens[{index}]"),
            source=source,
        ),
    )


def _aligned(data: dict[str, Any], key: str, count: int) -> list[Any]:
    if key not in data:
        raise Problem(f"missing per-request list '{key}' (saved with --save-detailed)")
    values = as_list(data[key], key)
    if len(values) != count:
        raise Problem(f"'{key}' has {len(values)} entries but 'start_times' has {count}")
    return values


def _aligned_optional(data: dict[str, Any], key: str, count: int) -> list[Any] | None:
    return _aligned(data, key, count) if key in data and data[key] is not None else None


def _non_negative(value: Any, where: str) -> Fraction:
    seconds = Fraction(as_number(value, where))
    if seconds < 0:
        raise Problem(f"{where} is negative: {float(seconds)}")
    return seconds
