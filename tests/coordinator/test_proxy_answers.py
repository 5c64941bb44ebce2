"""Answers that are not streamed, through the proxy as `sparkwatch proxy` runs it: a 2xx that holds no
completion (a JSON body cut short, an HTML page, ``{}``, a 204) and an answer that is not 2xx at all (a
redirect the client is left to follow) are relayed as they came, and their windows say the request was
not served, so the export does not measure them; a whole completion is measured, in OpenAI's shape or in
llama.cpp's own."""

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
#: llama.cpp's own shape (tools/server/server-task.cpp, ``to_json_non_oaicompat`` of a final result), as
#: its ``POST /completion`` and ``/completions`` answer when not streamed.
NATIVE = (
    b'{"index":0,"content":"hello","tokens":[],"id_slot":0,"stop":true,"model":"m","tokens_predicted":2,'
    b'"tokens_evaluated":5,"generation_settings":{"n_predict":2},"prompt":"hi","has_new_line":false,'
    b'"truncated":false,"stop_type":"eos","stopping_word":"","tokens_cached":6,"timings":{"cache_n":0,'
    b'"prompt_n":5,"prompt_ms":1.5,"prompt_per_token_ms":0.3,"prompt_per_second":3333.3,"predicted_n":2,'
    b'"predicted_ms":20.0,"predicted_per_token_ms":10.0,"predicted_per_second":100.0}}'
)
ANSWERS = {
    "native": web.Response(body=NATIVE, content_type="application/json"),
    "native_unstopped": web.Response(  # a result that never stopped: no completion served
        body=NATIVE.replace(b'"eos"', b'"none"'), content_type="application/json"
    ),
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
    for path in ("/v1/chat/completions", "/completion", "/completions"):
        app.router.add_post(path, _answer)
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
        ("native", 200, None),
        ("native_unstopped", 200, "upstream_no_completion"),
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
    path = "/completion" if do.startswith("native") else "/v1/chat/completions"  # llama.cpp's own path
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}{path}?do={do}", json={"model": "m"}, allow_redirects=False) as response,
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
        reason = "eos" if do == "native" else "stop"
        assert failure is None and window.completion_tokens == 2 and window.finish_reason == reason
        assert window.prompt_tokens == 5 and window.cached_tokens is None
        assert "upstream_no_completion" not in window.source
    else:
        assert failure is not None and why in failure, (failure, window.source)
        assert window.failed
