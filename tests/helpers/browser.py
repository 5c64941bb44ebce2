"""A real headless Chromium for tests that open a page (the run report), driven by Playwright.

The browser is the system's (Debian's ``chromium``, which .ci/run installs), never one Playwright downloads.
Every request that is not ``file:``, ``data:``, ``blob:`` or ``about:`` is aborted before it leaves the
machine and recorded, so a report that would load a script from a CDN fails its test instead of working
only online. Console errors and uncaught exceptions are recorded too: a page whose charts threw is broken
even when its HTML looks right.

One ``open_page`` of a blank page costs about 0.9 s on the 2-core VM (measured: Playwright's driver 0.35 s,
Chromium's launch 0.15-0.19 s, the page 0.25-0.28 s, closing 0.1 s; the first after boot about 1.4 s), so a
test opens a page once and asks it everything.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: Where Debian puts it; else whatever ``chromium`` is on PATH.
SYSTEM_CHROMIUM = pathlib.Path("/usr/bin/chromium")
#: A root container has no user namespace for the sandbox; there is no GPU to use either.
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu")
#: The schemes a self-contained page may load; anything else is aborted.
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
NO_CHROMIUM = "no chromium: install the Debian package chromium (.ci/run does)"
NO_PLAYWRIGHT = "no playwright: pip install -e '.[dev]'"
ENV_SKIP_BROWSER = "SPARKWATCH_SKIP_BROWSER"


def missing(what: str) -> NoReturn:
    """A test that needs the browser cannot run: a failure, or a skip where the environment asks."""
    if os.environ.get(ENV_SKIP_BROWSER) == "1":
        pytest.skip(what)
    pytest.fail(f"{what} (or set {ENV_SKIP_BROWSER}=1 to skip the browser tests)")


def chromium_path() -> str | None:
    """The system Chromium, or ``None`` when there is none."""
    if SYSTEM_CHROMIUM.exists():
        return str(SYSTEM_CHROMIUM)
    return shutil.which("chromium")


def as_url(url_or_path: str | pathlib.Path) -> str:
    """A URL as it is; a path as its ``file:`` URL."""
    if isinstance(url_or_path, str) and ":" in url_or_path.split("/", 1)[0]:
        return url_or_path
    return pathlib.Path(url_or_path).resolve().as_uri()


@dataclass
class OpenedPage:
    """A loaded page and what it did: console errors, uncaught exceptions, every request (and the ones
    aborted because they would have left the machine)."""

    page: Page  # imported lazily: a missing Playwright is a skip, not a collection error
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)

    def screenshot(self, path: str | pathlib.Path) -> pathlib.Path:
        """The whole page as a PNG at ``path`` (its folder made)."""
        out = pathlib.Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(out), full_page=True)
        return out


@contextlib.contextmanager
def open_page(
    url_or_path: str | pathlib.Path, *, width: int = 1400, height: int = 900, timeout_s: float = 30.0
) -> Iterator[OpenedPage]:
    """``url_or_path`` loaded (the ``load`` event) in a fresh headless Chromium at ``width`` × ``height``;
    the test fails, saying what to install, where Chromium or Playwright is missing (a skip would let the
    report's acceptance tests pass without a browser), unless ``$SPARKWATCH_SKIP_BROWSER=1`` says to skip.
    The browser is closed on leaving, whatever happened inside."""
    executable = chromium_path()
    if executable is None:
        missing(NO_CHROMIUM)
    try:
        from playwright.sync_api import Route, sync_playwright
    except ImportError:
        missing(NO_PLAYWRIGHT)

    def route(r: Route) -> None:
        if r.request.url.startswith(LOCAL_SCHEMES):
            r.continue_()
        else:
            opened.blocked.append(r.request.url)
            r.abort("blockedbyclient")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=list(CHROMIUM_ARGS))
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            context.set_default_timeout(timeout_s * 1000)
            context.route("**/*", route)
            page = context.new_page()
            opened = OpenedPage(page)
            page.on("console", lambda m: opened.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: opened.page_errors.append(f"{e.name}: {e.message}"))
            page.on("request", lambda r: opened.requests.append(r.url))
            page.goto(as_url(url_or_path), wait_until="load")
            yield opened
        finally:
            browser.close()
