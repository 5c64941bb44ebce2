"""`run` says, before the command starts, which node's agent has not said hello (the quality line after the
benchmark said it too late: a long benchmark ran without that node)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from sparkwatch.commands.run import _greet
from sparkwatch.commands.run_options import RunOptions


class Nodes:
    """The client seam `_greet` waits on: /v1/nodes as it stood when the wait ended."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.waited_s: float | None = None

    async def wait_for_hellos(self, timeout_s: float) -> list[dict[str, Any]]:
        self.waited_s = timeout_s
        return self.nodes


def greet(nodes: list[dict[str, Any]]) -> str:
    err = io.StringIO()
    client = Nodes(nodes)
    asyncio.run(_greet(client, RunOptions(command=["true"], wait_nodes_s=15.0, stderr=err)))  # type: ignore[arg-type]
    assert client.waited_s == 15.0
    return err.getvalue()


def test_a_node_without_a_hello_is_named_with_its_links_state_before_the_command_starts() -> None:
    said = greet(
        [
            {"node": "spark-1", "hardware": {"gpus": []}, "agent_node": "spark-1", "status": "streaming"},
            {
                "node": "ghost",
                "hardware": None,
                "status": "connecting",
                "error": "Cannot connect to host 127.0.0.1:9 [Connection refused]",
            },
            {"node": "locked", "status": "unauthorized", "error": None},
        ]
    )
    assert said.splitlines() == [
        "sparkwatch: warning: node ghost has not said hello after 15 s (connecting: Cannot connect to host"
        " 127.0.0.1:9 [Connection refused]); the run goes on without its samples until it does (--strict"
        " fails such a run)",
        "sparkwatch: warning: node locked has not said hello after 15 s (unauthorized); the run goes on"
        " without its samples until it does (--strict fails such a run)",
    ]


def test_nodes_that_all_said_hello_get_no_warning() -> None:
    assert greet([{"node": "spark-1", "hardware": {"gpus": []}, "agent_node": "spark-1"}]) == ""
