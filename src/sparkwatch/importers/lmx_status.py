"""The lmx status capture that ``sparkwatch run`` writes → request windows, rebuilt from lmx's real events.

lmx (``lmx speed-test run … --json-status``) prints one compact JSON object per line on stderr, keys in any
order, ``time`` RFC 3339 UTC to the whole second (LottoLottoLotto/localmaxxing-cli cmd/lmx/main.go
``printStatus``, @338a68be). ``sparkwatch run`` stamps each on arrival: ``{"t_arrival_ns", "status"}``.
No event names its request, so windows come from the order of events (docs/importers.md, "lmx-status"):

- warm-up k: from the arrival of ``endpoint_warmup_request {index: k}`` to the next warm-up request's
  arrival, or to the first timed request's start; its first token is the ``first_token_received`` between;
- timed request k of iteration i (``lmx-it{i}-r{k}``, k in order of first-token arrival): first token = the
  arrival of its ``first_token_received``, start = first token − ``ttftMs``, end = the arrival of
  ``endpoint_iteration_complete {iteration: i}`` (an upper bound: lmx counts tokens before printing it);
  last token = first token + (output tokens − 1) / ``tokSOut`` when lmx's payload file gives the count.

The arrival stamps lag lmx's own clock by the pipe latency (milliseconds); lmx's ``time`` is not used.
Unknown events are counted and ignored. The file is read twice (a survey for the payload's path, then
the windows), a line at a time: what is held is one iteration's first tokens, never the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from sparkwatch.core.windows import Window
from sparkwatch.importers.common import (
    ClockAnchor,
    Problem,
    as_int,
    as_number,
    as_object,
    base_source,
    checked,
    epoch_ns,
    looks_like,
    opt,
    read_jsonl,
)
from sparkwatch.importers.lmx_payload import Payload, Tokens, locate, read_payload, tokens_for

FORMAT = "lmx-status"
SOURCE = "LottoLottoLotto/localmaxxing-cli cmd/lmx/main.go @338a68be"
MAPPING: dict[str, object] = {
    "kind": "arrival",
    "rule": (
        "t_arrival_ns: when lmx's status line arrived on sparkwatch run's stderr pipe, on its proxy's clock"
        " (the coordinator's) when it ran one, else on its host's wall clock"
    ),
}
NS_PER_MS = 1_000_000
#: How far a line's arrival may lie before an earlier line's: the proxy clock's line refitted, a wall clock
#: slewed. More (a capture spliced from two, a stamp damaged) made up windows of a time no request took.
ARRIVAL_BACK_NS = 1_000_000_000
#: Events of lmx's remote speed test (and Ollama's, which streams nothing); others are counted as unknown.
KNOWN_EVENTS = frozenset(
    {
        "speed_test_mode_selected", "speed_test_remote_start", "served_model_detected",
        "served_model_fallback", "remote_quantization_detected", "remote_quantization_mismatch",
        "remote_model_alias", "hf_id_candidates_found", "hf_id_candidates_empty", "hf_id_search_unavailable",
        "remote_model_query_from_filename", "endpoint_warmup_request", "first_token_received",
        "prompt_token_count_adjusted", "endpoint_iteration_complete", "token_count_source",
        "speed_test_payload_ready", "speed_test_payload_file_written", "speed_test_run_saved",
        "speed_test_payload_status", "error", "ollama_warmup_request", "ollama_iteration_complete",
    }
)  # fmt: skip
MAX_NAMES = 20  # distinct unknown event names (and lmx errors) kept for the notes
PIPE_LATENCY = (
    "each arrival stamp lags the moment lmx printed the line by the stderr pipe and sparkwatch's read"
    " (milliseconds, not bounded by lmx); lmx's own time field (whole seconds) is not used"
)


@dataclass(slots=True)
class Summary:
    """What a pass over the capture found besides windows: for the notes and every window's source."""

    unknown_events: dict[str, int] = field(default_factory=dict)
    other_json_lines: int = 0
    errors: list[str] = field(default_factory=list)
    payload_path: Any = None
    payload_path_absolute: Any = None
    output_token_source: str | None = None
    iterations: int | None = None
    first_tokens: int = 0
    without_first_token: int = 0  # timed requests lmx counted that printed no first token (--no-stream)
    unfinished: int = 0  # first tokens of an iteration that never completed
    warmups_unended: int = 0


@dataclass(frozen=True, slots=True)
class _FirstToken:
    arrival_ns: int
    ttft_ms: float

    @property
    def start_ns(self) -> int:
        return self.arrival_ns - round(Fraction(self.ttft_ms) * NS_PER_MS)


@dataclass(slots=True)
class _Warmup:
    index: int
    arrival_ns: int
    first_token: _FirstToken | None = None


@dataclass(frozen=True, slots=True)
class _Request:
    """One reconstructed request, before its window."""

    phase: str
    iteration: int  # 0 for a warm-up
    index: int  # k within the iteration (order of first-token arrival), or the warm-up's index
    t_start_ns: int
    t_end_ns: int
    first: _FirstToken | None
    end_method: str
    requests: int = 1  # first tokens in the iteration
    tok_s_out: float | None = None  # the status line's, when it is this request's (one per iteration)


def parse(path: Path, clock_anchor: ClockAnchor | None = None) -> Iterator[Window]:
    """The windows of a capture; lmx's payload file is looked for from this process's working directory
    (under ``sparkwatch run``, CMD's)."""
    yield from read_capture(path, Path.cwd())


def read_capture(path: Path, workdir: Path) -> Iterator[Window]:
    """The windows of a capture, token counts from the payload file its status lines name."""
    summary = survey(path)
    payload, why = payload_of(summary, workdir)
    made = 0
    for request in _walk(path, Summary()):
        made += 1
        yield _window(path, request, payload, why, summary)
    if not made:
        raise Problem(f"no request could be reconstructed: {_nothing_reason(summary)}")


def survey(path: Path) -> Summary:
    """A first pass: counts, errors and the payload's path."""
    summary = Summary()
    for _ in _walk(path, summary):
        pass
    return summary


def payload_of(summary: Summary, workdir: Path) -> tuple[Payload | None, str]:
    """The payload file the capture names, or None and why (the token counts are then unknown)."""
    if summary.payload_path is None and summary.payload_path_absolute is None:
        return None, "lmx printed no speed_test_payload_file_written event (no payload file to read)"
    found, why = locate(summary.payload_path, summary.payload_path_absolute, workdir)
    if found is None:
        return None, why
    payload = read_payload(found)
    return (None, payload) if isinstance(payload, str) else (payload, "")


def notes(summary: Summary, payload: Payload | None, why: str) -> list[str]:
    """What the run's output and ``run.notes`` say about the capture; the first line always says where
    the token counts came from."""
    out = [f"token counts: {payload.path}" if payload is not None else f"token counts unknown: {why}"]
    if summary.unknown_events:
        names = ", ".join(f"{name} x{n}" for name, n in summary.unknown_events.items())
        out.append(f"status lines with events sparkwatch does not know were ignored: {names}")
    if summary.other_json_lines:
        out.append(f"{summary.other_json_lines} JSON line(s) without an event name were ignored")
    if summary.errors:
        out.append(f"lmx reported: {'; '.join(summary.errors)}")
    if summary.without_first_token:
        out.append(f"{summary.without_first_token} timed request(s) printed no first token: no window")
    if summary.unfinished:
        out.append(f"{summary.unfinished} timed request(s) of an iteration that never completed: no window")
    if summary.warmups_unended:
        out.append(f"{summary.warmups_unended} warm-up request(s) with no observable end: no window")
    return [f"lmx-status: {text}" for text in out]


def _walk(path: Path, summary: Summary) -> Iterator[_Request]:
    """The requests of the capture in the order their ends are known; ``summary`` collects the rest."""
    warmup: _Warmup | None = None
    pending: list[_FirstToken] = []
    done = 0
    latest = (0, 0)  # the latest arrival so far and its line
    for number, line in read_jsonl(path):
        arrival_ns, status = _unwrap(number, line)
        if arrival_ns < latest[0] - ARRIVAL_BACK_NS:
            back_s = (latest[0] - arrival_ns) / 1e9
            raise Problem(
                f"line {number}: t_arrival_ns is {back_s:.3f} s before line {latest[1]}'s: the lines are"
                " stamped as they arrive, so the capture was spliced or damaged"
            )
        latest = max(latest, (arrival_ns, number))
        event = opt(status, "event")
        if not isinstance(event, str):
            summary.other_json_lines += 1
            continue
        where = f"line {number} ({event[:64]})"
        if event == "endpoint_warmup_request":
            if pending or done:
                raise Problem(f"{where}: a warm-up after timed requests (two lmx runs in one capture?)")
            if warmup is not None:
                yield _warmup_request(warmup, arrival_ns, "the next endpoint_warmup_request's arrival")
            warmup = _Warmup(as_int(opt(status, "index"), f"{where}: index", minimum=1), arrival_ns)
        elif event == "first_token_received":
            summary.first_tokens += 1
            ttft = as_number(opt(status, "ttftMs"), f"{where}: ttftMs")
            if ttft < 0:
                raise Problem(f"{where}: ttftMs must be >= 0, found {ttft}")
            first = _FirstToken(arrival_ns, float(ttft))
            if warmup is not None and warmup.first_token is None:
                warmup.first_token = first
                continue
            if warmup is not None:
                yield _warmup_request(warmup, first.start_ns, "the first timed request's start")
                warmup = None
            pending.append(first)
        elif event == "endpoint_iteration_complete":
            iteration = as_int(opt(status, "iteration"), f"{where}: iteration", minimum=1)
            if iteration != done + 1:
                raise Problem(f"{where}: iteration {iteration} follows iteration {done} (lines lost?)")
            if warmup is not None:  # no timed first token came (--no-stream): its end is not observable
                summary.warmups_unended += 1
                warmup = None
            yield from _iteration(
                status, where, iteration, arrival_ns=arrival_ns, pending=pending, summary=summary
            )
            pending, done = [], iteration
        else:
            _note(event, status, summary)
    summary.warmups_unended += int(warmup is not None)
    summary.unfinished += len(pending)


def _iteration(
    status: dict[str, Any],
    where: str,
    iteration: int,
    *,
    arrival_ns: int,
    pending: list[_FirstToken],
    summary: Summary,
) -> Iterator[_Request]:
    """The timed requests of one iteration, from either shape of ``endpoint_iteration_complete``:
    {iteration, iterations, tokSOut, ttftMs} (``lmx benchmark run``) or {…, concurrency, tokSOut}."""
    concurrency = _optional_int(status, "concurrency", where, minimum=1)
    iterations = _optional_int(status, "iterations", where, minimum=1)
    if iterations is not None:
        summary.iterations = iterations
    if concurrency is not None and len(pending) > concurrency:
        raise Problem(f"{where}: {len(pending)} first tokens for a concurrency of {concurrency}")
    expected = concurrency if concurrency is not None else max(1, len(pending))
    summary.without_first_token += expected - len(pending)
    rate = opt(status, "tokSOut")
    # the line's tokSOut is that of the iteration's last request: this request's only when it is alone
    tok_s_out = float(rate) if expected == 1 and _positive(rate) else None
    for k, first in enumerate(pending, start=1):
        yield _Request(
            phase="timed",
            iteration=iteration,
            index=k,
            t_start_ns=first.start_ns,
            t_end_ns=arrival_ns,
            first=first,
            end_method="endpoint_iteration_complete's arrival: an upper bound (lmx prints it after every"
            " request of the iteration ended and its tokens were counted)",
            requests=len(pending),
            tok_s_out=tok_s_out,
        )


def _warmup_request(warmup: _Warmup, end_ns: int, end_method: str) -> _Request:
    floor = warmup.first_token.arrival_ns if warmup.first_token is not None else warmup.arrival_ns
    return _Request(
        phase="warmup",
        iteration=0,
        index=warmup.index,
        t_start_ns=warmup.arrival_ns,
        t_end_ns=max(end_ns, floor),
        first=warmup.first_token,
        end_method=end_method,
    )


def _note(event: str, status: dict[str, Any], summary: Summary) -> None:
    """The events that give no window: the payload's path, lmx's errors, the token source, the unknown."""
    if event == "speed_test_payload_file_written":
        summary.payload_path = opt(status, "path")
        summary.payload_path_absolute = opt(status, "pathAbsolute")
    elif event == "token_count_source":
        output = opt(status, "output")
        summary.output_token_source = output[:64] if isinstance(output, str) else None
    elif event == "error":
        if len(summary.errors) < MAX_NAMES:
            code, message = opt(status, "code"), opt(status, "message")
            summary.errors.append(f"error {str(code)[:64]}: {str(message)[:200]}")
    elif event not in KNOWN_EVENTS:
        name = event[:64]
        if name in summary.unknown_events or len(summary.unknown_events) < MAX_NAMES:
            summary.unknown_events[name] = summary.unknown_events.get(name, 0) + 1


def _unwrap(number: int, line: Any) -> tuple[int, dict[str, Any]]:
    where = f"line {number}"
    if not isinstance(line, dict) or "t_arrival_ns" not in line or "status" not in line:
        raise Problem(
            f"{where}: not a sparkwatch lmx-status line (needs 't_arrival_ns' and 'status')"
            + looks_like(line)
        )
    arrival_ns = epoch_ns(as_int(line["t_arrival_ns"], f"{where}.t_arrival_ns"), f"{where}.t_arrival_ns")
    return arrival_ns, as_object(line["status"], f"{where}.status")


def _optional_int(status: dict[str, Any], key: str, where: str, *, minimum: int) -> int | None:
    value = opt(status, key)
    return None if value is None else as_int(value, f"{where}: {key}", minimum=minimum)


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")


def _nothing_reason(summary: Summary) -> str:
    if summary.first_tokens == 0:
        return "lmx printed no first_token_received (was it run with --no-stream, or against Ollama?)"
    return "no timed iteration completed and no warm-up ended (was the run cut short?)"


def _window(path: Path, request: _Request, payload: Payload | None, why: str, summary: Summary) -> Window:
    source = base_source(FORMAT, path, "arrival_ns", MAPPING, 1e-9)
    first = request.first
    tokens = _tokens(request, payload, why, summary)
    source.update(
        kind=FORMAT,
        lmx_source=SOURCE,
        request_index=request.index,
        lmx={
            "iteration": request.iteration or None,
            "requests_in_iteration": request.requests,
            "ttftMs": first.ttft_ms if first is not None else None,
            "tokSOut": tokens.tok_s_out,
        },
        method={
            "t_start_ns": "endpoint_warmup_request's arrival"
            if request.phase == "warmup"
            else "first_token_received's arrival - its ttftMs",
            "t_first_token_ns": "first_token_received's arrival",
            "t_end_ns": request.end_method,
            "t_last_token_ns": tokens.last_method,
        },
        uncertainty={"pipe_latency": PIPE_LATENCY, "t_last_token_rounding_ns": tokens.rounding_ns},
        tokens_from=tokens.source,
    )
    if summary.output_token_source is not None:
        source["lmx_output_token_source"] = summary.output_token_source
    if summary.unknown_events:
        source["unknown_events"] = dict(summary.unknown_events)
    t_first = first.arrival_ns if first is not None else None
    t_last = tokens.last_ns(t_first)
    if t_last is not None and t_last > request.t_end_ns:
        source["t_last_token_clamped_by_ns"] = t_last - request.t_end_ns
        t_last = request.t_end_ns
    warmup = request.phase == "warmup"
    return checked(
        f"warm-up {request.index}" if warmup else f"iteration {request.iteration} request {request.index}",
        Window(
            id=f"lmx-warmup-{request.index}" if warmup else f"lmx-it{request.iteration}-r{request.index}",
            phase=request.phase,
            t_start_ns=request.t_start_ns,
            t_end_ns=request.t_end_ns,
            t_first_token_ns=t_first,
            t_last_token_ns=t_last,
            prompt_tokens=tokens.prompt,
            completion_tokens=tokens.output,
            source=source,
        ),
    )


def _tokens(request: _Request, payload: Payload | None, why: str, summary: Summary) -> Tokens:
    if request.phase == "warmup" or request.first is None:
        return Tokens(None, None, None, "lmx reports no token counts for warm-up requests")
    return tokens_for(
        payload,
        why,
        iteration=request.iteration,
        ttft_ms=request.first.ttft_ms,
        requests=request.requests,
        tok_s_out=request.tok_s_out,
        single=summary.iterations == 1,
    )
