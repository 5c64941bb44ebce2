"""Answers that are not streamed, through the proxy as `sparkwatch proxy` runs it: a 2xx that holds no
completion (a JSON body cut short, an HTML page, ``{}``, a 204) and an answer that is not 2xx at all (a
redirect the client is left to follow) are relayed as they came, and their windows say the request was
not served, so the export does not measure them; a whole completion is measured."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from helpers.window_sink import ListSink
from sparkwatch.proxy.proxy import Proxy, ProxyConfig, make_proxy_runner

WHOLE = (
    b'{"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant",'
    b' "content": "hello"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}'
)
ANSWERS = {
    "whole": web.Response(body=WHOLE, content_type="application/json"),
    "cut": web.Response(body=WHOLE[:60], content_type="application/json"),  # its JSON ends mid-object
    "html": web.Response(body=b"<html><body>down for maintenance</body></html>", content_type="text/html"),
    "empty": web.Response(body=b"{}", content_type="application/json"),
    "no_reason": web.Response(body=WHOLE.replace(b'"stop"', b"null"), content_type="application/json"),
    "no_content": web.Response(status=204),
    "redirect": web.Response(status=307, headers={"Location": "http://127.0.0.1:9/v1/chat/completions"}),
}


async def _answer(request: web.Request) -> web.Response:
    await request.read()
    made = ANSWERS[request.query["do"]]
    return web.Response(body=made.body, status=made.status, headers=made.headers)


async def _site(runner: web.AppRunner) -> str:
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return "http://{}:{}".format(*runner.addresses[0][:2])


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[str, ListSink]]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _answer)
    upstream = web.AppRunner(app, access_log=None)
    sink = ListSink()
    proxy = Proxy(ProxyConfig(await _site(upstream)), sink)
    runner = make_proxy_runner(proxy)
    try:
        yield await _site(runner), sink
    finally:
        proxy.closing()
        await runner.cleanup()
        await upstream.cleanup()


@pytest.mark.parametrize(
    ("do", "status", "why"),
    [
        ("whole", 200, None),
        ("cut", 200, "upstream_no_completion"),
        ("html", 200, "upstream_no_completion"),
        ("empty", 200, "upstream_no_completion"),
        ("no_reason", 200, "upstream_no_completion"),
        ("no_content", 204, "upstream_no_completion"),
        ("redirect", 307, "HTTP status 307"),
    ],
)
async def test_a_non_streamed_answer_is_measured_only_when_it_holds_a_completion(
    proxied: tuple[str, ListSink], do: str, status: int, why: str | None
) -> None:
    url, sink = proxied
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/v1/chat/completions?do={do}", json={"model": "m"}, allow_redirects=False
        ) as response,
    ):
        body = await response.read()
    assert response.status == status and body == (ANSWERS[do].body or b"")  # relayed as it came
    async with asyncio.timeout(5):
        while not sink.windows:
            await asyncio.sleep(0.01)
    (window,) = sink.windows
    assert window.http_status == status
    failure = window.failure()
    if why is None:
        assert failure is None and window.completion_tokens == 2 and window.finish_reason == "stop"
        assert "upstream_no_completion" not in window.source
    else:
        assert failure is not None and why in failure, (failure, window.source)
        assert window.failed
