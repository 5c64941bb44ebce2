"""The report page: one HTML file holding everything it shows and runs (the Vega, Vega-Lite and
vega-embed bundle from vl-convert, the page's script and style, the figures' data), so it opens from
``file://`` on a machine without network. A Content-Security-Policy forbids every load besides the page
itself, so a missed inline would fail loudly instead of reaching the network."""

from __future__ import annotations

import html
from typing import Any

from sparkwatch.core.json_pieces import json_pieces
from sparkwatch.report import charts, facts
from sparkwatch.report.bundle import Assets
from sparkwatch.report.doubt import doubt_note, figures_doubtful

CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline';"
    " img-src data: blob:; font-src data:"
)


def _script_json(value: Any) -> str:
    """JSON that cannot end or change the <script> element it sits in: ``<``, ``>`` and ``&`` as ``\\u``
    escapes (a window id such as ``<!--<script>`` would otherwise swallow the rest of the page). Encoded in
    pieces (core.json_pieces), so a long run's data never holds the GIL for long in the coordinator."""
    text = b"".join(json_pieces(value)).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _cell(cell: facts.Cell, numeric: bool = True) -> str:
    attrs = ""
    if cell.key is not None:
        attrs = f' data-key="{html.escape(cell.key)}" data-digits="{cell.digits}" data-scale="{cell.scale!r}"'
    cls = ' class="num"' if numeric and cell.key is not None else ""
    # after a space, in its own element: the figure's text stays the export's to its digits
    mark = f' <span class="doubt">{html.escape(cell.mark)}</span>' if cell.mark else ""
    return f"<td{cls}{attrs}>{html.escape(cell.text)}{mark}</td>"


def _dl(pairs: list[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def summary_html(export: dict[str, Any]) -> str:
    """The summary in the shape people publish: per node, then the totals (and, where their power and
    energy figures are marked, why), the method, the unknowns."""
    columns = facts.node_columns(export)
    head = "".join(f'<th class="{"num" if k else ""}">{html.escape(c)}</th>' for k, c in enumerate(columns))
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in facts.node_rows(export))
    totals = "".join(
        f"<tr><th>{html.escape(label)}</th>{_cell(cell)}</tr>" for label, cell in facts.total_rows(export)
    )
    reasons = "".join(f"<li>{html.escape(r)}</li>" for r in facts.null_reasons(export))
    system_note = (
        '<p class="note">system W: each node\'s whole-node domain (a wall meter, else dc_input, sys_total or'
        " power_meter), gated like GPU W; it contains the GPU rail and is never added to it.</p>"
        if facts.has_system(export)
        else '<p class="note">GPU-domain power only: no node has a whole-node power sensor or meter.</p>'
    )
    doubt = (
        f'<p class="note doubt" id="doubt-note">{html.escape(doubt_note(export))}</p>'
        if figures_doubtful(export)
        else ""
    )
    return (
        f'<table id="summary-nodes"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f"{system_note}"
        f'<table id="summary-totals"><tbody>{totals}</tbody></table>{doubt}'
        f'<p class="method">Method: {html.escape(facts.method_line(export))}</p>'
        + (f'<ul class="reasons">{reasons}</ul>' if reasons else "")
    )


def _plots_html(export: dict[str, Any], figures: charts.Figures | None) -> str:
    if figures is None and export.get("series"):
        return '<p class="note" id="no-series">The export measured no node, so there is nothing to plot.</p>'
    if figures is None:
        again = " or ".join(f"<code>{html.escape(c)}</code>" for c in facts.series_commands(export))
        return (
            '<p class="note" id="no-series">This export carries no <code>series</code> block, so there is'
            f" nothing to plot. Export the run again with {again} (or let <code>sparkwatch run</code> write"
            " its report) and build the report from that.</p>"
        )
    series = export["series"]
    return (
        f'<p class="note" id="decimation">Each series is decimated to {series["buckets"]} time buckets of'
        f" {series['bucket_s']:.3g} s: {html.escape(series['about'])} Zoom with the wheel, pan by dragging,"
        " double-click to reset; click a window in the table to zoom to it. Bands: request windows"
        " (prefill: start to first token; decode: first to last token). Grey on the utilisation panel: time"
        " the gate left out inside the measured windows (dashed line: the threshold). Red on the clock panel:"
        " throttle episodes. Memory panel: memory in use (MemTotal − MemAvailable) and, beside it, the page"
        " cache (Cached + SReclaimable), which the kernel can give back but a CUDA allocation waits for;"
        " green dashed line: the memory baseline before the first window.</p>"
        '<p><button id="reset-zoom" type="button">show the whole run</button>'
        ' <span id="resolution-note" class="note" hidden>This view is narrower than a few buckets: between'
        " a bucket's min and max the lines are straight, not measured detail (export with a larger"
        " <code>--series-buckets</code> for finer figures).</span></p>"
        '<div id="vis"></div>'
    )


def build_page(export: dict[str, Any], assets: Assets) -> str:
    """The whole report for one export, as one HTML string."""
    # the page reads the windows many times over: made once here (an export keeps them as columns)
    export = {**export, "windows": list(export["windows"])}
    figures = charts.figures(export)
    run = export["run"]
    data = {
        "windows": facts.window_rows(export),
        "duration_s": facts.axis_span_s(export),
        "interval_s": export["method"]["interval_s"],
        "bucket_s": export["series"]["bucket_s"] if figures else None,
        "spec": figures.spec if figures else None,
        "columns": figures.columns if figures else {},
    }
    node_facts = "".join(
        f'<div class="node-facts"><h3>{html.escape(node["node"])}</h3>{_dl(facts.node_facts(node))}</div>'
        for node in export["nodes"]
    )
    reset = "" if figures else '<button id="reset-zoom" type="button" hidden></button>'
    title = html.escape(f"sparkwatch report: {run['name']} ({run['id']})")
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{title}</title><style>{Assets.text('page.css')}</style></head><body>"
        f"<header><h1>{html.escape(run['name'])}</h1>{_dl(facts.header(export))}</header>"
        f'<section id="summary"><h2>Summary</h2>{summary_html(export)}</section>'
        '<section id="plots"><h2>Per node, on one time axis</h2>'
        f"{_plots_html(export, figures)}{reset}</section>"
        f'<section id="windows"><h2>Windows ({len(export["windows"])})</h2>'
        '<div class="table-box"><div id="window-table" role="table"></div></div></section>'
        f'<section id="facts"><h2>Nodes</h2>{node_facts}</section>'
        f'<script type="application/json" id="report-data">{_script_json(data)}</script>'
        f"<script>{assets.vega_bundle() if figures else ''}</script>"
        f"<script>{Assets.text('page.js')}</script></body></html>"
    )
