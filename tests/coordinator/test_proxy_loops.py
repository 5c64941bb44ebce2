"""A proxy whose upstream leads back to it, and a request that names its phase twice: each answered at
once, never forwarded again. Before, a proxy aimed at itself forwarded every request to itself until the
headers overflowed, making ~120 windows of one request, and a duplicated phase header was read as its
first value without a word."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from tests.helpers.processes import free_port

from sparkwatch.core.windows import Window
from sparkwatch.proxy.proxy import Proxy, ProxyConfig, ProxyConfigError, make_proxy_app
from sparkwatch.proxy.serve import running_proxy


class Windows:
    def __init__(self) -> None:
        self.got: list[Window] = []

    def submit(self, window: Window) -> None:
        self.got.append(window)


async def _serve_on(app: web.Application, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def test_two_proxies_in_a_ring_answer_508_once_and_make_one_window_each() -> None:
    port_a, port_b = free_port(), free_port()
    sink_a, sink_b = Windows(), Windows()
    a = Proxy(ProxyConfig(f"http://127.0.0.1:{port_b}"), sink_a)
    b = Proxy(ProxyConfig(f"http://localhost:{port_a}"), sink_b)
    runners = [await _serve_on(make_proxy_app(a), port_a), await _serve_on(make_proxy_app(b), port_b)]
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://127.0.0.1:{port_a}/v1/chat/completions", data=b"{}") as answer,
        ):
            assert answer.status == 508
            assert (await answer.json())["error"]["code"] == "loop_detected"
            # the answer came back through b, then a: each said its hop once
            assert answer.headers.getall("Via") == [f"1.1 {b.via_name}", f"1.1 {a.via_name}"]
    finally:
        for runner in runners:
            await runner.cleanup()
    assert a.saw_itself and not b.saw_itself  # the request came back to a, which answered it
    assert [w.http_status for w in sink_a.got] == [508] and [w.http_status for w in sink_b.got] == [508]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_proxy_aimed_at_itself_does_not_start(host: str) -> None:
    port = free_port()
    with pytest.raises(
        ProxyConfigError, match=rf"^the upstream http://{host}:{port} leads back to this proxy"
    ):
        async with running_proxy("127.0.0.1", port, ProxyConfig(f"http://{host}:{port}"), Windows()):
            pytest.fail("the proxy started")
    # and the port is free again: nothing was left listening
    async with running_proxy("127.0.0.1", port, ProxyConfig("http://127.0.0.1:1"), Windows()):
        pass


async def test_a_phase_header_given_twice_is_a_400_and_goes_nowhere() -> None:
    got: list[bytes] = []

    async def model(request: web.Request) -> web.Response:
        got.append(await request.read())
        return web.json_response({"choices": []})

    app = web.Application()
    app.router.add_post("/v1/completions", model)
    port_up, port = free_port(), free_port()
    sink = Windows()
    runners = [
        await _serve_on(app, port_up),
        await _serve_on(make_proxy_app(Proxy(ProxyConfig(f"http://127.0.0.1:{port_up}"), sink)), port),
    ]
    twice = [("X-Sparkwatch-Phase", "warmup"), ("X-Sparkwatch-Phase", "timed")]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                f"http://127.0.0.1:{port}/v1/completions", data=b"{}", headers=twice
            ) as r:
                assert r.status == 400
                error = json.loads(await r.read())["error"]
                assert error["code"] == "invalid_phase" and "given 2 times" in error["message"]
            once = {"X-Sparkwatch-Phase": "warmup"}
            async with session.post(f"http://127.0.0.1:{port}/v1/completions", data=b"{}", headers=once) as r:
                assert r.status == 200
    finally:
        for runner in runners:
            await runner.cleanup()
    assert len(got) == 1 and [w.phase for w in sink.got] == ["warmup"]
