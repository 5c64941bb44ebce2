"""Request windows and measurement scopes (sets of disjoint time intervals on the coordinator's clock).

A window has one model here: its fields, the rules every window obeys (:func:`check_window`) and its JSON
forms. The API, the importers, the proxy and the store all use it.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from sparkwatch.core.columns import int_column
from sparkwatch.defaults import CONTROL_CHARS_RE, NOT_ONE_LINE, PHASE_RE, ScopeKind
from sparkwatch_agent.shared.strict_text import cut_short, quoted_number

NS_MAX = 2**63 - 1  # the store keeps 64-bit signed integers
EPOCH_NS_MIN = 946_684_800 * 10**9  # 2000-01-01T00:00:00Z: anything earlier is not a Unix epoch ns stamp
EPOCH_NS_MAX = (
    4_102_444_800 * 10**9
)  # 2100-01-01T00:00:00Z: far from 2^63, so clock arithmetic never overflows
#: A run takes windows from this long before its start to this long after its end (or now, while open).
RUN_REACH_NS = 24 * 3600 * 10**9
#: How far outside a closed span (an ended run, an export's --start..--end) a window may lie: a harness
#: host's clock may be off ours by what NTP allows (MLPerf Power accepts 400 ms) and lmx stamps whole
#: seconds; a request served after the span ended is not the span's.
SPAN_SLACK_NS = 2 * 10**9
#: ``source.clock`` of a window stamped on the coordinator's clock (the proxy's, mapped by its probes).
COORDINATOR_CLOCK = "coordinator"
#: A mark's window's ``source`` (as pairs: each window gets its own dict).
MARK_SOURCE = (("kind", "mark"), ("clock", COORDINATOR_CLOCK))
ID_MAX_CHARS = 200
#: The notes a window's source carries when its request did not complete (the proxy's, an importer's
#: ``harness_failed``, genai-perf's ``upstream_aborted``), with what they mean.
CUT_SHORT = MappingProxyType(
    {
        "upstream_broke_off": "the upstream broke off its answer",
        "upstream_timed_out": "the upstream's answer outlasted the proxy's upstream timeout",
        "client_left_unfinished": "the client hung up before the answer finished",
        "proxy_closed_unfinished": "the proxy closed (the run ended, or it was stopped) before the answer"
        " finished",
        "upstream_unfinished": "the upstream's stream ended without [DONE] or a finish reason",
        "upstream_error": "the upstream reported an error inside its answer",
        "upstream_aborted": "the upstream ended its answer with finish reason 'abort' or 'error' (or a"
        " response's status 'cancelled'): it gave the request up",
        "upstream_no_completion": "the upstream's answer (2xx) held no completion: no finish reason (a JSON"
        " choice's, a response's ended status, a message's stop reason, streamed or not)",
        "proxy_failed": "the proxy failed while relaying or reading the answer (a fault of sparkwatch's own:"
        " its log has the traceback)",
        "harness_failed": "the harness recorded the request as failed or unfinished",
    }
)

#: Finish reasons of a request the server gave up (vLLM's FinishReason strings "abort" and "error", next to
#: "stop", "length" and "repetition"; SGLang's OpenAI answers say "abort" for a request aborted without an
#: error status; a Responses API answer's status "cancelled", vLLM's for an aborted request): such an answer
#: finished, but it did not complete (``upstream_aborted`` in CUT_SHORT).
GIVEN_UP = frozenset({"abort", "error", "cancelled"})
FINISH_REASON_MAX_CHARS = 64
REQUIRED_FIELDS = ("id", "phase", "t_start_ns", "t_end_ns")
STAMP_FIELDS = ("t_first_byte_ns", "t_first_token_ns", "t_last_token_ns")
COUNT_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens")
#: The optional fields by JSON type (``source`` aside: an object).
OPTIONAL_INT_FIELDS = (*STAMP_FIELDS, *COUNT_FIELDS, "http_status")
OPTIONAL_STR_FIELDS = ("finish_reason",)


class WindowError(ValueError):
    """A window that breaks a rule; ``str()`` is ``"<field>: <what is wrong>"``."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Window:
    """One benchmark request, Unix epoch ns on the coordinator's clock."""

    id: str
    phase: str
    t_start_ns: int
    t_end_ns: int
    t_first_byte_ns: int | None = None
    t_first_token_ns: int | None = None
    t_last_token_ns: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    http_status: int | None = None
    finish_reason: str | None = None
    source: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Every field by name, as the export shows a window."""
        return dict(zip(WINDOW_FIELDS, _field_values(self), strict=True))

    def to_body(self) -> dict[str, Any]:
        """The API's window body: unknown fields left out."""
        return {k: v for k, v in self.to_json().items() if v is not None or k == "source"}

    @property
    def failed(self) -> bool:
        """A request that did not complete: its time is not serving the benchmark, so no scope measures it."""
        return self.failure() is not None

    def failure(self) -> str | None:
        """Why the request did not complete, if it did not: an answer not 2xx (an error, a redirect the
        client was left to follow, a 1xx), or a source note of
        CUT_SHORT (an answer the proxy saw cut short, unfinished or carrying an error; a request the
        harness recorded as failed)."""
        if self.http_status is not None and not 200 <= self.http_status < 300:
            return f"HTTP status {self.http_status}: a request not answered with 2xx is not measured"
        if CUT_SHORT.keys().isdisjoint(self.source):  # most windows: asked of each, several times
            return None
        for note, why in CUT_SHORT.items():
            if self.source.get(note) is True:
                return f"{why} (source.{note}): a request that did not complete is not measured"
        return None

    def span(self, kind: ScopeKind) -> tuple[int, int] | None:
        """The part of this request a scope measures; ``None`` when the window lacks the needed stamps."""
        if kind == "decode":
            if self.t_first_token_ns is None or self.t_last_token_ns is None:
                return None
            return self.t_first_token_ns, self.t_last_token_ns
        return self.t_start_ns, self.t_end_ns


#: Window's fields in declaration order (the store's columns have the same names).
WINDOW_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Window))
_field_values = operator.attrgetter(*WINDOW_FIELDS)  # all of them in one call (an export reads 10 000)


def check_window(w: Window) -> Window:
    """``w`` if it obeys every rule a stored window obeys, else :class:`WindowError` for the first broken."""
    if not 1 <= len(w.id) <= ID_MAX_CHARS:
        raise WindowError("id", f"must be 1..{ID_MAX_CHARS} characters, found {len(w.id)}")
    for name in ("id", "finish_reason"):  # one line wherever they show, as a run's name (defaults.check_name)
        text = getattr(w, name)
        if text is not None and (bad := CONTROL_CHARS_RE.search(text)):
            raise WindowError(name, f"{NOT_ONE_LINE}: {bad[0]!r}")
    check_measured(w)
    if w.finish_reason is not None and not 1 <= len(w.finish_reason) <= FINISH_REASON_MAX_CHARS:
        raise WindowError("finish_reason", f"must be 1..{FINISH_REASON_MAX_CHARS} characters")
    check_source(w.source)
    return w


def check_measured(w: Window) -> None:
    """The rules the figures and the export's schema rest on (the phase, epoch stamps in order, the counts,
    the status): what a store checks again for each window it reads, with its source's (check_source, once
    per source shared by many). A row edited outside sparkwatch with a phase of ``Timed`` left its window out
    of every figure, in silence. The rules of its text's shape were added over time: a window stored before
    one was still reads."""
    if not PHASE_RE.fullmatch(w.phase):  # not .match: its "$" also takes a trailing newline
        raise WindowError("phase", f"{w.phase!r} must match {PHASE_RE.pattern}")
    for name in ("t_start_ns", "t_end_ns"):
        _epoch_ns(name, getattr(w, name))
    check_numbers(w)


def check_numbers(w: Window) -> None:
    """The rules of ``check_window`` that the figures rest on (the stamps' order, the counts, the status),
    for a window already typed."""
    if w.t_end_ns < w.t_start_ns:
        end, start = quoted_number(w.t_end_ns), quoted_number(w.t_start_ns)
        raise WindowError("t_end_ns", f"ends before it starts ({end} < t_start_ns {start})")
    for name in STAMP_FIELDS:
        value = getattr(w, name)
        if value is not None and not w.t_start_ns <= value <= w.t_end_ns:
            span = f"[t_start_ns {quoted_number(w.t_start_ns)}, t_end_ns {quoted_number(w.t_end_ns)}]"
            raise WindowError(name, f"{quoted_number(value)} lies outside {span}")
    first, last = w.t_first_token_ns, w.t_last_token_ns
    if first is not None and last is not None and last < first:
        shown = f"last token ({quoted_number(last)}) before first token ({quoted_number(first)})"
        raise WindowError("t_last_token_ns", shown)
    for name in COUNT_FIELDS:
        count = getattr(w, name)
        if count is not None and not 0 <= count <= NS_MAX:
            raise WindowError(name, f"must be a non-negative 64-bit integer, found {quoted_number(count)}")
    if w.http_status is not None and not 100 <= w.http_status <= 599:
        raise WindowError("http_status", f"{w.http_status} is not an HTTP status code")


def check_source(source: dict[str, Any]) -> None:
    """A window's source as the export's encoder carries it: no NaN, 64-bit integers, no lone surrogate, and
    nesting that leaves room inside orjson's 254 levels for the export around it (8 levels kept: 246 left);
    its notes of a request cut short true or false (``failure`` reads ``is True``: "yes" or 1 left a failed
    request measured, in silence)."""
    try:
        out = orjson.dumps([[[[[[[[source]]]]]]]])
        if b"null" in out:  # orjson writes NaN and infinity as null; json tells them from None (4x slower)
            json.dumps(source, allow_nan=False)
    except (TypeError, ValueError) as exc:
        why = "no NaN, infinity, integer beyond 64 bits, lone surrogate or nesting past 246 levels"
        raise WindowError("source", f"is not JSON the export can carry ({why}): {exc}") from None
    for note in CUT_SHORT:
        if note in source and not isinstance(source[note], bool):
            found = cut_short(repr(source[note]))
            raise WindowError(f"source.{note}", f"must be true or false, found {found}")


def epoch_ns_problem(value: int) -> str | None:
    """Why ``value`` cannot be a Unix epoch ns stamp (seconds, ms and monotonic values are caught), if so."""
    if EPOCH_NS_MIN <= value < EPOCH_NS_MAX:
        return None
    return f"{quoted_number(value)} is not Unix epoch nanoseconds (before 2000 or after 2100)"


def _epoch_ns(name: str, value: int) -> None:
    problem = epoch_ns_problem(value)
    if problem is not None:
        raise WindowError(name, problem)


def outside_run(windows: Iterable[Window], run_start_ns: int, run_end_ns: int) -> str | None:
    """Why a window cannot belong to a run spanning [run_start_ns, run_end_ns], if one cannot: it starts
    more than ``RUN_REACH_NS`` before the run or ends more than that after it."""
    lo, hi = run_start_ns - RUN_REACH_NS, run_end_ns + RUN_REACH_NS
    for w in windows:
        if w.t_start_ns < lo or w.t_end_ns > hi:
            return (
                f"window {w.id!r} ([{w.t_start_ns}, {w.t_end_ns}]) lies more than 24 h outside the run"
                f" ([{run_start_ns}, {run_end_ns}])"
            )
    return None


def outside_span(windows: Iterable[Window], start_ns: int, end_ns: int) -> list[Window]:
    """The windows a closed span [start_ns, end_ns] does not hold, give or take ``SPAN_SLACK_NS``; a window
    stamped on the coordinator's clock (the proxy's, ``source.clock``) that starts after the span's end
    (past its stated clock uncertainty) is outside it too: the slack is for a harness host's clock, and
    such a request was made after the run."""
    lo = start_ns - SPAN_SLACK_NS
    return [w for w in windows if w.t_start_ns < lo or after_end(w, end_ns)]


def after_end(w: Window, end_ns: int) -> bool:
    """Whether ``w`` lies past a closed span's end: it ends more than ``SPAN_SLACK_NS`` after it, or starts
    after it by more than :func:`our_slack_ns`."""
    return w.t_end_ns > end_ns + SPAN_SLACK_NS or w.t_start_ns > end_ns + our_slack_ns(w)


def our_slack_ns(w: Window) -> int:
    """How long after a closed span's end a window may start: ``SPAN_SLACK_NS``, or for one stamped on the
    coordinator's clock its ``source.clock_uncertainty_ns`` (0 when not stated), at most that."""
    if w.source.get("clock") != COORDINATOR_CLOCK:
        return SPAN_SLACK_NS
    stated = w.source.get("clock_uncertainty_ns")
    if isinstance(stated, int) and not isinstance(stated, bool) and stated >= 0:
        return min(stated, SPAN_SLACK_NS)
    return 0


def duplicate_id(windows: Iterable[Window]) -> str | None:
    """The first window id that appears twice, if any."""
    seen: set[str] = set()
    for w in windows:
        if w.id in seen:
            return w.id
        seen.add(w.id)
    return None


@dataclass(frozen=True, slots=True)
class Scope:
    """A union of disjoint, sorted, half-open intervals [starts[i], ends[i])."""

    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]

    @property
    def seconds(self) -> float:
        return float(np.sum(self.ends - self.starts)) / 1e9

    @property
    def empty(self) -> bool:
        return len(self.starts) == 0

    def contains(self, t_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which timestamps fall inside the scope."""
        piece = np.searchsorted(self.starts, t_ns, side="right") - 1
        inside = piece >= 0
        inside[inside] = t_ns[inside] < self.ends[piece[inside]]
        return inside

    def overlaps(self, a_ns: npt.NDArray[np.int64], b_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which intervals [a_ns[i], b_ns[i]] share time with the scope."""
        piece = np.searchsorted(self.starts, b_ns, side="left") - 1  # the last piece starting before b
        out = piece >= 0
        out[out] = self.ends[piece[out]] > a_ns[out]
        return out

    def to_json(self) -> list[list[int]]:
        return [[int(a), int(b)] for a, b in zip(self.starts, self.ends, strict=True)]


def union(spans: Iterable[tuple[int, int]]) -> Scope:
    """Merge possibly overlapping [a, b) spans into a Scope; empty and reversed spans are dropped."""
    kept = [s for s in spans if s[1] > s[0]]
    if not kept:
        return Scope(np.empty(0, np.int64), np.empty(0, np.int64))
    starts = int_column((s[0] for s in kept), len(kept))
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    ends = int_column((s[1] for s in kept), len(kept))[order]
    running_end = np.maximum.accumulate(ends)
    # a new piece begins where a start lies beyond every earlier end
    new_piece = np.ones(len(starts), dtype=bool)
    new_piece[1:] = starts[1:] > running_end[:-1]
    first = np.flatnonzero(new_piece)
    last = np.append(first[1:] - 1, len(starts) - 1)
    return Scope(starts[first].copy(), running_end[last].copy())


def scope_for(
    windows: Sequence[Window],
    kind: ScopeKind,
    run_span: tuple[int, int],
    phases: frozenset[str] = frozenset({"timed"}),
) -> Scope:
    """The measured time: the run itself, or the union of the selected phases' request/decode spans."""
    if kind == "run":
        return union([run_span])
    spans = [s for w in windows if w.phase in phases and not w.failed and (s := w.span(kind)) is not None]
    return union(spans)
