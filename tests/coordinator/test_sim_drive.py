"""`sparkwatch sim-model --agents`: the model's load reaches every agent's ``POST /v1/sim/load`` as the
demo's per-rank utilisation; an agent that cannot be driven is refused at start in one line, and one that
fails later is logged once and again once it recovers. The agents here are loopback servers that answer
as an agent does (its Server header, its JSON refusals); the real agents are driven in
tests/e2e/test_walkthrough.py."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sparkwatch.cli_types import agent_urls
from sparkwatch.commands.sim_drive import (
    COLD_UTIL,
    MODEL_BYTES_PER_NODE,
    DrivenAgents,
    SimDriveError,
    SimDriver,
    driving,
    warm_util,
)
from sparkwatch_agent.shared.http import AGENT_SERVER, COORDINATOR_SERVER, json_error, name_server


class FakeAgent:
    """Records each load it is sent; ``failing`` answers 503 as an agent's guard would."""

    def __init__(self, name: str = AGENT_SERVER) -> None:
        self.loads: list[float] = []
        self.models: list[int | None] = []
        self.failing = False
        app = web.Application()
        name_server(app, name)
        app.router.add_post("/v1/sim/load", self.load)
        self.server = TestServer(app)

    async def load(self, request: web.Request) -> web.Response:
        if self.failing:
            return json_error(503, "busy", "too many connections")
        body = json.loads(await request.read())
        self.loads.append(body["util_ratio"])
        self.models.append(body.get("model_bytes"))
        return web.json_response({})

    url = ""


async def started(*agents: FakeAgent) -> None:
    for agent in agents:
        await agent.server.start_server()
        agent.url = str(agent.server.make_url("")).rstrip("/")


async def settled(agents: tuple[FakeAgent, ...], count: int) -> None:
    for _ in range(200):
        if all(len(a.loads) >= count for a in agents):
            return
        await asyncio.sleep(0.01)
    raise AssertionError([a.loads for a in agents])


async def test_each_load_reaches_every_agent_as_its_ranks_utilisation() -> None:
    agents = (FakeAgent(), FakeAgent())
    await started(*agents)
    try:
        async with driving(DrivenAgents(tuple(a.url for a in agents))) as driver:
            assert driver is not None
            await settled(agents, 1)  # loaded, idle
            for count, level in enumerate(("cold", "warm", "idle"), start=2):
                driver.on_load(level)
                await settled(agents, count)
    finally:
        for agent in agents:
            await agent.server.close()
    assert agents[0].loads == [0.0, COLD_UTIL, warm_util(0), 0.0, 0.0]  # the last: idle as it stops
    assert agents[1].loads == [0.0, COLD_UTIL, warm_util(1), 0.0, 0.0]
    assert warm_util(0) != warm_util(1)
    for agent in agents:  # the weights resident from the start, gone at the end; the loads leave them be
        assert agent.models == [MODEL_BYTES_PER_NODE, None, None, None, 0]


async def test_an_agent_that_cannot_be_driven_is_refused_at_start_in_words() -> None:
    coordinator, refusing = FakeAgent(COORDINATOR_SERVER), FakeAgent()
    coordinator.failing = refusing.failing = True  # a coordinator refuses the route (a 404, a 401)
    await started(coordinator, refusing)
    try:
        for agent, said in (
            (coordinator, "it is a sparkwatch-coordinator, not an agent"),
            (refusing, "HTTP 503: too many connections"),
        ):
            with pytest.raises(SimDriveError) as refused:
                async with driving(DrivenAgents((agent.url,))):
                    raise AssertionError("driven")
            assert str(refused.value) == f"cannot drive the simulated GPU at {agent.url}: {said}"
    finally:
        await coordinator.server.close()
        await refusing.server.close()


async def test_an_agent_failing_later_is_logged_once_and_again_when_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = FakeAgent()
    await started(agent)
    try:
        async with aiohttp.ClientSession() as session:
            driver = SimDriver(session, [agent.url])
            task = asyncio.create_task(driver.run())
            agent.failing = True
            with caplog.at_level("INFO", logger="sparkwatch.commands.sim_drive"):
                for level in ("cold", "warm", "idle", "warm"):
                    driver.on_load(level)
                    await asyncio.sleep(0.05)
                agent.failing = False
                driver.on_load("idle")
                await settled((agent,), 1)
            task.cancel()
    finally:
        await agent.server.close()
    said: list[Any] = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", f"cannot drive the simulated GPU at {agent.url}: HTTP 503: too many connections"),
        ("INFO", f"driving the simulated GPU at {agent.url} again"),
    ]
    assert agent.loads == [0.0]


def test_agent_urls_are_bases_without_credentials() -> None:
    assert agent_urls("http://127.0.0.1:9464, http://[::1]:9465/") == (
        "http://127.0.0.1:9464",
        "http://[::1]:9465",
    )
    for text, said in (
        ("http://127.0.0.1:9464/v1", "an agent URL is its base, http://HOST:PORT"),
        ("ws://127.0.0.1:9464", "must be an http:// or https:// URL"),
        ("http://user:pw@127.0.0.1:9464", "must not carry credentials"),
        ("http://127.0.0.1:9464,", "must be an http:// or https:// URL"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            agent_urls(text)
