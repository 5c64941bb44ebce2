"""What two nodes of one nodes file may not share, a meter or an agent: the one machine would be measured,
and summed, under both; and how the file's keys are written in what it says."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the specs' type only: nodes_file imports these checks
    from sparkwatch.links.nodes_file import NodeSpec

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class SharedError(Exception):
    """Two nodes share what one node's alone; the message says which and what."""


def one_node_per_meter(origin: str, specs: list[NodeSpec]) -> None:
    """One meter named by two nodes (one plug in both tables) counted its whole draw under each: refused."""
    seen: dict[tuple[object, ...], str] = {}
    for spec in specs:
        if spec.meter is not None and (first := seen.setdefault(spec.meter.identity, spec.name)) != spec.name:
            raise SharedError(
                f"{origin}: nodes.{toml_key(spec.name)}.meter: the meter of nodes.{toml_key(first)} too"
                f" ({spec.meter.kind} {spec.meter.url}): its draw would be counted under both nodes"
            )


def one_node_per_agent(origin: str, specs: list[NodeSpec]) -> None:
    """One agent under two node names (a table copied and its url left as it was) streamed to both, and a
    standing coordinator counted the one machine twice in every sum (only `nodes check` said so): refused.
    An exec node starts its own agent; two of them on one host are told apart by their command."""
    seen: dict[tuple[object, ...], str] = {}
    for spec in specs:
        if (first := seen.setdefault(_agent_identity(spec), spec.name)) != spec.name:
            started = f"exec_command {spec.exec_command!r}" if spec.mode == "exec" else ""
            where = (
                spec.url
                or f"ssh {spec.ssh} port {spec.ssh_port}, {started or f'agent_port {spec.agent_port}'}"
            )
            raise SharedError(
                f"{origin}: nodes.{toml_key(spec.name)}: the agent of nodes.{toml_key(first)} too ({where}):"
                " one machine would be measured, and summed, as two nodes"
            )


def _agent_identity(spec: NodeSpec) -> tuple[object, ...]:
    if spec.url is not None:
        parts = urlsplit(spec.http_base)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return ("url", parts.scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/"))
    user, _, host = (spec.ssh or "").rpartition("@")  # a gateway may pick the machine by its user
    if spec.mode == "exec":
        return ("exec", user, host.lower(), spec.ssh_port, spec.exec_command)
    return ("tunnel", user, host.lower(), spec.ssh_port, spec.agent_port)


def toml_key(key: str) -> str:
    """A key as TOML writes it: bare when it can be, else quoted (``nodes."spark 2"``)."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)
