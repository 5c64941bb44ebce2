"""What a link tells the log when its agent goes away and comes back: one WARNING when a streaming link goes
down (so `journalctl -p warning` can find it), another only when a redial fails for another reason, nothing
above DEBUG while the redials keep failing alike, and one INFO line when it streams again."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from sparkwatch import cli
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkState, LinkStatus
from sparkwatch.links.ws_link import WsLink
from sparkwatch.store import Store
from sparkwatch_agent.shared.backoff import ExponentialBackoff


async def until(done: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def link_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """(level, message) of the link's state changes and redials, in order."""
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "sparkwatch.links.state"]


async def test_down_is_a_warning_and_the_reconnect_an_info_line(
    agent_factory: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-1", "--interval", "0.1")
    store = Store(tmp_path / "c.db")
    caplog.set_level(logging.DEBUG, logger="sparkwatch.links.state")
    async with aiohttp.ClientSession() as session:
        link = WsLink(
            NodeSpec(name="spark-1", url=agent.url.replace("http", "ws")),
            store,
            session,
            holder="test",
            desired_interval=lambda: None,
            backoff=ExponentialBackoff(initial_s=0.05, maximum_s=0.2),
        )
        task = asyncio.create_task(link.run())
        try:
            await until(lambda: link.state.status is LinkStatus.STREAMING)
            agent.stop()
            await until(lambda: link.state.reconnects >= 5)  # the first loss and a few failed redials
            assert link.state.status is LinkStatus.DOWN
            agent_factory("--backend", "sim", "--node", "spark-1", "--interval", "0.1", port=agent.port)
            await until(lambda: link.state.status is LinkStatus.STREAMING)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    store.close()
    lines = link_lines(caplog)
    loud = [(level, text) for level, text in lines if level != "DEBUG"]
    levels = [level for level, _ in loud]
    # the loss, then the first redial refused: one WARNING per reason (each said once), not per redial
    assert levels[0] == levels[-1] == "INFO" and set(levels[1:-1]) == {"WARNING"} and len(loud) <= 4, lines
    assert loud[0][1] == loud[-1][1] == "node spark-1: link streaming (ws)"
    downs = [text.partition("; retrying")[0] for _, text in loud[1:-1]]
    assert all(d.startswith("node spark-1: link down (ws): ") for d in downs) and len(set(downs)) == len(
        downs
    )
    redials = [text for level, text in lines if level == "DEBUG" and "link down" in text]
    assert len(redials) >= 3  # each failed redial is there for --log-level debug, and only there


@pytest.mark.parametrize(("level", "asyncssh_level"), [("info", logging.WARNING), ("debug", logging.NOTSET)])
def test_asyncssh_says_only_warnings_unless_debug_is_asked(
    level: str, asyncssh_level: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """asyncssh logs ~17 INFO lines per SSH dial: a node that is down would fill the journal with them."""
    chatty = logging.getLogger("asyncssh")
    before = chatty.level
    try:
        chatty.setLevel(logging.NOTSET)
        assert cli.main(["--log-level", level, "schema"]) == 0
        assert chatty.level == asyncssh_level
    finally:
        chatty.setLevel(before)
    assert capsys.readouterr().out.startswith("{")


def test_a_redial_that_fails_for_another_reason_is_a_warning_again(caplog: pytest.LogCaptureFixture) -> None:
    """sshd back with a changed host key: the link stayed down, and the new reason (the one that matters)
    was logged only at DEBUG; `/v1/nodes` said it, the journal at WARNING never did."""
    state = LinkState("spark-1", transport="ssh")
    caplog.set_level(logging.DEBUG, logger="sparkwatch.links.state")
    lost, key = "ssh root@h: Connection lost", "ssh root@h: Host key is not trusted for host h (…)"
    for error in (lost, lost, key, key, lost):
        state.enter(LinkStatus.DOWN, error, retry_s=1.0)
    levels = [r.levelname for r in caplog.records if r.name == "sparkwatch.links.state"]
    assert levels == ["WARNING", "DEBUG", "WARNING", "DEBUG", "WARNING"]
