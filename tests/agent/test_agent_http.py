"""The agent's HTTP API on a real in-process aiohttp server (port 0): health, time, auth, leases, stream."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from sparkwatch_agent.assemble import assemble
from sparkwatch_agent.config import build_config
from sparkwatch_agent.sampling.clocks import PAIR_GAP_NS
from sparkwatch_agent.sampling.leases import MAX_LEASES
from sparkwatch_agent.serving.http_app import CONTEXT, make_app
from sparkwatch_agent.serving.serve import agent_context
from sparkwatch_agent.shared.protocol import CLOSE_AFTER_BEYOND_NEWEST

TOKEN = "s3cret-token-0123456789"


async def start_agent(interval: float = 0.02, ring: int = 1000, token: str | None = None) -> TestClient:
    config = build_config({"node": "spark-t", "backend": "sim", "interval": interval, "ring_size": ring}, {})
    node = assemble(config)
    ctx = agent_context(node.sampler, node.sim, token)
    client = TestClient(TestServer(make_app(ctx)))
    await client.start_server()
    node.sampler.start()
    while node.sampler.snapshot.sample is None:
        await asyncio.sleep(0.005)
    return client


@pytest.fixture
async def agent() -> AsyncIterator[TestClient]:
    client = await start_agent()
    yield client
    client.app[CONTEXT].sampler.stop()
    await client.close()


@pytest.fixture
async def secured() -> AsyncIterator[TestClient]:
    client = await start_agent(token=TOKEN)
    yield client
    client.app[CONTEXT].sampler.stop()
    await client.close()


async def test_healthz_ok_and_time_probe(agent: TestClient) -> None:
    r = await agent.get("/healthz")
    body = await r.json()
    assert r.status == 200 and body["status"] == "ok" and body["backend"] == "sim"
    before = time.time_ns()
    t = await (await agent.get("/v1/time")).json()
    # the wall time as of the answer's monotonic stamp: within half a kept read gap of the truth
    slack_ns = PAIR_GAP_NS // 2
    assert before - slack_ns <= t["t_wall_ns"] <= time.time_ns() + slack_ns and t["t_mono_ns"] > 0


async def test_capabilities_map(agent: TestClient) -> None:
    caps = await (await agent.get("/v1/capabilities")).json()
    fields = caps["gpus"][0]["fields"]
    assert caps["memory_model"] == "unified"
    assert fields["memory_info"] == {"supported": False, "state": "unsupported", "reason": "NOT_SUPPORTED"}
    assert fields["energy"]["supported"] is True


async def test_auth_refusals(secured: TestClient) -> None:
    for path in ("/v1/time", "/v1/capabilities", "/v1/interval", "/v1/stream"):
        r = await secured.get(path)
        assert r.status == 401, path
        assert (await r.json())["error"] == "unauthorized"
        assert "send 'Authorization: Bearer <token>'" in (await r.json())["reason"]
    for scheme in ("Bearer", "bearer"):  # any case of the scheme: a lowercase one was told to send one
        r = await secured.get("/v1/time", headers={"Authorization": f"{scheme} wrong-token-xxxxxxxx"})
        assert r.status == 401  # a wrong token is told apart from none (the reason never shows either)
        assert (await r.json())["reason"] == "the bearer token sent is not this server's (see --token-file)"
    r = await secured.get("/v1/time", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status == 200
    # two Authorization headers: which counts is each intermediary's guess (the first one was taken)
    twice = CIMultiDict(
        [("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer wrong-token-xxxxxxxx")]
    )
    r = await secured.get("/v1/time", headers=twice)
    assert r.status == 401 and (await r.json())["reason"] == "send one Authorization header, not several"
    assert (await secured.get("/metrics")).status == 200  # scrapes need no token
    assert (await secured.get("/healthz")).status == 200


async def test_runtime_interval_lease(agent: TestClient) -> None:
    granted = time.monotonic()
    r = await agent.put("/v1/interval", json={"holder": "coord-1", "interval_s": 0.01, "ttl_s": 1.0})
    state = await r.json()
    assert r.status == 200 and state["interval_s"] == 0.01 and state["configured_s"] == 0.02
    # polled, not slept on: a loaded machine may keep the sampler thread from its next tick a while
    sampler = agent.app[CONTEXT].sampler
    assert await _within(5.0, lambda: sampler.snapshot.interval_s == 0.01)

    async def lapsed() -> bool:
        state = await (await agent.get("/v1/interval")).json()
        return bool(state["interval_s"] == 0.02 and state["leases"] == [])

    assert await _within(5.0, lapsed)  # without renewal
    assert time.monotonic() - granted >= 1.0  # and not before its time
    await agent.put("/v1/interval", json={"holder": "coord-1", "interval_s": 0.01})
    r = await agent.delete("/v1/interval", params={"holder": "coord-1"})
    assert (await r.json())["released"] is True


async def _within(timeout_s: float, check: Any) -> bool:
    """Whether ``check()`` (a function or a coroutine function) comes true within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        outcome = check()
        if await outcome if asyncio.iscoroutine(outcome) else outcome:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)


async def test_a_slower_lease_is_accepted_and_sampling_does_not_slow(agent: TestClient) -> None:
    sampler = agent.app[CONTEXT].sampler
    r = await agent.put("/v1/interval", json={"holder": "slow", "interval_s": 3600})
    state = await r.json()
    assert r.status == 200 and state["interval_s"] == 0.02 and state["leases"][0]["interval_s"] == 3600
    seq = sampler.snapshot.sample.seq
    await asyncio.sleep(0.3)
    assert sampler.snapshot.sample.seq >= seq + 5 and sampler.snapshot.interval_s == 0.02
    assert (await agent.get("/healthz")).status == 200


async def test_leases_beyond_the_cap_are_429_with_a_reason(agent: TestClient) -> None:
    for i in range(MAX_LEASES):
        r = await agent.put("/v1/interval", json={"holder": f"h{i}", "interval_s": 1, "ttl_s": 60})
        assert r.status == 200
    r = await agent.put("/v1/interval", json={"holder": "h0", "interval_s": 0.5, "ttl_s": 60})
    assert r.status == 200  # renewing (or changing) a held lease needs no new slot
    r = await agent.put("/v1/interval", json={"holder": "extra", "interval_s": 0.01, "ttl_s": 60})
    body = await r.json()
    assert r.status == 429 and body["error"] == "too_many_leases" and "64 leases are held" in body["reason"]
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    state = await (await agent.get("/v1/interval")).json()
    assert len(state["leases"]) == MAX_LEASES and state["interval_s"] == 0.02  # nothing changed
    await agent.delete("/v1/interval", params={"holder": "h5"})
    r = await agent.put("/v1/interval", json={"holder": "extra", "interval_s": 0.01, "ttl_s": 60})
    assert r.status == 200 and (await r.json())["interval_s"] == 0.01


@pytest.mark.parametrize(
    "body",
    [
        {"holder": "x", "interval_s": 0.0001},
        {"holder": "x"},
        {"interval_s": 0.1},
        {"holder": "x", "interval_s": "fast"},
        {"holder": "x", "interval_s": 0.1, "bogus": 1},
        {"holder": "x", "interval_s": 10**400},
        [1, 2],
    ],
)
async def test_bad_interval_bodies_are_400_and_change_nothing(agent: TestClient, body: Any) -> None:
    r = await agent.put("/v1/interval", json=body)
    assert r.status == 400 and "reason" in await r.json()
    state = await (await agent.get("/v1/interval")).json()
    assert state["leases"] == [] and state["interval_s"] == 0.02


async def test_non_json_body_is_400(agent: TestClient) -> None:
    r = await agent.put("/v1/interval", data=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 400 and (await r.json())["error"] == "bad_request"


async def test_a_body_naming_a_key_twice_is_400_and_changes_nothing(agent: TestClient) -> None:
    """The last value won: a lease for holder "b" from a body that also said "a", the interval a client
    may not have meant; the coordinator's API refuses such a body, and so does the agent's now."""
    body = b'{"holder": "a", "interval_s": 0.01, "holder": "b"}'
    r = await agent.put("/v1/interval", data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400 and await r.json() == {
        "error": "bad_request",
        "reason": 'body names the key "holder" twice in one object',
    }
    state = await (await agent.get("/v1/interval")).json()
    assert state["leases"] == [] and state["interval_s"] == 0.02


async def read_frames(ws: Any, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    end = time.monotonic() + timeout
    while len(frames) < count:
        msg = await ws.receive(timeout=max(0.01, end - time.monotonic()))
        frames.extend(json.loads(line) for line in msg.data.split("\n"))
    return frames


async def test_stream_replays_after_seq_then_goes_live(agent: TestClient) -> None:
    sampler = agent.app[CONTEXT].sampler
    while sampler.snapshot.sample.seq < 10:
        await asyncio.sleep(0.01)
    ws = await agent.ws_connect("/v1/stream", params={"after": "3"})
    frames = await read_frames(ws, 20)
    assert frames[0]["type"] == "hello" and frames[0]["memory_model"] == "unified"
    assert frames[0]["capabilities"]["gpus"][0]["fields"]["power_limit"]["reason"] == "NOT_SUPPORTED"
    seqs = [f["seq"] for f in frames[1:]]
    assert seqs[0] == 4 and seqs == list(range(4, 4 + len(seqs)))  # replay then live, no gap, no repeat
    assert all(f["boot_id"] == frames[0]["boot_id"] for f in frames[1:])
    await ws.close()


async def test_stream_announces_ring_overflow_as_gap() -> None:
    client = await start_agent(interval=0.01, ring=10)
    sampler = client.app[CONTEXT].sampler
    try:
        while sampler.snapshot.sample.seq < 30:
            await asyncio.sleep(0.01)
        ws = await client.ws_connect("/v1/stream", params={"after": "0"})
        frames = await read_frames(ws, 3)
        gap = frames[1]
        assert gap["type"] == "gap" and gap["after"] == 0 and gap["missing"] >= 20
        assert frames[2]["seq"] == gap["next_seq"] == gap["missing"] + 1
        await ws.close()
        assert sampler.snapshot.dropped_total >= 20
    finally:
        sampler.stop()
        await client.close()


@pytest.mark.parametrize("after", ["-1", "x", str(2**63)])
async def test_stream_bad_after_is_400(agent: TestClient, after: str) -> None:
    r = await agent.get("/v1/stream", params={"after": after})
    assert r.status == 400 and (await r.json())["error"] == "bad_request"


async def test_stream_after_beyond_the_newest_seq_is_refused_with_a_reason(agent: TestClient) -> None:
    sampler = agent.app[CONTEXT].sampler
    newest = sampler.last_seq
    ws = await agent.ws_connect("/v1/stream", params={"after": str(newest + 1_000_000)})
    hello, error = await read_frames(ws, 2, timeout=2.0)
    assert hello["type"] == "hello" and hello["boot_id"] == sampler.boot_id
    assert error["type"] == "error" and error["error"] == "after_beyond_newest"
    assert error["boot_id"] == sampler.boot_id and newest <= error["last_seq"] < newest + 1_000_000
    assert f"after={newest + 1_000_000} is beyond the newest seq" in error["reason"]
    msg = await ws.receive(timeout=2.0)  # closed at once, with the reason, instead of silence
    assert msg.type == WSMsgType.CLOSE and msg.data == CLOSE_AFTER_BEYOND_NEWEST
    assert msg.extra.startswith(f"after={newest + 1_000_000} is beyond the newest seq")
    # the newest seq itself is fine: the stream goes live from there
    ws = await agent.ws_connect("/v1/stream", params={"after": str(sampler.last_seq)})
    frames = await read_frames(ws, 3)
    assert frames[0]["type"] == "hello" and {f["type"] for f in frames[1:]} == {"sample"}
    await ws.close()


async def test_another_sites_page_cannot_open_the_stream_or_post(agent: TestClient) -> None:
    """A page of another site in a browser (cross-site WebSocket hijacking, a forged POST) gets 403; a
    client that is not a browser sends no Origin and is answered as before."""
    evil = {"Origin": "https://evil.example"}
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await agent.ws_connect("/v1/stream", headers=evil)
    assert refused.value.status == 403
    forged = await agent.post("/v1/sim/load", json={"util_ratio": 1.0}, headers=evil)
    assert forged.status == 403 and (await forged.json())["error"] == "cross_origin"
    assert (await agent.get("/metrics", headers=evil)).status == 200  # reading: the browser keeps it
    rebound = await agent.get("/metrics", headers={"Host": f"evil.example:{agent.port}"})
    assert rebound.status == 403 and (await rebound.json())["error"] == "host_not_allowed"  # DNS rebinding
    ws = await agent.ws_connect("/v1/stream")
    await ws.close()


async def test_sim_load_drives_power(agent: TestClient) -> None:
    r = await agent.post("/v1/sim/load", json={"util_ratio": 1.0, "model_bytes": 50 * 2**30})
    assert r.status == 200 and (await r.json())["power_w"] == 61.0
    r = await agent.post("/v1/sim/load", json={"util_ratio": 2})
    assert r.status == 400
    busy = r'^sparkwatch_gpu_power_watts\{gpu="0",node="spark-t"[^}]*\} 61\.0$'
    assert re.search(busy, await _metrics_showing(agent, busy), re.M)


async def _metrics_showing(agent: TestClient, pattern: str) -> str:
    """/metrics once a line matches ``pattern`` (a sample taken after a load change: on a loaded machine the
    sampler thread's next tick may come late), or after 5 s, for the caller's assertions to say what not."""
    deadline = time.monotonic() + 5.0
    while True:
        text = await (await agent.get("/metrics")).text()
        if re.search(pattern, text, re.M) or time.monotonic() > deadline:
            return text
        await asyncio.sleep(0.02)


async def test_sim_throttle_episodes_are_driven_and_bad_ones_refused(agent: TestClient) -> None:
    for body, words in (
        ({"throttle": {"reasons": 0}}, "clock_event_reasons must be a bitmask"),
        ({"throttle": {"reasons": True}}, "throttle reasons must be an integer"),
        ({"throttle": {"sm_clock_mhz": 700}}, "throttle needs reasons"),
        ({"throttle": {"reasons": 128, "sm_clock_mhz": 5000}}, "sm_clock_mhz must be within (0, 3003]"),
        ({"throttle": [128]}, 'throttle must be null or {"reasons"'),
    ):
        r = await agent.post("/v1/sim/load", json=body)
        assert r.status == 400 and words in (await r.json())["reason"], body
    r = await agent.post(
        "/v1/sim/load", json={"util_ratio": 0.5, "throttle": {"reasons": 0x20, "sm_clock_mhz": 900}}
    )
    assert r.status == 200
    active = r'^sparkwatch_gpu_clock_event_active\{[^}]*reason="sw_thermal"[^}]*\} 1\.0$'
    text = await _metrics_showing(agent, active)
    assert re.search(active, text, re.M)
    assert 'reason="hw_power_brake"' in text  # a reason the GPU can report, inactive: 0
    assert 'reason="display_clocks"' not in text  # one it says it cannot report: no series
    assert re.search(r"^sparkwatch_gpu_sm_clock_hertz\{[^}]*\} 9(\.0)?e\+08$", text, re.M)
    r = await agent.post("/v1/sim/load", json={"throttle": None})
    assert r.status == 200


async def test_routing_refusals_are_json_with_a_reason(agent: TestClient) -> None:
    """aiohttp's own 404, 405 and 413 answer like every other refusal."""
    r = await agent.get("/v1/nope")
    assert r.status == 404 and r.content_type == "application/json"
    assert await r.json() == {"error": "not_found", "reason": "no route for GET /v1/nope"}
    r = await agent.post("/v1/time")
    body = await r.json()
    assert r.status == 405 and body["error"] == "method_not_allowed" and "GET" in body["reason"]
    assert "GET" in r.headers["Allow"]
    r = await agent.put("/v1/interval", data=b"x" * (65 * 1024))
    body = await r.json()
    assert r.status == 413 and body["error"] == "request_entity_too_large" and "65536" in body["reason"]
    r = await agent.get("/v1/stream")  # not a WebSocket handshake
    assert r.status == 400 and (await r.json())["error"] == "bad_request"


async def test_bodies_the_parser_chokes_on_are_400_and_change_nothing(agent: TestClient) -> None:
    """Found by tests/fuzz/test_fuzz_agent_api.py: each of these was a 500."""
    before = await (await agent.get("/v1/interval")).json()
    cases = [
        (b"[" * 20000 + b"]" * 20000, {}),  # deeper than the parser recurses
        (b'{"holder": "a", "interval_s": ' + b"1" * 5000 + b"}", {}),  # more digits than int() takes
        (b'{"holder": "a", "interval_s": NaN}', {}),
        (b'{"holder": "\\ud800", "interval_s": 0.01}', {}),  # a holder no query could name
    ]
    for body, headers in cases:
        r = await agent.put("/v1/interval", data=body, headers=headers)
        refusal = await r.json()
        assert r.status == 400 and refusal["error"] == "bad_request", (body[:40], refusal)
        assert isinstance(refusal["reason"], str) and not refusal["reason"].startswith("{"), refusal
    r = await agent.post("/v1/sim/load", data=b'{"model_bytes": ' + b"1" * 5000 + b"}")
    assert r.status == 400
    assert await (await agent.get("/v1/interval")).json() == before
    # JSON is UTF-8 whatever charset a client names (an unknown one was a LookupError)
    utf99 = {"Content-Type": "application/json; charset=utf-99"}
    r = await agent.put("/v1/interval", data=b'{"holder": "a", "interval_s": 0.01}', headers=utf99)
    assert r.status == 200 and (await r.json())["interval_s"] == 0.01


@pytest.mark.parametrize(
    "body",
    [
        {"holder": "x", "interval_s": 0.1, "ttl_s": None},  # a 500 with a traceback (an assert)
        {"holder": "", "interval_s": 0.1},
        {"holder": "a\u0000b", "interval_s": 0.1},  # a control character shown in every lease list
        {"holder": "h" * 129, "interval_s": 0.1},
        {"holder": "x", "interval_s": "0.1"},
        {"holder": "x", "interval_s": True},
    ],
)
async def test_lease_bodies_a_client_got_wrong_are_400_with_the_reason(agent: TestClient, body: Any) -> None:
    r = await agent.put("/v1/interval", json=body)
    refusal = await r.json()
    assert r.status == 400 and refusal["error"] == "bad_request", refusal
    key = (
        "holder"
        if "holder" in refusal["reason"]
        else ("ttl_s" if body.get("ttl_s", 1) is None else "interval_s")
    )
    assert refusal["reason"].startswith(key), refusal
    state = await (await agent.get("/v1/interval")).json()
    assert state["leases"] == [] and state["interval_s"] == 0.02


async def _load(agent: TestClient) -> tuple[Any, ...]:
    """The simulated GPU's load and its clocks (SM MHz, event reasons: a throttle's while one runs)."""
    state = await (await agent.post("/v1/sim/load", json={})).json()
    return state["util_ratio"], state["model_bytes"], agent.app[CONTEXT].sim.clocks()


async def test_a_sim_load_refused_in_part_changes_nothing(agent: TestClient) -> None:
    """A throttle was started and then the util_ratio refused: 400, with the throttle on."""
    before = await _load(agent)
    for body in (
        {"throttle": {"reasons": 128, "sm_clock_mhz": 900}, "util_ratio": 2},
        {"throttle": {"reasons": 128}, "model_bytes": -5},
    ):
        r = await agent.post("/v1/sim/load", json=body)
        assert r.status == 400 and await _load(agent) == before, await r.json()
    await agent.post("/v1/sim/load", json={"throttle": {"reasons": 128, "sm_clock_mhz": 900}})
    during = await _load(agent)
    assert during[2] == (900, 128)
    r = await agent.post("/v1/sim/load", json={"throttle": None, "model_bytes": -5})
    assert r.status == 400 and await _load(agent) == during


async def test_the_429s_reason_and_retry_after_say_the_same_seconds(agent: TestClient) -> None:
    for i in range(MAX_LEASES):
        await agent.put("/v1/interval", json={"holder": f"h{i}", "interval_s": 1, "ttl_s": 29.5 + i})
    r = await agent.put("/v1/interval", json={"holder": "extra", "interval_s": 0.5})
    said = re.search(r"in (\d+) s\)", (await r.json())["reason"])
    assert r.status == 429 and said is not None and said.group(1) == r.headers["Retry-After"] == "30"


async def test_a_plain_get_on_the_stream_says_why_in_one_line(agent: TestClient) -> None:
    r = await agent.get("/v1/stream")
    reason = (await r.json())["reason"]
    assert r.status == 400 and "\n" not in reason and "WebSocket" in reason, reason


async def test_a_stuck_sampler_makes_metrics_serve_no_hardware_value_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read that blocks (a hung NVML call, a FIFO as meminfo) stopped the samples: /metrics served the
    values from before it as fresh, `gpu_up 1`, and nothing was logged; only /healthz said so (a sweep)."""
    config = build_config({"node": "spark-t", "backend": "sim", "interval": 0.02}, {})
    node = assemble(config)
    ahead_ns = [0]
    ctx = agent_context(node.sampler, node.sim, None, mono_ns=lambda: time.monotonic_ns() + ahead_ns[0])
    client = TestClient(TestServer(make_app(ctx)))
    await client.start_server()
    node.sampler.start()
    try:
        while node.sampler.snapshot.sample is None:
            await asyncio.sleep(0.005)
        node.sampler.stop()  # no sample from here: what a stuck sampler leaves

        async def scrape() -> str:
            return await (await client.get("/metrics")).text()

        assert (
            "sparkwatch_gpu_power_watts{" in await scrape()
            and "sparkwatch_memory_used_bytes{" in await scrape()
        )
        ahead_ns[0] = 6 * 10**9  # past the health limit (at least 5 s)
        with caplog.at_level(logging.INFO, logger="sparkwatch_agent.serving.metrics"):
            stuck, again = await scrape(), await scrape()
            assert (await client.get("/healthz")).status == 503
            ahead_ns[0] = 0
            fresh = await scrape()
    finally:
        await client.close()
    for text in (stuck, again):
        assert "sparkwatch_gpu_power_watts{" not in text and "sparkwatch_memory_used_bytes{" not in text
        assert (
            "sparkwatch_sensor_power_watts{" not in text and "sparkwatch_gpu_clock_event_active{" not in text
        )
        assert (
            "sparkwatch_agent_samples_total{" in text
            and "sparkwatch_agent_last_sample_timestamp_seconds{" in text
        )
        assert "sparkwatch_agent_gpu_up{" not in text  # the GPU's last answer is not the present's
    assert "sparkwatch_gpu_power_watts{" in fresh and 'sparkwatch_agent_gpu_up{node="spark-t"} 1.0' in fresh
    said = [r.getMessage() for r in caplog.records if r.name == "sparkwatch_agent.serving.metrics"]
    assert len(said) == 2 and said[0].startswith("no sample for 6.") and "a hardware read blocks" in said[0]
    assert said[1] == "sampling again after a stall: /metrics serves hardware values again"
