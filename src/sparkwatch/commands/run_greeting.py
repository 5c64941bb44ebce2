"""`run`'s greeting of the nodes before the run opens: every agent's hello waited for (bounded), a node
still silent after a moment named at once with why, and one never heard from named before the command
starts (the quality line after the benchmark would say it too late: a long benchmark ran without it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sparkwatch.client import CoordinatorClient
from sparkwatch.client_waits import connected, link_state, refused
from sparkwatch.commands.outcome import no_export_json
from sparkwatch.commands.quality import EXIT_NOT_SOUND, Quality
from sparkwatch.commands.run_options import RunOptions
from sparkwatch.hello_facts import misnamed

#: How long the greeting waits quietly before it names the nodes it is still waiting for.
GREET_QUIET_S = 2.0


async def greet(client: CoordinatorClient, opts: RunOptions) -> list[dict[str, Any]]:
    """Wait (bounded) for every agent's hello before the run opens, so the coordinator can refuse a run
    in which one agent is listed twice; an agent that calls itself by another name is a warning. Returns
    the nodes as /v1/nodes says them; those not heard from (:func:`silent_of`: their samples are not
    waited for before the command) or not connected now (a standing coordinator's node that is down) are
    named on stderr. A node still missing after a moment is named at once, with why, so the wait is not a
    silent one."""
    first_s = min(GREET_QUIET_S, opts.wait_nodes_s)
    nodes = await client.wait_for_connected(first_s)
    waiting = [n for n in nodes if not connected(n) and not refused(n)]  # refused: waiting cannot help
    if waiting and opts.wait_nodes_s > first_s:
        for node in waiting:
            awaited = "connect" if node.get("hardware") else "say hello"  # a standing coordinator's, known
            opts.stderr.write(
                f"sparkwatch: waiting up to {opts.wait_nodes_s - first_s:g} s more for node {node['node']} to"
                f" {awaited} ({link_state(node)})\n"
            )
        nodes = await client.wait_for_connected(opts.wait_nodes_s - first_s)
    for node in nodes:  # before the command starts, not only in the quality line after it
        if not connected(node):
            opts.stderr.write(f"sparkwatch: warning: {unheard(node, opts.wait_nodes_s, opts.strict)}\n")
    if opts.nodes_file is None:  # else the embedded coordinator logs the warning itself, on this stderr
        for node in nodes:
            hello = {"node": node.get("agent_node")} if node.get("hardware") else None
            if (warning := misnamed(node["node"], hello)) is not None:
                opts.stderr.write(f"sparkwatch: warning: {warning}\n")
    return nodes


def silent_of(nodes: Sequence[dict[str, Any]]) -> frozenset[str]:
    """The nodes whose agent has not said hello."""
    return frozenset(str(node["node"]) for node in nodes if not node.get("hardware"))


def unheard(node: dict[str, Any], waited_s: float, strict: bool = False) -> str:
    """What to say of a node whose agent has not said hello, or is not connected (a standing coordinator
    keeps a node's last hello), when the run opens (its link's state)."""
    after = "" if refused(node) else f" after {waited_s:g} s"  # refused: not waited for
    known = node.get("hardware")  # a standing coordinator's node that said hello before
    state, until = ("is not connected", "it reconnects") if known else ("has not said hello", "it does")
    # with --strict, the line after all of these says the command was not started, once
    goes_on = f"; the run goes on without its samples until {until} (--strict fails such a run)"
    return f"node {node['node']} {state}{after} ({link_state(node)}){'' if strict else goes_on}"


def strict_refusal(opts: RunOptions, nodes: Sequence[dict[str, Any]]) -> int | None:
    """With ``--strict``, the exit code of a run that is not started because a node was never heard from
    when it would open (a long benchmark would most likely run only to exit 3); None: go on. ``--json``
    still prints its object: no run, no export, and a quality that says why."""
    absent = [n for n in nodes if not connected(n)]
    if not opts.strict or not absent:
        return None
    silent = sorted(n["node"] for n in absent if not n.get("hardware"))
    away = sorted(n["node"] for n in absent if n.get("hardware"))
    said = [f"node(s) {', '.join(silent)} have not said hello"] if silent else []
    said += [f"node(s) {', '.join(away)} are not connected"] if away else []
    opts.stderr.write(f"sparkwatch: --strict: the command was not started: {'; '.join(said)}\n")
    if opts.json_out:
        problems = [f"not started: no hello from {', '.join(silent)}"] if silent else []
        problems += [f"not started: not connected: {', '.join(away)}"] if away else []
        quality = Quality(0, 0, len(nodes) - len(absent), len(nodes), problems, measured=False)
        print(json.dumps({**no_export_json("", EXIT_NOT_SOUND, None, False), "quality": quality.to_json()}))
    return EXIT_NOT_SOUND
