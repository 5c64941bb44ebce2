"""The report's figures as one Vega-Lite spec (built with Altair): per node four panels on one shared time
axis that zoom and pan together — power (GPU rail and each system domain, never summed), SM utilisation
(the gate threshold and the gated-out time shaded), unified memory used (its baseline marked) and SM clock
(throttle episodes marked) — with the request windows as bands behind every panel.

The data travel beside the spec as named columnar datasets (``columns``): the page turns them into rows in
the browser, and ``with_rows`` does it here for the static images. A ``None`` value is a gap: Vega-Lite
breaks the line there, so nothing is ever drawn across it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import altair as alt

from sparkwatch.report.bands import BAND_KINDS, band_columns, fine_when, in_view, merged_columns
from sparkwatch.report.facts import a_number, an_object
from sparkwatch_agent.shared.units import GIB

PANEL_WIDTH_PX = 1100
PANEL_HEIGHT_PX = 90
#: Below this duration the time axis is plain seconds; above it, elapsed hours:minutes:seconds.
HMS_AXIS_FROM_S = 1000.0
ZOOM = "zoom"
#: Elapsed time as h:mm:ss (hours past 24 and negative times too), with milliseconds where a tick falls
#: between seconds (a zoomed-in view).
HMS_LABEL = (
    "(datum.value < 0 ? '-' : '') + floor(abs(datum.value) / 3600) + ':'"
    " + format(floor(abs(datum.value) % 3600 / 60), '02d') + ':'"
    " + format(abs(datum.value) % 60, datum.value % 1 ? '06.3f' : '02d')"
)
GATED_OUT_FILL = "#7f7f7f"
THROTTLE_FILL = "#d62728"
SOLID, DASHED = [1, 0], [5, 3]
Columns = dict[str, list[Any]]
#: The datasets every node's panels read (the rest are named ``n<index>_<panel>``).
SHARED = ("bands", "merged", "one")


@dataclass
class Figures:
    """The spec without data, the named datasets (columnar) it reads, and one spec per node for images."""

    spec: dict[str, Any]
    columns: dict[str, Columns] = field(default_factory=dict)
    per_node: list[dict[str, Any]] = field(default_factory=list)


#: What a panel without one value says it lacks (``_unread``), by its dataset's suffix.
UNREAD = {"power": "power", "util": "utilisation", "mem": "memory", "clock": "SM clock"}


def _lines(node: dict[str, Any], kinds: tuple[str, ...], scale: float = 1.0) -> Columns:
    """The node's series of these kinds as one long table: time, value (scaled; None = a gap), label."""
    out: Columns = {"t": [], "v": [], "l": []}
    for line in node["lines"]:
        if line["kind"] not in kinds:
            continue
        label = line["label"]
        out["t"] += line["t_s"]
        out["v"] += [None if v is None else round(v / scale, 3) for v in line["v"]]
        out["l"] += [label] * len(line["t_s"])  # one line per label: labels are never joined
    return out


def _spans(pairs: list[list[float]]) -> Columns:
    return {"t": [p[0] for p in pairs], "t2": [p[1] for p in pairs]}


def _x(duration_s: float, titled: bool, since: str = "the run started") -> alt.X:
    """The shared time axis; only a node's bottom panel carries its title."""
    hms = duration_s >= HMS_AXIS_FROM_S
    title = f"time since {since} (h:mm:ss)" if hms else f"seconds since {since}"
    axis = alt.Axis(
        title=title if titled else None,
        labelExpr=HMS_LABEL if hms else alt.Undefined,
        grid=False,
        tickCount=12,
        labelFlush=True,
    )
    return alt.X("t:Q", axis=axis, scale=alt.Scale(zero=False, nice=False, domain=[0, duration_s]))


def series_start_is_run(export: dict[str, Any]) -> bool:
    return bool(export["series"]["t0_ns"] == export["run"]["t_start_ns"])


def _bands(x: alt.X, fine: str, present: set[str]) -> tuple[alt.Chart, alt.Chart]:
    """Each window's own bands while ``fine`` holds (only those in view), else the merged ones. The legend
    names the kinds of band the run has (``present``): one of a kind it has not, such as the grey of other
    phases' prefill, was read as the gate's grey. A run without windows has no band, and no legend of them
    (it listed every kind)."""
    shown = [(k, c) for k, c in BAND_KINDS if k in present] or list(BAND_KINDS)
    kinds, colours = zip(*shown, strict=True)
    scale = alt.Scale(domain=list(kinds), range=list(colours))
    # one legend for the figure, above it in a row (the band scale is shared by every panel of every node):
    # right of the panels' own legends it made the figure 1 450 px wide, cut on a 1 400 px page
    legend = alt.Legend(orient="top", direction="horizontal") if present else None
    fill = alt.Fill("k:N", title="windows", scale=scale, legend=legend)
    own = (
        alt.Chart(alt.NamedData("bands"))
        .transform_filter(f"{fine} && {in_view(ZOOM)}")
        .mark_rect(clip=True, opacity=0.55)
        .encode(x=x, x2="t2:Q", fill=fill, tooltip=[alt.Tooltip("id:N", title="window"), "k:N"])
    )
    merged = (
        alt.Chart(alt.NamedData("merged"))
        .transform_filter(f"!{fine}")
        .mark_rect(clip=True, opacity=0.55)
        .encode(x=x, x2="t2:Q", fill=fill, tooltip=[alt.Tooltip("n:Q", title="windows"), "k:N"])
    )
    return own, merged


def _line(
    name: str,
    title: str,
    y_scale: alt.Scale | None = None,
    legend: str | None = None,
    dashes: dict[str, list[int]] | None = None,
) -> alt.Chart:
    """A panel's lines, one per label; a panel of several kinds of line (power: the GPU rail and the
    domains; memory: used and page cache) has a legend titled ``legend``; ``dashes``: each label's dash
    pattern, in the same legend."""
    labels = sorted(dashes or ())  # one domain, in the order the colours were given before: one legend
    colours = alt.Scale(domain=labels) if labels else alt.Undefined
    stroke = alt.Stroke("l:N", title=legend, scale=colours, legend=alt.Legend() if legend else None)
    chart: alt.Chart = (
        alt.Chart(alt.NamedData(name))
        .mark_line(clip=True, strokeWidth=1.2, interpolate="linear")
        .encode(x="t:Q", y=alt.Y("v:Q", title=title, scale=y_scale or alt.Scale(zero=False)), stroke=stroke)
    )
    if dashes:
        scale = alt.Scale(domain=labels, range=[dashes[label] for label in labels])
        chart = chart.encode(strokeDash=alt.StrokeDash("l:N", title=legend, scale=scale))
    return chart


def _power_dashes(node: dict[str, Any]) -> dict[str, list[int]]:
    """The GPU rail solid, each system domain dashed: a domain that reads the rail again (spbm's ``gpu``
    beside NVML's) drew over it, the same values in one colour, and the rail seemed missing."""
    return {
        line["label"]: SOLID if line["kind"] == "gpu_power_w" else DASHED
        for line in node["lines"]
        if line["kind"] in ("gpu_power_w", "system_power_w")
    }


def _unread(columns: Columns, what: str) -> list[alt.Chart]:
    """A panel whose lines hold no value (a GPU whose power NVML does not support) says so in its middle:
    it was an empty frame without ticks, its legend naming a line that was never drawn."""
    if any(v is not None for v in columns["v"]):
        return []
    chart: alt.Chart = (
        alt.Chart(alt.NamedData("one"))
        .mark_text(color="#666666", fontSize=12)
        .encode(
            x=alt.value(PANEL_WIDTH_PX / 2),
            y=alt.value(PANEL_HEIGHT_PX / 2),
            text=alt.datum(f"no {what} read"),
        )
    )
    return [chart]


def _shade(name: str, colour: str, opacity: float) -> alt.Chart:
    chart: alt.Chart = (
        alt.Chart(alt.NamedData(name))
        .mark_rect(clip=True, opacity=opacity, fill=colour)
        .encode(x="t:Q", x2="t2:Q")
    )
    return chart


def _rule(value: float, colour: str) -> alt.Chart:
    chart: alt.Chart = (
        alt.Chart(alt.NamedData("one")).mark_rule(strokeDash=[6, 3], color=colour).encode(y=alt.datum(value))
    )
    return chart


def node_panels(
    export: dict[str, Any], i: int, node: dict[str, Any], duration_s: float, columns: dict[str, Columns]
) -> dict[str, Any]:
    """One node's four panels (a Vega-Lite ``vconcat``); fills ``columns`` with the datasets they read."""
    fine = fine_when(len(export["windows"]), duration_s, ZOOM)
    p = f"n{i}_"
    columns[p + "power"] = _lines(node, ("gpu_power_w", "system_power_w"))
    columns[p + "util"] = _lines(node, ("util_ratio",))
    columns[p + "mem"] = _lines(node, ("mem_used_bytes", "mem_page_cache_bytes"), GIB)
    columns[p + "clock"] = _lines(node, ("sm_clock_hz",), 1e6)
    columns[p + "gated"] = _spans(node.get("gated_out", []))
    columns[p + "throttle"] = _spans([e["t_s"] for e in node.get("throttle", [])])
    entry = export["nodes"][i] if i < len(export["nodes"]) else {}
    threshold = export["method"]["gate"]["threshold_ratio"]
    baseline = (entry.get("memory_used_bytes") or {}).get("baseline")
    total = a_number(an_object(entry.get("hardware")).get("memory_total_bytes"))
    since = "the run started" if series_start_is_run(export) else "the first window started"
    merged = columns["merged"]["k"] if fine != "true" else []  # a run always drawn window by window
    present = {*columns["bands"]["k"], *merged}
    bands = _bands(_x(duration_s, titled=False, since=since), fine, present)
    bottom = _bands(_x(duration_s, titled=True, since=since), fine, present)
    mem_scale = alt.Scale(domain=[0, total / GIB]) if total else alt.Scale(zero=True)
    baseline_rule = [] if baseline is None else [_rule(baseline / GIB, "#2ca02c")]
    unread = {k: _unread(columns[p + k], what) for k, what in UNREAD.items()}
    # a panel without a value: no extent to scale, no line for a legend to name
    power_scale, power_legend = (alt.Scale(domain=[0, 1]), None) if unread["power"] else (None, "power")
    power_dashes = None if unread["power"] else _power_dashes(node)
    mem_legend = None if unread["mem"] else "memory"
    panels = [
        [*bands, _line(p + "power", "power W", power_scale, power_legend, power_dashes), *unread["power"]],
        [
            *bands,
            _shade(p + "gated", GATED_OUT_FILL, 0.45),
            _line(p + "util", "SM util", alt.Scale(domain=[0, 1])),
            _rule(threshold, "#333333"),
            *unread["util"],
        ],
        # the baseline under the lines: while memory holds at its baseline the rule hid the line
        [*bands, *baseline_rule, _line(p + "mem", "memory GiB", mem_scale, mem_legend), *unread["mem"]],
        [
            *bottom,
            _shade(p + "throttle", THROTTLE_FILL, 0.35),
            _line(p + "clock", "SM MHz"),
            *unread["clock"],
        ],
    ]
    return {
        "vconcat": [
            {"layer": [_unit(c) for c in layers], "width": PANEL_WIDTH_PX, "height": PANEL_HEIGHT_PX}
            for layers in panels
        ],
        "spacing": 6,
        # a long node name is cut (an ellipsis) at the panels' width: the summary and facts show it whole
        "title": {"text": node["node"], "anchor": "start", "fontSize": 14, "limit": PANEL_WIDTH_PX},
        "resolve": {"scale": {"stroke": "independent", "strokeDash": "independent"}},
    }


def figures(export: dict[str, Any]) -> Figures | None:
    """The report's figures, or ``None`` when the export carries no ``series`` block or no node in it (no
    panel to draw, nor to zoom). Each mark is an Altair chart; the layers, panels and nodes are put together
    as the Vega-Lite dicts they compile to, because Altair's composition deep-copies every sub-chart at
    each level (2-3 s for 16 panels)."""
    series = export.get("series")
    if not series or not series.get("nodes"):
        return None
    duration_s = (series["t_end_ns"] - series["t0_ns"]) / 1e9
    t0 = series["t0_ns"]
    bands = {"bands": band_columns(export, t0), "merged": merged_columns(export, t0, series["bucket_s"])}
    out = Figures(spec={}, columns={**bands, "one": {"o": [0]}})
    nodes = [node_panels(export, i, node, duration_s, out.columns) for i, node in enumerate(series["nodes"])]
    resolve = {"scale": {"x": "shared", "stroke": "independent", "strokeDash": "independent"}}
    views = _name_panels(nodes)
    top = {"$schema": alt.SCHEMA_URL, "resolve": resolve}
    out.spec = {**top, "vconcat": nodes, "spacing": 28, "params": [_zoom([v for n in views for v in n])]}
    out.per_node = [
        {**top, "vconcat": [node], "params": [_zoom(names)]} for node, names in zip(nodes, views, strict=True)
    ]
    return out


def _unit(chart: alt.Chart) -> dict[str, Any]:
    """One mark's Vega-Lite dict, without what only a top-level spec carries."""
    spec: dict[str, Any] = chart.to_dict(validate=False)
    for key in ("$schema", "config", "datasets"):
        spec.pop(key, None)
    return spec


def _name_panels(nodes: list[dict[str, Any]]) -> list[list[str]]:
    """Name each panel's first layer (``n<node>_p<panel>``): the views the zoom parameter lives in."""
    names: list[list[str]] = []
    for i, node in enumerate(nodes):
        names.append([])
        for j, panel in enumerate(node["vconcat"]):
            panel["layer"][0]["name"] = f"n{i}_p{j}"
            names[-1].append(f"n{i}_p{j}")
    return names


def _zoom(views: list[str]) -> dict[str, Any]:
    """The one zoom: an x interval bound to the (shared) scale, so a wheel or drag on any panel moves all."""
    select = {"type": "interval", "encodings": ["x"]}
    return {"name": ZOOM, "select": select, "bind": "scales", "views": views}


def with_rows(spec: dict[str, Any], columns: dict[str, Columns]) -> dict[str, Any]:
    """The spec with its datasets as rows (what vl-convert takes for the static images)."""
    datasets = {
        name: [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]
        for name, cols in columns.items()
    }
    return {**spec, "datasets": datasets}
