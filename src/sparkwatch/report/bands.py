"""The request windows as bands behind every panel, and how many of them are drawn at once.

Each window is one to three bands (prefill: start → first token, decode: first → last token; a window
without token stamps is one ``request`` band; a failed request one ``failed`` band). Drawing all of a long
run's bands in all 16 panels is what made an 8 h report slow (20 000 rectangles per panel, seconds of
Chromium time) while showing nothing a screen can resolve: 10 000 windows over 1100 px is 9 per pixel.
So a run with more than ``FINE_WINDOWS`` windows is drawn zoomed out as ``merged`` bands — the windows of
one phase whose gaps are shorter than a series bucket joined into one request band — and, once the view
is narrow enough to hold about ``FINE_WINDOWS`` windows, as each window's own bands inside the view. Every
window stays in the ``bands`` dataset (the table's rows and a click zoom to each)."""

from __future__ import annotations

from typing import Any

from sparkwatch.core.windows import WINDOW_FIELDS, Window

Columns = dict[str, list[Any]]

#: About this many windows' bands are drawn at once; a run with fewer is always drawn window by window.
FINE_WINDOWS = 1000
#: Colour by phase and part; the darker band of a window is its prefill.
BAND_KINDS = (
    ("timed · prefill", "#1f5fa8"),
    ("timed · decode", "#8fb4e0"),
    ("timed · request", "#b8cce4"),
    ("warmup · prefill", "#c76b00"),
    ("warmup · decode", "#f2c38f"),
    ("warmup · request", "#f5d7b0"),
    ("other · prefill", "#555555"),
    ("other · decode", "#bbbbbb"),
    ("other · request", "#d5d5d5"),
    ("failed", "#d62728"),
)


def _phase(window: dict[str, Any]) -> str:
    return window["phase"] if window["phase"] in ("timed", "warmup") else "other"


def _failed(window: dict[str, Any]) -> bool:
    """A request that did not complete, by the rule the export judged it with (core.windows.Window.failure:
    an answer not 2xx, or a source note of one cut short or failed)."""
    fields: dict[str, Any] = {name: window.get(name) for name in WINDOW_FIELDS}
    return Window(**{**fields, "source": window.get("source") or {}}).failure() is not None


def band_columns(export: dict[str, Any], t0: int) -> Columns:
    """Every window's own bands, times in seconds from ``t0`` (ns)."""
    out: Columns = {"t": [], "t2": [], "k": [], "id": []}

    def add(a_ns: int, b_ns: int, kind: str, window_id: str) -> None:
        out["t"].append(round((a_ns - t0) / 1e9, 3))
        out["t2"].append(round((b_ns - t0) / 1e9, 3))
        out["k"].append(kind)
        out["id"].append(window_id)

    for w in export["windows"]:
        first, last = w.get("t_first_token_ns"), w.get("t_last_token_ns")
        if _failed(w):
            add(w["t_start_ns"], w["t_end_ns"], "failed", w["id"])
        elif first is not None and last is not None:
            add(w["t_start_ns"], first, f"{_phase(w)} · prefill", w["id"])
            add(first, last, f"{_phase(w)} · decode", w["id"])
        else:
            add(w["t_start_ns"], w["t_end_ns"], f"{_phase(w)} · request", w["id"])
    return out


def merged_columns(export: dict[str, Any], t0: int, join_s: float) -> Columns:
    """The windows as request bands, per phase (failed requests on their own), those whose gap is shorter
    than ``join_s`` joined: what the zoomed-out view of a long run draws. ``n``: windows in each band."""
    spans: dict[str, list[list[float]]] = {}
    for w in sorted(export["windows"], key=lambda w: w["t_start_ns"]):
        kind = "failed" if _failed(w) else f"{_phase(w)} · request"
        a, b = (w["t_start_ns"] - t0) / 1e9, (w["t_end_ns"] - t0) / 1e9
        kept = spans.setdefault(kind, [])
        if kept and a - kept[-1][1] < join_s:
            kept[-1][1] = max(kept[-1][1], b)
            kept[-1][2] += 1
        else:
            kept.append([a, b, 1])
    out: Columns = {"t": [], "t2": [], "k": [], "n": []}
    for kind, pieces in spans.items():
        for a, b, count in pieces:
            out["t"].append(round(a, 3))
            out["t2"].append(round(b, 3))
            out["k"].append(kind)
            out["n"].append(int(count))
    return out


def fine_when(windows: int, duration_s: float, zoom: str) -> str:
    """A Vega expression, true while each window's own bands are drawn: always for a run with few
    windows, else once the view (the ``zoom`` interval's ``t``) spans what holds about FINE_WINDOWS."""
    if windows <= FINE_WINDOWS or duration_s <= 0:
        return "true"
    span_s = duration_s * FINE_WINDOWS / windows
    return f"({zoom}_t != null && {zoom}_t[1] - {zoom}_t[0] <= {span_s:.3f})"


def in_view(zoom: str) -> str:
    """A Vega expression, true for a band that meets the zoomed view (every band when not zoomed)."""
    return f"({zoom}_t == null || (datum.t2 >= {zoom}_t[0] && datum.t <= {zoom}_t[1]))"
