"""The run report's cost: building the page (Python: Altair spec, decimated data, the inlined Vega bundle),
its file size, and drawing it in headless Chromium (the system's, driven by Playwright) — for the demo-sized
run and the 8 h, 4-node, 10 Hz run with 10 000 windows (tests/helpers/synthetic_run.py), each beside a floor
measured in the same run: a page holding only the same Vega bundle and one tiny chart. Medians over rounds;
the browser figures are wall time from navigation to "figures drawn" and Chromium's main-thread task time
(CDP Performance.getMetrics TaskDuration). Goal (issue 18): the 8 h report under 10 MB and drawn in < 3 s.

    python benchmarks/report_render.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from helpers.browser import CHROMIUM_ARGS, chromium_path
from helpers.synthetic_run import synthetic_export
from sparkwatch.report.bundle import Assets
from sparkwatch.report.page import build_page

FLOOR_SPEC = {
    "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
    "data": {"values": [{"t": 0, "v": 1}, {"t": 1, "v": 2}]},
    "mark": "line",
    "encoding": {"x": {"field": "t", "type": "quantitative"}, "y": {"field": "v", "type": "quantitative"}},
}


def floor_page(assets: Assets) -> str:
    """The least a Vega-Lite page costs: the same inlined bundle, one two-point line."""
    return (
        "<!doctype html><html><body><div id=vis></div>"
        f"<script>{assets.vega_bundle()}</script><script>"
        f"vegaEmbed('#vis', {json.dumps(FLOOR_SPEC)}, {{actions: false}})"
        ".then(() => { document.body.dataset.ready = '1'; });</script></body></html>"
    )


def timed(fn: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def draw_times(pages: dict[str, pathlib.Path], rounds: int) -> dict[str, tuple[float, float]]:
    """Per page, median wall seconds from navigation to figures drawn, and main-thread task seconds."""
    from playwright.sync_api import sync_playwright

    walls: dict[str, list[float]] = {name: [] for name in pages}
    tasks: dict[str, list[float]] = {name: [] for name in pages}
    executable = chromium_path()
    if executable is None:
        raise SystemExit("no chromium: install the Debian package chromium")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=list(CHROMIUM_ARGS))
        for _ in range(rounds):
            for name, path in pages.items():  # interleaved: every page sees the same noise
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                cdp = page.context.new_cdp_session(page)
                cdp.send("Performance.enable")
                t0 = time.perf_counter()
                page.goto(path.resolve().as_uri())
                page.wait_for_selector("body[data-ready='1']", timeout=120_000)
                walls[name].append(time.perf_counter() - t0)
                metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
                tasks[name].append(metrics["TaskDuration"])
                page.close()
        browser.close()
    return {name: (statistics.median(walls[name]), statistics.median(tasks[name])) for name in pages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    folder = pathlib.Path(tempfile.mkdtemp(prefix="sparkwatch-bench-report-"))
    assets = Assets()
    bundle_s, _ = timed(lambda: Assets(cache_dir=None).vega_bundle(), 1)  # made, not read from the cache
    build_s, long_export = timed(
        lambda: synthetic_export(hours=8.0, nodes=4, hz=10.0, windows=10_000, series_buckets=2400), 1
    )
    short_export = synthetic_export(hours=10 / 60, nodes=4, hz=10.0, windows=40, series_buckets=2400)
    assets.vega_bundle()  # once, as one `sparkwatch report` process does
    pages = {"floor (bundle + one line)": floor_page(assets)}
    gen: dict[str, float] = {}
    for name, export in (("10 min, 40 windows", short_export), ("8 h, 10 000 windows", long_export)):
        gen[name], pages[name] = timed(lambda export=export: build_page(export, assets), args.rounds)
    paths = {}
    for name, text in pages.items():
        paths[name] = folder / f"{len(paths)}.html"
        paths[name].write_text(text)
    drawn = draw_times(paths, args.rounds)
    print(f"synthetic 8 h export built in {build_s:.1f} s; bundle made in {bundle_s:.2f} s, then cached")
    print(f"{'page':<28} {'build s':>8} {'MiB':>6} {'draw wall s':>12} {'task s':>7} {'wall / floor':>13}")
    floor_wall = drawn["floor (bundle + one line)"][0]
    for name, path in paths.items():
        wall, task = drawn[name]
        build = f"{gen[name]:.2f}" if name in gen else "-"
        size = path.stat().st_size / 2**20
        print(f"{name:<28} {build:>8} {size:>6.2f} {wall:>12.2f} {task:>7.2f} {wall / floor_wall:>12.1f}x")


if __name__ == "__main__":
    main()
