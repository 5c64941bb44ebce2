"""`run` says, before the command starts, which node's agent has not said hello (the quality line after the
benchmark said it too late: a long benchmark ran without that node), and, while it waits for one, which and
why (a new user's run sat 15 s silent on an agent that refused the connection)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from sparkwatch.client_waits import NodeWaits
from sparkwatch.commands.run_greeting import GREET_QUIET_S, greet, silent_of
from sparkwatch.commands.run_options import RunOptions


class Nodes:
    """The client seam `_greet` waits on: /v1/nodes as it stood when the wait ended."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.waited_s: list[float] = []

    async def wait_for_hellos(self, timeout_s: float) -> list[dict[str, Any]]:
        self.waited_s.append(timeout_s)
        return self.nodes


def greeted(nodes: list[dict[str, Any]], silent: set[str] | None = None, waits: int = 1) -> str:
    """What `greet` says of ``nodes``; it returns the nodes not heard from, ``silent`` (none by default),
    after ``waits`` waits that add up to at most the 15 s the options give."""
    err = io.StringIO()
    client = Nodes(nodes)
    opts = RunOptions(command=["true"], wait_nodes_s=15.0, stderr=err)
    assert silent_of(asyncio.run(greet(client, opts))) == (silent or set())  # type: ignore[arg-type]
    assert client.waited_s == [GREET_QUIET_S, 15.0 - GREET_QUIET_S][:waits]
    return err.getvalue()


def test_a_node_without_a_hello_is_named_with_its_links_state_before_the_command_starts() -> None:
    said = greeted(
        [
            {"node": "spark-1", "hardware": {"gpus": []}, "agent_node": "spark-1", "status": "streaming"},
            {
                "node": "ghost",
                "hardware": None,
                "status": "connecting",
                "error": "Cannot connect to host 127.0.0.1:9 [Connection refused]",
            },
            {"node": "locked", "status": "unauthorized", "error": None},
        ],
        silent={"ghost", "locked"},
        waits=2,
    )
    assert said.splitlines() == [
        f"sparkwatch: waiting up to {15 - GREET_QUIET_S:g} s more for node ghost to say hello (connecting:"
        " Cannot connect to host 127.0.0.1:9 [Connection refused])",
        "sparkwatch: warning: node ghost has not said hello after 15 s (connecting: Cannot connect to host"
        " 127.0.0.1:9 [Connection refused]); the run goes on without its samples until it does (--strict"
        " fails such a run)",
        "sparkwatch: warning: node locked has not said hello (unauthorized); the run goes on without its"
        " samples until it does (--strict fails such a run)",
    ]


def test_nodes_that_all_said_hello_get_no_warning() -> None:
    assert greeted([{"node": "spark-1", "hardware": {"gpus": []}, "agent_node": "spark-1"}]) == ""


def test_a_node_that_refused_the_token_is_not_waited_for() -> None:
    """Its link will not come up while the run waits: said once, with no wait for it."""
    said = greeted([{"node": "locked", "status": "unauthorized", "error": None}], silent={"locked"})
    assert said.startswith("sparkwatch: warning: node locked has not said hello (unauthorized)")


class Behind(NodeWaits):
    """/v1/nodes with one node caught up to every time asked and one whose agent never said hello."""

    def __init__(self) -> None:
        self.reads = 0

    async def nodes(self) -> list[dict[str, Any]]:
        self.reads += 1
        latest = {"t_wall_ns": 2**62, "interval_s": 0.1}
        return [
            {"node": "spark-1", "connected": True, "latest": latest, "clock": {"offset_ns": 0}},
            {"node": "ghost", "connected": False, "latest": None},
        ]


def test_the_wait_for_samples_before_the_command_skips_a_node_never_heard_from() -> None:
    """A node that has not said hello cannot catch up either: the trial's run of `true` with such a node
    waited 15 s for its hello, then 15 s more for its samples, before the command started."""
    waits = Behind()
    behind = asyncio.run(waits.wait_caught_up(1, timeout_s=10.0, interval_s=0.1, skip=frozenset({"ghost"})))
    assert behind == [] and waits.reads == 1  # ready at the first read: no waiting for the time to be up
    assert asyncio.run(waits.wait_caught_up(1, timeout_s=0.3, interval_s=0.1)) == ["ghost"]
    assert waits.reads > 2  # without the skip: polled until the time was up
