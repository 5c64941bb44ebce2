"""The lmx status capture that ``sparkwatch run`` writes → windows.

lmx's ``--json-status`` prints progress events on stderr, one JSON object per line, as ``{"event": NAME,
"time": RFC3339-UTC-to-the-second, ...fields}``. ``sparkwatch run`` tees them into a file, wrapping each as
``{"t_arrival_ns": <Unix epoch ns when the line arrived>, "status": <the object lmx printed>}``.

lmx's own events do not name which request they belong to, so this importer relies on a minimum of its
own (docs/importers.md): ``request_start``, optional ``request_first_token`` and ``request_end`` events, each
with an integer ``request`` and a ``phase`` of ``warmup`` or ``timed``. Window times are the arrival stamps;
lmx stamps its lines to the whole second, so every window says ``low_resolution`` and ``resolution_s: 1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import Window
from sparkwatch.importers.common import (
    ClockAnchor,
    Problem,
    as_count,
    as_int,
    as_object,
    as_str,
    base_source,
    checked,
    epoch_ns,
    looks_like,
    opt,
    read_jsonl,
)

FORMAT = "lmx-status"
EVENTS = {"request_start": "start", "request_first_token": "first_token", "request_end": "end"}
PHASES = ("warmup", "timed")
MAPPING: dict[str, object] = {
    "kind": "arrival",
    "rule": "t_arrival_ns: sparkwatch run's wall clock when the line arrived; lmx's time is whole seconds",
}


@dataclass(slots=True)
class _Request:
    first_line: int
    stamps: dict[str, int] = field(default_factory=dict)  # start / first_token / end -> arrival ns
    lmx_times: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> Iterator[Window]:
    """A window as each request ends; only requests still open are held."""
    requests: dict[tuple[str, int], _Request] = {}
    ended: set[tuple[str, int]] = set()
    for number, line in read_jsonl(path):
        where = f"line {number}"
        if not isinstance(line, dict) or "t_arrival_ns" not in line or "status" not in line:
            raise Problem(
                f"{where}: not a sparkwatch lmx-status line (needs 't_arrival_ns' and 'status')"
                + looks_like(line)
            )
        arrival_ns = epoch_ns(as_int(line["t_arrival_ns"], f"{where}.t_arrival_ns"), f"{where}.t_arrival_ns")
        status = as_object(line["status"], f"{where}.status")
        event = opt(status, "event")
        if not isinstance(event, str) or event not in EVENTS:
            continue  # lmx's other progress events (and any other JSON the command printed) carry no timing
        key = _record(
            requests, ended, status, stage=EVENTS[event], event=event, arrival_ns=arrival_ns, number=number
        )
        if EVENTS[event] == "end":
            ended.add(key)
            yield _window(path, key, requests.pop(key))
    for key, request in requests.items():
        yield _window(path, key, request)  # not ended: refused with the reason


def _record(
    requests: dict[tuple[str, int], _Request],
    ended: set[tuple[str, int]],
    status: dict[str, Any],
    *,
    stage: str,
    event: str,
    arrival_ns: int,
    number: int,
) -> tuple[str, int]:
    where = f"line {number} ({event})"
    index = as_int(opt(status, "request"), f"{where}: request")
    phase = as_str(opt(status, "phase"), f"{where}: phase")
    if phase not in PHASES:
        raise Problem(f"{where}: phase must be one of {', '.join(PHASES)}, found {phase!r}")
    lmx_time = as_str(opt(status, "time"), f"{where}: time")
    try:
        datetime.fromisoformat(lmx_time)
    except ValueError:
        raise Problem(f"{where}: time {lmx_time!r} is not an RFC 3339 timestamp") from None
    key = (phase, index)
    if key in ended:  # its window is gone already; a request that ended had its start and its end
        if stage in ("start", "end"):
            raise Problem(f"{where}: {phase} request {index} has a second {event}")
        raise Problem(f"{where}: {phase} request {index} already ended")
    request = requests.get(key)
    if request is None:
        if stage != "start":
            raise Problem(f"{where}: {phase} request {index} has no request_start before it")
        request = requests[key] = _Request(first_line=number)
    if stage in request.stamps:
        raise Problem(f"{where}: {phase} request {index} has a second {event}")
    request.stamps[stage] = arrival_ns
    request.lmx_times[stage] = lmx_time
    if stage == "end":
        for name, attr in (("promptTokens", "prompt_tokens"), ("outputTokens", "completion_tokens")):
            if opt(status, name) is not None:
                setattr(request, attr, as_count(status[name], f"{where}: {name}"))
    return key


def _window(path: Path, key: tuple[str, int], request: _Request) -> Window:
    phase, index = key
    where = f"{phase} request {index} (from line {request.first_line})"
    if "end" not in request.stamps:
        raise Problem(f"{where}: no request_end (was the run cut short?)")
    source = base_source(FORMAT, path, "arrival_ns", MAPPING, 1)
    source.update(low_resolution=True, request_index=index, lmx_time={**request.lmx_times})
    return checked(
        where,
        Window(
            id=f"lmx-{phase}-{index}",
            phase=phase,
            t_start_ns=request.stamps["start"],
            t_end_ns=request.stamps["end"],
            t_first_token_ns=request.stamps.get("first_token"),
            prompt_tokens=request.prompt_tokens,
            completion_tokens=request.completion_tokens,
            source=source,
        ),
    )
