"""What only a browser sends, refused (found by a bad-input sweep): a page of another site posting to an API
open without a token (a ``text/plain`` POST needs no CORS preflight: any page could open or end runs), and a
name rebound to 127.0.0.1 (DNS rebinding: then the page is same-origin to the browser)."""

from __future__ import annotations

import pathlib

from aiohttp.test_utils import TestClient, TestServer

from helpers.inproc_api import inproc_api
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.store import Store

T0 = 1_764_000_000 * 10**9
EVIL = "https://evil.example"


async def test_another_sites_page_and_a_rebound_name_change_nothing(tmp_path: pathlib.Path) -> None:
    async with inproc_api(tmp_path / "c.db", T0) as (client, _store, _clock):
        body = '{"name": "csrf"}'
        forged = await client.post(
            "/v1/runs", data=body, headers={"Origin": EVIL, "Content-Type": "text/plain"}
        )
        assert forged.status == 403
        assert (await forged.json())["error"] == "cross_origin" and EVIL in (await forged.json())["reason"]
        host = f"evil.example:{client.port}"
        rebound = await client.post("/v1/runs", json={"name": "dns"}, headers={"Host": host})
        assert rebound.status == 403 and (await rebound.json())["error"] == "host_not_allowed"
        read = await client.get("/v1/runs", headers={"Host": host})  # reading is refused there too
        assert read.status == 403
        assert (await (await client.get("/v1/runs")).json())["runs"] == []  # nothing was opened
        own = f"http://127.0.0.1:{client.port}"  # a page the server served itself is same-origin
        same = await client.post("/v1/runs", json={"name": "ok"}, headers={"Origin": own})
        assert same.status == 201, await same.text()
        named = await client.get("/v1/runs", headers={"Host": f"localhost:{client.port}"})
        assert named.status == 200 and [r["name"] for r in (await named.json())["runs"]] == ["ok"]
        plain = await client.post("/v1/runs", data=body, headers={"Content-Type": "text/plain"})
        assert plain.status == 201  # curl and scripts send no Origin: as before


async def test_a_token_or_a_network_listener_answers_any_host(tmp_path: pathlib.Path) -> None:
    """With a token, a rebound page holds no token; served to the network (--insecure-no-auth), names are
    how it is reached: the Host check is for a tokenless API on loopback only. Another site's Origin is
    refused either way."""
    store = Store(tmp_path / "c.db")
    for app in (
        make_app(Coordinator([], store), "t0ken-0123456789"),
        make_app(Coordinator([], store), None, listen_host="0.0.0.0"),
    ):
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            headers = {"Host": f"coordinator.lab:{client.port}", "Authorization": "Bearer t0ken-0123456789"}
            assert (await client.get("/v1/runs", headers=headers)).status == 200
            forged = await client.post("/v1/runs", json={"name": "x"}, headers={**headers, "Origin": EVIL})
            assert forged.status == 403
        finally:
            await client.close()
    store.close()
