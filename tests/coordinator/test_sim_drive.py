"""`sparkwatch sim-model --agents`: the model's load reaches every agent's ``POST /v1/sim/load`` as the
demo's per-rank utilisation, with the weights resident; only the newest load is sent to an agent that is
slow to answer, and no other agent waits for it; an agent that cannot be driven is refused at start in one
line (the others left unloaded), and one that fails later is logged once and again once it recovers. The
agents here are loopback servers that answer as an agent does (its Server header, its JSON refusals); the
real agents are driven in tests/e2e/test_walkthrough.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
from collections.abc import Callable

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

M = MODEL_BYTES_PER_NODE


class FakeAgent:
    """Records each load it takes; ``refusing`` answers with that status as an agent would; ``held``, while
    clear, keeps each request waiting (an agent slow to answer)."""

    def __init__(self, name: str = AGENT_SERVER) -> None:
        self.url = ""
        self.loads: list[tuple[float, int]] = []
        self.refused = 0
        self.refusing: int | None = None
        self.held = asyncio.Event()
        self.held.set()
        app = web.Application()
        name_server(app, name)
        app.router.add_post("/v1/sim/load", self.load)
        self.server = TestServer(app)

    async def load(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        await self.held.wait()
        if self.refusing is not None:
            self.refused += 1
            return json_error(self.refusing, "refused", f"refused with {self.refusing}")
        self.loads.append((body["util_ratio"], body["model_bytes"]))
        return web.json_response({})

    async def start(self) -> FakeAgent:
        await self.server.start_server()
        self.url = str(self.server.make_url("")).rstrip("/")
        return self


async def until(done: Callable[[], bool]) -> None:
    for _ in range(500):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within 5 s")


async def test_each_load_reaches_every_agent_as_its_ranks_utilisation() -> None:
    agents = (await FakeAgent().start(), await FakeAgent().start())
    try:
        async with driving(DrivenAgents(tuple(a.url for a in agents))) as driver:
            assert driver is not None
            for count, level in enumerate(("cold", "warm", "idle"), start=2):
                driver.on_load(level)
                await until(lambda: all(len(a.loads) >= count for a in agents))  # noqa: B023
    finally:
        for agent in agents:
            await agent.server.close()
    # loaded and idle at the start, the loads with the weights resident, idle and unloaded at the end
    assert agents[0].loads == [(0.0, M), (COLD_UTIL, M), (warm_util(0), M), (0.0, M), (0.0, 0)]
    assert agents[1].loads == [(0.0, M), (COLD_UTIL, M), (warm_util(1), M), (0.0, M), (0.0, 0)]
    assert warm_util(0) != warm_util(1)


async def test_a_slow_agent_gets_only_the_newest_load_and_holds_no_other_back() -> None:
    slow, quick = await FakeAgent().start(), await FakeAgent().start()
    try:
        async with aiohttp.ClientSession() as session:
            driver = SimDriver(session, [slow.url, quick.url])
            task = asyncio.create_task(driver.run())
            slow.held.clear()
            driver.on_load("cold")
            await until(lambda: quick.loads == [(COLD_UTIL, M)])
            for count, level in ((2, "warm"), (3, "idle")):  # while the slow agent still holds the cold one
                driver.on_load(level)
                await until(lambda: len(quick.loads) == count)  # noqa: B023
            slow.held.set()
            await until(lambda: len(slow.loads) == 2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await slow.server.close()
        await quick.server.close()
    assert slow.loads == [(COLD_UTIL, M), (0.0, M)]  # warm was overtaken by idle: never sent
    assert quick.loads == [(COLD_UTIL, M), (warm_util(1), M), (0.0, M)]


async def test_an_agent_that_cannot_be_driven_is_refused_at_start_in_words(tmp_path: pathlib.Path) -> None:
    good, coordinator, refusing = (
        await FakeAgent().start(),
        await FakeAgent(COORDINATOR_SERVER).start(),
        await FakeAgent().start(),
    )
    coordinator.refusing = 404  # a coordinator has no such route
    refusing.refusing = 401
    try:
        for agent, said in (
            (coordinator, "it is a sparkwatch-coordinator, not an agent"),
            (refusing, "HTTP 401: refused with 401 (give the agents' token with --agent-token-file)"),
        ):
            with pytest.raises(SimDriveError) as refused:
                async with driving(DrivenAgents((good.url, agent.url))):
                    raise AssertionError("driven")
            assert str(refused.value) == f"cannot drive the simulated GPU at {agent.url}: {said}"
        token = tmp_path / "agents.token"
        token.write_text("not-the-agents-token-0123456789")
        token.chmod(0o600)
        with pytest.raises(SimDriveError, match=r"HTTP 401: .* \(the token in --agent-token-file is not the"):
            async with driving(DrivenAgents((refusing.url,), token)):
                raise AssertionError("driven")
    finally:
        for agent in (good, coordinator, refusing):
            await agent.server.close()
    assert good.loads == [(0.0, M), (0.0, 0)] * 2  # loaded, then unloaded when the next could not be


async def test_an_agent_failing_later_is_logged_once_and_again_when_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = await FakeAgent().start()
    try:
        async with aiohttp.ClientSession() as session:
            driver = SimDriver(session, [agent.url])
            task = asyncio.create_task(driver.run())
            agent.refusing = 503
            with caplog.at_level("INFO", logger="sparkwatch.commands.sim_drive"):
                for count, level in enumerate(("cold", "warm", "idle", "warm"), start=1):
                    driver.on_load(level)
                    await until(lambda: agent.refused == count)  # noqa: B023
                agent.refusing = None
                driver.on_load("idle")
                await until(lambda: len(agent.loads) == 1)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    finally:
        await agent.server.close()
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", f"cannot drive the simulated GPU at {agent.url}: HTTP 503: refused with 503"),
        ("INFO", f"driving the simulated GPU at {agent.url} again"),
    ]
    assert agent.loads == [(0.0, M)]


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
