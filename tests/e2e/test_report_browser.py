"""The run report in a real headless Chromium (Debian's, driven by Playwright): the demo's report and a
synthetic 8 h, 4-node, 10 Hz run with 10 000 windows open from file:// with no console error and no network
request, say the export's numbers, show every timed window as a band and a table row, and zoom to a window
when its row is clicked. Screenshots are kept in test-artifacts/ (helpers/artifacts.py)."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

from helpers.browser import OpenedPage, open_page
from helpers.cli import sparkwatch
from helpers.synthetic_run import synthetic_export
from sparkwatch.outputs import write_export
from sparkwatch.report import facts
from sparkwatch_agent.shared.units import one_decimal

READY = "body[data-ready='1']"
#: The window bands Vega actually drew (scenegraph rect items whose datum is a band), deduplicated.
DRAWN_BANDS = """() => {
  const out = new Map();
  (function walk(node) {
    for (const item of node.items || []) {
      const d = item.datum;
      if (node.marktype === "rect" && d && d.k !== undefined && d.t2 !== undefined) {
        out.set(`${d.t}|${d.t2}|${d.k}`, [d.t, d.t2, d.k, d.id === undefined ? null : d.id]);
      }
      walk(item);
    }
  })(sparkwatchReport.view.scenegraph().root);
  return [...out.values()];
}"""
#: Where each node's first panel lies on the canvas, [x1, y1, x2, y2] per node in order: its first layer's
#: marks (the bands, named ``n<node>_p0_marks``), their group offsets summed from the root.
FIRST_PANELS = """() => {
  const out = [];
  (function walk(mark, ox, oy) {
    const own = /^n(\\d+)_p0_marks$/.exec(mark.name || "");
    if (own && mark.bounds) {
      out[+own[1]] = [ox + mark.bounds.x1, oy + mark.bounds.y1, ox + mark.bounds.x2, oy + mark.bounds.y2];
    }
    for (const item of mark.items || []) {
      if (mark.marktype !== "group") continue;
      for (const child of item.items || []) walk(child, ox + (item.x || 0), oy + (item.y || 0));
    }
  })(sparkwatchReport.view.scenegraph().root, ...sparkwatchReport.view.origin());
  return out;
}"""
MAX_REPORT_BYTES = 10 * 1024 * 1024
#: The page's width in the tests (helpers/browser.open_page's default): the figure fits it, legends and all.
PAGE_WIDTH_PX = 1400


def _check_clean(opened: OpenedPage, page_path: pathlib.Path) -> None:
    """Nothing failed and nothing was fetched: the one request is the page itself."""
    assert opened.console_errors == [] and opened.page_errors == []
    assert opened.blocked == []
    assert opened.requests == [page_path.resolve().as_uri()]


def _check_summary(opened: OpenedPage, export: dict[str, Any]) -> int:
    """Every figure the summary shows is the export's, to the digits it prints; returns how many."""
    cells = opened.page.eval_on_selector_all(
        "#summary td[data-key]",
        "els => els.map(e => [e.dataset.key, +e.dataset.digits, +e.dataset.scale, e.textContent])",
    )
    for key, digits, scale, text in cells:
        value = facts.lookup(export, key)
        shown = text.split(" ")[0]
        # one decimal is rounded half away from zero, as lmx prints it (79.25 W is 79.3, not 79.2)
        if value is None:
            wanted = "n/a"
        else:
            wanted = one_decimal(value / scale) if digits == 1 else f"{value / scale:.{digits}f}"
        assert shown == wanted, (key, text)
    return len(cells)


def _check_windows(opened: OpenedPage, export: dict[str, Any]) -> None:
    """Every timed window is a row of the table, in the figures' data, and drawn: its own bands or, zoomed
    out on a long run, a merged band that covers it."""
    timed = {w["id"] for w in export["windows"] if w["phase"] == "timed"}
    page = opened.page
    band_ids = set(page.evaluate("sparkwatchReport.view.data('bands').map(d => d.id)"))
    drawn = page.evaluate(DRAWN_BANDS)
    t0 = export["run"]["t_start_ns"]
    for w in export["windows"]:
        if w["phase"] == "timed":
            a, b = (w["t_start_ns"] - t0) / 1e9, (w["t_end_ns"] - t0) / 1e9
            assert any(t <= a + 0.002 and t2 >= b - 0.002 for t, t2, _, _ in drawn) or (
                {i for *_, i in drawn} >= {w["id"]}
            ), w["id"]
    rows = page.eval_on_selector_all("#window-table .row", "rs => rs.map(r => r.dataset.windowId)")
    row_ids = set(rows)
    assert timed and timed <= band_ids and timed <= row_ids
    assert len(row_ids) == len(export["windows"])
    # a duration is the stamps' difference to the digits shown (ends rounded first read 9.603 for 9.602378)
    shown = page.eval_on_selector_all(
        "#window-table .row", "rs => rs.map(r => [r.dataset.windowId, r.children[3].textContent])"
    )
    want = {w["id"]: f"{round((w['t_end_ns'] - w['t_start_ns']) / 1e9, 3):.3f}" for w in export["windows"]}
    assert [(i, text) for i, text in shown if text != want[i]] == []


def _click_zooms(opened: OpenedPage, export: dict[str, Any], row: int) -> None:
    """A click on a window's row narrows the shared time axis to that window (and a margin)."""
    page = opened.page
    whole = page.evaluate("sparkwatchReport.xDomain()")
    target = page.locator("#window-table .row").nth(row)
    window_id = target.get_attribute("data-window-id")
    target.click()
    narrower = "w => sparkwatchReport.xDomain()[1] - sparkwatchReport.xDomain()[0] < w"
    page.wait_for_function(narrower, arg=whole[1] - whole[0])
    a, b = page.evaluate("sparkwatchReport.xDomain()")
    w = next(w for w in export["windows"] if w["id"] == window_id)
    t0 = export["run"]["t_start_ns"]
    start, end = (w["t_start_ns"] - t0) / 1e9, (w["t_end_ns"] - t0) / 1e9
    assert a <= start < end <= b and (b - a) < 0.5 * (whole[1] - whole[0]), (a, b, start, end)
    own = [band for band in page.evaluate(DRAWN_BANDS) if band[3] == window_id]
    assert {k.split(" · ")[-1] for *_, k, _ in own} == {"prefill", "decode"}, own  # its own bands, drawn


def _wheel_zooms_every_node(opened: OpenedPage) -> None:
    """The mouse wheel over any node's first panel zooms the shared axis (each panel holds the zoom)."""
    page = opened.page
    canvas = page.locator("#vis canvas")
    panels = page.evaluate(FIRST_PANELS)
    assert len(panels) == 4 and all(panels), panels
    for _, y1, _, y2 in panels:
        page.evaluate("sparkwatchReport.resetZoom()")
        whole = page.evaluate("sparkwatchReport.xDomain()")
        box = canvas.bounding_box()
        assert box is not None
        middle = (y1 + y2) / 2  # on the canvas
        page.evaluate("y => window.scrollBy(0, y)", box["y"] + middle - 300)
        box = canvas.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] / 3, box["y"] + middle)
        page.mouse.wheel(0, -400)
        narrower = "w => sparkwatchReport.xDomain()[1] - sparkwatchReport.xDomain()[0] < w"
        page.wait_for_function(narrower, arg=whole[1] - whole[0] - 1e-6)


def _fits_the_page(opened: OpenedPage) -> None:
    """Nothing of the figure (its legends included) lies beyond the page's width: the windows legend, right
    of the panels' own, was cut at a 1 400 px page's edge."""
    page = opened.page
    assert page.evaluate("document.documentElement.scrollWidth") <= PAGE_WIDTH_PX
    box = page.locator("#vis canvas").bounding_box()
    assert box is not None and box["x"] + box["width"] <= PAGE_WIDTH_PX, box


def test_the_demo_report_opens_offline_and_says_the_exports_numbers(
    tmp_path: pathlib.Path, artifacts_dir: pathlib.Path
) -> None:
    out = tmp_path / "run.json"
    result = sparkwatch("demo", "--max-tokens", "64", "--tokens-per-s", "200", "-o", str(out), timeout=240)
    assert result.returncode == 0, result.stderr
    report = tmp_path / "run.report.html"
    assert f"sparkwatch demo: report written to {report}" in result.stderr  # the demo's own prefix
    export = json.loads(out.read_text())
    assert export["series"]["buckets"] > 0
    with open_page(report, width=PAGE_WIDTH_PX) as opened:
        opened.page.wait_for_selector(READY)
        _check_clean(opened, report)
        assert _check_summary(opened, export) >= 4 * 3 + 6
        _check_windows(opened, export)
        _fits_the_page(opened)
        opened.screenshot(artifacts_dir / "demo-report.png")
        _click_zooms(opened, export, row=1)
        opened.screenshot(artifacts_dir / "demo-report-zoomed.png")
        _wheel_zooms_every_node(opened)
        _check_clean(opened, report)


def test_an_8_hour_run_with_10000_windows_stays_light(
    tmp_path: pathlib.Path, artifacts_dir: pathlib.Path
) -> None:
    export = synthetic_export(hours=8.0, nodes=4, hz=10.0, windows=10_000, series_buckets=2400)
    path = tmp_path / "long.json"
    write_export(path, export)  # as `sparkwatch export -o` writes it
    result = sparkwatch("report", str(path), "-o", str(tmp_path / "long.html"), timeout=240)
    assert result.returncode == 0, result.stderr
    report = tmp_path / "long.html"
    size = report.stat().st_size
    assert size < MAX_REPORT_BYTES, size
    with open_page(report, width=PAGE_WIDTH_PX, timeout_s=120) as opened:
        t0 = time.monotonic()
        opened.page.wait_for_selector(READY, timeout=120_000)
        ready_s = time.monotonic() - t0  # reported, not asserted: benchmarks/report_render.py times it
        _check_clean(opened, report)
        _check_summary(opened, export)
        _check_windows(opened, export)
        _fits_the_page(opened)
        opened.screenshot(artifacts_dir / "8h-report.png")
        _click_zooms(opened, export, row=5000)
        opened.screenshot(artifacts_dir / "8h-report-zoomed.png")
    (artifacts_dir / "8h-report.txt").write_text(f"size {size} bytes, ready {ready_s:.2f} s after load\n")


#: The text marks Vega drew, in scenegraph order.
DRAWN_TEXTS = """() => {
  const out = [];
  (function walk(node) {
    for (const item of node.items || []) {
      if (node.marktype === "text" && typeof item.text === "string") out.push(item.text);
      walk(item);
    }
  })(sparkwatchReport.view.scenegraph().root);
  return out;
}"""


def test_a_node_without_power_and_a_run_without_windows_draw_what_they_lack(tmp_path: pathlib.Path) -> None:
    """A GPU whose power NVML does not support drew an empty panel (no ticks, a legend line never drawn),
    and a run without windows a legend of all ten kinds of band: the panel says what was not read, and no
    band legend is drawn."""
    export = synthetic_export(hours=0.2, nodes=2, hz=1.0, windows=5, series_buckets=200)
    first = export["series"]["nodes"][0]
    first["lines"] = [
        {**line, "v": [None] * len(line["v"])} if line["kind"] == "gpu_power_w" else line
        for line in first["lines"]
        if line["kind"] != "system_power_w"
    ]
    export["windows"] = []
    path = tmp_path / "unread.json"
    write_export(path, export)
    result = sparkwatch("report", str(path), "-o", str(tmp_path / "unread.html"), timeout=120)
    assert result.returncode == 0, result.stderr
    with open_page(tmp_path / "unread.html", width=PAGE_WIDTH_PX) as opened:
        opened.page.wait_for_selector(READY)
        _check_clean(opened, tmp_path / "unread.html")
        texts = opened.page.evaluate(DRAWN_TEXTS)
    assert texts.count("no power read") == 1, texts
    assert not any("prefill" in t or "decode" in t for t in texts), texts  # no band legend


def test_a_node_named_at_length_wraps_inside_the_page(tmp_path: pathlib.Path) -> None:
    """A 300-character node name (an operator's FQDN and labels) wrapped nowhere: the summary's node cell
    and the node's facts heading widened the page past the window; they wrap, the name whole."""
    export = synthetic_export(hours=0.2, nodes=2, hz=1.0, windows=5, series_buckets=200)
    path = tmp_path / "long-name.json"
    write_export(path, export)
    name = "spark-1." + "rack-7.hall-b.example.org-" * 11
    path.write_text(path.read_text().replace('"spark-1"', json.dumps(name)))  # every mention, as one node
    result = sparkwatch("report", str(path), "-o", str(tmp_path / "long-name.html"), timeout=120)
    assert result.returncode == 0, result.stderr
    with open_page(tmp_path / "long-name.html", width=PAGE_WIDTH_PX) as opened:
        opened.page.wait_for_selector(READY)
        _fits_the_page(opened)
        shown = opened.page.eval_on_selector_all(
            "#summary-nodes td:first-child, .node-facts h3", "els => els.map(e => e.textContent)"
        )
    assert shown.count(name) == 2, shown
