"""genai-perf / perf_analyzer ``profile_export.json`` → windows.

perf_analyzer writes each request's send time (``timestamp``) and every response's arrival
(``response_timestamps``) as ``system_clock`` nanoseconds since the epoch, with the raw response bodies in
``response_outputs``. Which response first carried a token is read from those bodies (OpenAI SSE chunks,
Triton ``text_output``, TensorRT-LLM ``output_ids``); where they cannot be read, the first response stands in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import GIVEN_UP, Window
from sparkwatch.importers.common import (
    ClockAnchor,
    Problem,
    as_count,
    as_int,
    as_list,
    as_number,
    as_object,
    base_source,
    checked,
    epoch_ns,
    field,
    looks_like,
    opt,
    read_json,
)

FORMAT = "genai-perf"
MAPPING: dict[str, object] = {"kind": "identity", "rule": "perf_analyzer system_clock ns since the epoch"}
#: ``source.end`` of a request no response reached: its window is its send time alone.
NO_RESPONSE_END = "unknown: no response arrived (the window is the request's send time alone)"


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> list[Window]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("experiments"), list):
        raise Problem(
            "not a genai-perf profile_export.json: no top-level 'experiments' list" + looks_like(data)
        )
    kind = data.get("service_kind") if isinstance(data.get("service_kind"), str) else None
    windows: list[Window] = []
    for e_index, exp_value in enumerate(data["experiments"]):
        where_e = f"experiments[{e_index}]"
        experiment = as_object(exp_value, where_e)
        setting_value = opt(experiment, "experiment")
        setting = as_object({} if setting_value is None else setting_value, f"{where_e}.experiment")
        for r_index, req_value in enumerate(
            as_list(field(experiment, "requests", where_e), f"{where_e}.requests")
        ):
            where = f"{where_e}.requests[{r_index}]"
            request = as_object(req_value, where)
            window = _window(path, kind, setting, request, where=where, index=(e_index, r_index))
            if window is not None:
                windows.append(window)
    return windows


def _window(
    path: Path,
    kind: str | None,
    setting: dict[str, Any],
    request: dict[str, Any],
    *,
    where: str,
    index: tuple[int, int],
) -> Window | None:
    t_start_ns = epoch_ns(
        as_int(field(request, "timestamp", where), f"{where}.timestamp"), f"{where}.timestamp"
    )
    raw = as_list(field(request, "response_timestamps", where), f"{where}.response_timestamps")
    stamps = [as_int(v, f"{where}.response_timestamps[{i}]") for i, v in enumerate(raw)]
    if stamps != sorted(stamps):
        raise Problem(f"{where}.response_timestamps are not in arrival order")
    source = base_source(FORMAT, path, "unix_ns", MAPPING, 1e-9)
    source.update(service_kind=kind, responses=len(stamps), experiment_index=index[0], request_index=index[1])
    for key in ("mode", "value"):
        if key in setting:
            value = setting[key]
            source[f"experiment_{key}"] = (
                value if isinstance(value, str) else as_number(value, f"experiment.{key}")
            )
    if "sequence_id" in request:
        source["sequence_id"] = as_int(request["sequence_id"], f"{where}.sequence_id")
    window_id = f"genai-perf-{index[0]}-{index[1]}"
    if not stamps:  # no response arrived: kept, not measured (dropped, a run with failures looked clean)
        source.update(harness_failed=True, end=NO_RESPONSE_END)
        return checked(where, Window(window_id, "timed", t_start_ns, t_start_ns, source=source))
    outputs = opt(request, "response_outputs")
    bodies = outputs if isinstance(outputs, list) and len(outputs) == len(stamps) else None
    first_token, last_token = _token_stamps(stamps, _token_flags(kind, bodies), source)
    usage, finish_reason = _usage_and_finish(kind, bodies, where)
    if finish_reason in GIVEN_UP:  # answered, then given up by the server: not a completed request
        source["upstream_aborted"] = True
    return checked(
        where,
        Window(
            id=window_id,
            # genai-perf exports only profiled requests; its warm-up requests are not in the file
            phase="timed",
            t_start_ns=t_start_ns,
            t_end_ns=stamps[-1],
            t_first_byte_ns=stamps[0],
            t_first_token_ns=first_token,
            t_last_token_ns=last_token,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            cached_tokens=usage.get("cached_tokens"),
            reasoning_tokens=usage.get("reasoning_tokens"),
            finish_reason=finish_reason,
            source=source,
        ),
    )


def _token_stamps(
    stamps: list[int], flags: list[bool] | None, source: dict[str, Any]
) -> tuple[int | None, int | None]:
    """First and last response that carried a token (how it was decided goes into ``source``)."""
    if flags is None:
        source["first_token"] = "first response (which responses carried tokens is not determinable)"
        return stamps[0], stamps[-1]
    if not any(flags):
        source["first_token"] = "no response carried content"
        return None, None
    carrying = [stamp for stamp, flag in zip(stamps, flags, strict=True) if flag]
    source["first_token"] = "first response with content or reasoning text"
    return carrying[0], carrying[-1]


def _token_flags(kind: str | None, bodies: list[Any] | None) -> list[bool] | None:
    """Which responses carried a token; None where the bodies cannot tell."""
    if bodies is None or kind not in ("openai", "triton", "triton_c_api"):
        return None
    flags: list[bool] = []
    for body in bodies:
        if not isinstance(body, dict):
            return None
        if kind == "triton":
            text = body.get("text_output")
            if not isinstance(text, str):
                return None
            flags.append(bool(text))
        elif kind == "triton_c_api":
            ids = body.get("output_ids")
            flags.append(
                (isinstance(ids, int) and not isinstance(ids, bool)) or (isinstance(ids, list) and bool(ids))
            )
        else:
            payloads = _sse_payloads(body.get("response"))
            if payloads is None:
                return None
            flags.append(any(_carries_token(p) for p in payloads))
    return flags


def _sse_payloads(text: Any) -> list[dict[str, Any]] | None:
    """The JSON objects in one response (SSE ``data:`` lines or a non-streamed body); None if unreadable."""
    if not isinstance(text, str):
        return None
    body = text.strip()
    if not body:
        return []
    lines = (
        body.splitlines() if body.startswith(("data:", ":", "event:", "id:", "retry:")) else ["data:" + body]
    )
    payloads: list[dict[str, Any]] = []
    for raw_line in lines:
        line = raw_line.strip()
        if not line.startswith("data:"):
            continue  # SSE comments, event names, ids
        data = line[len("data:") :].strip()
        if not data or data == "[DONE]":
            continue
        try:
            payload = json.loads(data)
        except ValueError:
            return None  # a chunk perf_analyzer split mid-JSON: genai-perf stitches these; we do not guess
        if not isinstance(payload, dict):
            return None
        payloads.append(payload)
    return payloads


def _carries_token(payload: dict[str, Any]) -> bool:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    texts = [choice.get("text")]
    for part in (choice.get("delta"), choice.get("message")):
        if isinstance(part, dict):
            texts += [part.get("content"), part.get("reasoning_content"), part.get("reasoning")]
            if isinstance(part.get("tool_calls"), list) and part["tool_calls"]:
                return True
    return any(isinstance(text, str) and text for text in texts)


def _usage_and_finish(
    kind: str | None, bodies: list[Any] | None, where: str
) -> tuple[dict[str, int], str | None]:
    """Token counts from the last OpenAI ``usage`` chunk and the last ``finish_reason``, where present."""
    usage: dict[str, int] = {}
    finish_reason: str | None = None
    if kind != "openai" or bodies is None:
        return usage, finish_reason
    for body in bodies:
        for payload in _sse_payloads(body.get("response") if isinstance(body, dict) else None) or []:
            choices = payload.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                reason = choices[0].get("finish_reason")
                if isinstance(reason, str) and reason:
                    finish_reason = reason
            reported = payload.get("usage")
            if isinstance(reported, dict):
                usage = _usage(reported, f"{where}: usage")
    return usage, finish_reason


def _usage(reported: dict[str, Any], where: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in ("prompt_tokens", "completion_tokens"):
        if reported.get(key) is not None:
            counts[key] = as_count(reported[key], f"{where}.{key}")
    details = {"cached_tokens": "prompt_tokens_details", "reasoning_tokens": "completion_tokens_details"}
    for key, parent in details.items():
        nested = reported.get(parent)
        if isinstance(nested, dict) and nested.get(key) is not None:
            counts[key] = as_count(nested[key], f"{where}.{parent}.{key}")
    return counts
