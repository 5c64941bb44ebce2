"""Regenerate docs/img/report-demo.png, the picture of the demo's run report in docs/report.md: runs
`sparkwatch demo` in a temporary folder, opens the report it writes in the system Chromium (headless, via
Playwright; no browser download) and saves the top of the page (header, summary, the first node's panels).

    python docs/report_screenshot.py
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

from playwright.sync_api import sync_playwright

OUT = pathlib.Path(__file__).resolve().parent / "img" / "report-demo.png"
CHROMIUM = "/usr/bin/chromium"
WIDTH_PX, HEIGHT_PX = 1400, 1500


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sparkwatch-docs-") as tmp:
        export = pathlib.Path(tmp) / "run.json"
        subprocess.run([sys.executable, "-m", "sparkwatch", "demo", "-o", str(export)], check=True)
        report = export.with_name("run.report.html")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": WIDTH_PX, "height": HEIGHT_PX})
            page.goto(report.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            page.screenshot(path=str(OUT), clip={"x": 0, "y": 0, "width": WIDTH_PX, "height": HEIGHT_PX})
            browser.close()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
