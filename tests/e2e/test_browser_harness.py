"""The headless-Chromium harness the report's tests stand on: it must see a page's console errors, its
uncaught exceptions and a request that would leave the machine (and stop that request), and see nothing
on a clean page."""

from __future__ import annotations

import pathlib

import pytest

from helpers import browser
from helpers.artifacts import ENV_ARTIFACTS, REPO_ROOT, artifacts_root
from helpers.browser import as_url, open_page

FOREIGN = "https://example.invalid/x.js"
DIRTY = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>loading</title></head>
<body><p>dirty</p>
<script>throw new Error("harness-smoke: uncaught");</script>
<script>
console.error("harness-smoke: one console error");
fetch("{FOREIGN}").then(
  () => {{ document.title = "loaded"; }},
  () => {{ document.title = "refused"; }});
</script></body></html>
"""
CLEAN = """<!doctype html>
<html><head><meta charset="utf-8"><title>clean</title></head>
<body><h1 id="ok">clean</h1>
<img alt="dot" src="data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACwAAAAAAQABAAACAkQBADs=">
<script>console.log("nothing wrong"); document.getElementById("ok").dataset.ran = "yes";</script>
</body></html>
"""


def test_the_harness_reports_console_errors_exceptions_and_blocks_foreign_requests(
    tmp_path: pathlib.Path, artifacts_dir: pathlib.Path
) -> None:
    page_file = tmp_path / "dirty.html"
    page_file.write_text(DIRTY)
    with open_page(page_file, width=800, height=600) as opened:
        opened.page.wait_for_function("document.title !== 'loading'")
        title = opened.page.title()
        shot = opened.screenshot(artifacts_dir / "dirty.png")
    assert title == "refused"  # the fetch was aborted, never answered
    assert "harness-smoke: one console error" in opened.console_errors
    assert any("harness-smoke: uncaught" in e for e in opened.page_errors), opened.page_errors
    assert opened.requests[0] == page_file.as_uri()
    assert FOREIGN in opened.requests
    assert opened.blocked == [FOREIGN]
    assert shot.stat().st_size > 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_clean_page_reports_nothing(tmp_path: pathlib.Path) -> None:
    page_file = tmp_path / "clean.html"
    page_file.write_text(CLEAN)
    with open_page(str(page_file)) as opened:
        ran = opened.page.get_attribute("#ok", "data-ran")
        size = opened.page.viewport_size
    assert ran == "yes"
    assert size == {"width": 1400, "height": 900}
    assert opened.console_errors == [] and opened.page_errors == [] and opened.blocked == []
    assert [u for u in opened.requests if not u.startswith("data:")] == [page_file.as_uri()]


def test_paths_become_file_urls_and_urls_stay() -> None:
    assert as_url(pathlib.Path("/tmp/a b.html")) == "file:///tmp/a%20b.html"
    assert as_url("/tmp/x.html") == "file:///tmp/x.html"
    assert as_url("about:blank") == "about:blank"
    assert as_url("file:///tmp/x.html") == "file:///tmp/x.html"


def test_artifacts_go_to_the_repo_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, artifacts_dir: pathlib.Path
) -> None:
    monkeypatch.delenv(ENV_ARTIFACTS, raising=False)
    assert artifacts_root() == REPO_ROOT / "test-artifacts"
    monkeypatch.setenv(ENV_ARTIFACTS, str(tmp_path / "kept"))
    assert artifacts_root() == tmp_path / "kept"
    # each test its own folder: <module>/<test name>
    assert artifacts_dir.is_dir() and artifacts_dir.parent.name == "test_browser_harness"
    assert artifacts_dir.name == "test_artifacts_go_to_the_repo_unless_the_environment_says"


def test_no_chromium_is_a_failure_that_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser, "SYSTEM_CHROMIUM", pathlib.Path("/nonexistent/chromium"))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(browser.ENV_SKIP_BROWSER, raising=False)
    with pytest.raises(pytest.fail.Exception, match="Debian package chromium"), open_page("about:blank"):
        pass
    monkeypatch.setenv(browser.ENV_SKIP_BROWSER, "1")  # unless the environment asks for a skip
    with pytest.raises(pytest.skip.Exception, match="Debian package chromium"), open_page("about:blank"):
        pass
