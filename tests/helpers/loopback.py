"""Servers the tests start on loopback, and waiting for one a test started as a process."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.test_utils import TestServer


async def served(app: web.Application, path: str = "") -> AsyncIterator[str]:
    """``app`` on a loopback port for the body of one ``async for``: its URL with ``path`` (without one,
    the base URL with no trailing slash, for a client that appends its own paths)."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url(path)) if path else str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def wait_http(url: str, timeout_s: float = 15.0) -> None:
    """Until ``url`` answers at all (any status): a server process started by the test is listening."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")
