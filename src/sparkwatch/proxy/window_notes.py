"""What a proxy window's source says of how its answer went: the notes a window's verdict reads
(core.windows.CUT_SHORT), from what the relay saw and what the watcher read."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sparkwatch.core.windows import GIVEN_UP
from sparkwatch.proxy.sse_watch import MAX_JSON_BODY_BYTES, ResponseStamps, ResponseWatcher

log = logging.getLogger(__name__)

#: The relay's notes after which the watcher did not see the answer's end: nothing it saw says how it ended.
RELAY_CUT = ("upstream_broke_off", "upstream_timed_out", "compressed", "proxy_failed")


def finished(
    watcher: ResponseWatcher, t_end_ns: int, notes: Mapping[str, bool]
) -> tuple[ResponseStamps, Mapping[str, bool]]:
    """The watcher's stamps once the answer ended, and the relay's notes. A fault of the watcher's own there
    fails the window (``proxy_failed``) instead of losing it: the request still ran, and its span is known."""
    try:
        return watcher.finish(t_end_ns), notes
    except Exception:
        log.exception("the proxy failed reading the end of an answer; its window is kept, not measured")
        return watcher.stamps, {**notes, "proxy_failed": True}


def answer_notes(
    watcher: ResponseWatcher, status: int | None, notes: Mapping[str, bool]
) -> dict[str, object]:
    """What the window's source says of how the answer went (``notes``: what the relay saw), and why it did
    not complete where it did not (core.windows.CUT_SHORT)."""
    stamps = watcher.stamps
    out: dict[str, object] = {}
    if stamps.unparsed_events:
        out["unparsed_events"] = stamps.unparsed_events
    if stamps.body_too_large:
        out["note"] = f"a JSON answer over {MAX_JSON_BODY_BYTES >> 20} MiB: forwarded, not read for usage"
    if notes.get("compressed"):
        out["note"] = "compressed response: only first byte and end were stamped"
    out.update({k: True for k, v in notes.items() if v and k != "compressed"})
    finished = stamps.done or stamps.finish_reason is not None
    if notes.get("client_disconnected") and not finished:
        # a client that left after the last token (on [DONE], before the upstream's end) was answered
        out["client_left_unfinished"] = True
    elif notes.get("proxy_closed") and not finished:
        out["proxy_closed_unfinished"] = True
    elif _unfinished_stream(watcher, status, notes) and not finished:
        out["upstream_unfinished"] = True  # a clean end of a stream that never said it was done
    elif _read_whole(watcher, status, notes) and not finished:
        out["upstream_no_completion"] = True  # cut short by a closed connection, an HTML page, {}, a 204
    elif stamps.no_stop_reason and stamps.finish_reason is None:
        out["upstream_no_completion"] = True  # a Messages stream that stopped without a stop reason (vLLM's
        # for a request it aborted, or one that failed): not a message that completed
    if stamps.error:
        out["upstream_error"] = True
    if stamps.finish_reason in GIVEN_UP:
        out["upstream_aborted"] = True
    return out


def _unfinished_stream(watcher: ResponseWatcher, status: int | None, notes: Mapping[str, bool]) -> bool:
    """A 2xx event stream the proxy read (not compressed) that ended without being cut: whether it ended
    without [DONE] or a finish reason is then the upstream's to answer for."""
    cut = any(notes.get(k) for k in RELAY_CUT)
    return watcher.streaming and status is not None and 200 <= status < 300 and not cut


def _read_whole(watcher: ResponseWatcher, status: int | None, notes: Mapping[str, bool]) -> bool:
    """A 2xx answer not streamed that the proxy read whole (not cut, compressed or past the size it parses):
    a completion's JSON always holds a finish reason (a choice's, a response's ended status, a message's
    stop reason), so one without any served none."""
    cut = any(notes.get(k) for k in RELAY_CUT)
    whole = not cut and not watcher.stamps.body_too_large
    return not watcher.streaming and status is not None and 200 <= status < 300 and whole


def within(t_ns: int | None, lo: int, hi: int) -> int | None:
    """A stamp held inside its window's span (a clock that stepped mid-request must not make it invalid)."""
    return None if t_ns is None else min(max(t_ns, lo), hi)
