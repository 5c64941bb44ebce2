"""The window rules as docs/coordinator.md states them, written out independently of
``core.windows.check_window``: an oracle for "what the API (or an importer) accepts is what the docs allow".
"""

from __future__ import annotations

import json
import re
from typing import Any

#: 2000-01-01 and 2100-01-01 as Unix epoch ns.
EPOCH_MIN_NS = 946_684_800 * 10**9
EPOCH_END_NS = 4_102_444_800 * 10**9
INT64_MAX = 2**63 - 1
PHASE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
CONTROL = re.compile(
    "[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)  # C0, DEL, C1, U+2028/9, the bidirectional embeddings, overrides and isolates, as the docs list them
#: The notes that mark a request as not completed, as the docs list them.
FAILURE_NOTES = (
    "upstream_broke_off",
    "upstream_timed_out",
    "client_left_unfinished",
    "proxy_closed_unfinished",
    "upstream_unfinished",
    "upstream_error",
    "upstream_aborted",
    "upstream_no_completion",
    "proxy_failed",
    "harness_failed",
)
INTS = (
    "t_first_byte_ns",
    "t_first_token_ns",
    "t_last_token_ns",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "http_status",
)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def doc_problem(window: dict[str, Any]) -> str | None:
    """Why the docs would refuse ``window`` (a window's fields by name, absent = unknown), else None."""
    unknown = set(window) - {"id", "phase", "t_start_ns", "t_end_ns", "finish_reason", "source", *INTS}
    if unknown:
        return f"unknown keys {sorted(unknown)}"
    wid, phase = window.get("id"), window.get("phase")
    if not isinstance(wid, str) or not 1 <= len(wid) <= 200:
        return "id must be a string of 1-200 characters"
    if CONTROL.search(wid):
        return "id must not hold control characters or line breaks"
    if not isinstance(phase, str) or PHASE.fullmatch(phase) is None:
        return f"phase {phase!r} is not ^[a-z][a-z0-9_-]{{0,31}}$ (the whole string)"
    start, end = window.get("t_start_ns"), window.get("t_end_ns")
    if not (_int(start) and _int(end) and EPOCH_MIN_NS <= start <= end < EPOCH_END_NS):
        return "t_start_ns <= t_end_ns must be epoch ns integers from 2000 to before 2100"
    for name in INTS:
        value = window.get(name)
        if value is not None and not _int(value):
            return f"{name} must be an integer"
    for name in ("t_first_byte_ns", "t_first_token_ns", "t_last_token_ns"):
        value = window.get(name)
        if value is not None and not start <= value <= end:
            return f"{name} lies outside the window"
    first, last = window.get("t_first_token_ns"), window.get("t_last_token_ns")
    if first is not None and last is not None and last < first:
        return "last token before first token"
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"):
        value = window.get(name)
        if value is not None and not 0 <= value <= INT64_MAX:
            return f"{name} must be a non-negative 64-bit integer"
    status = window.get("http_status")
    if status is not None and not 100 <= status <= 599:
        return "http_status must be 100-599"
    reason = window.get("finish_reason")
    if reason is not None and not (isinstance(reason, str) and 1 <= len(reason) <= 64):
        return "finish_reason must be 1-64 characters"
    if reason is not None and CONTROL.search(reason):
        return "finish_reason must not hold control characters or line breaks"
    return source_problem(window.get("source", {}))


def source_problem(source: Any) -> str | None:
    if not isinstance(source, dict):
        return "source must be an object"
    try:
        json.dumps(source, allow_nan=False)
    except (TypeError, ValueError):
        return "source must be JSON without NaN or infinities"
    if _too_big_or_unpaired(source, 1):
        return "source must hold 64-bit integers and no lone surrogate, at most 246 levels deep"
    if any(note in source and not isinstance(source[note], bool) for note in FAILURE_NOTES):
        return "a failure note in source must be true or false"
    return None


def _too_big_or_unpaired(value: Any, depth: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not -(2**63) <= value < 2**64
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict | list):
        if depth > 246:
            return True
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        return any(_too_big_or_unpaired(v, depth + 1) for v in items)
    return False
