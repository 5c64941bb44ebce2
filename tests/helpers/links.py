"""A WebSocket link to node n1, as the coordinator makes one, for tests that drive a link by itself."""

from __future__ import annotations

import aiohttp

from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.ws_link import WsLink
from sparkwatch.store import Store
from sparkwatch_agent.shared.backoff import ExponentialBackoff


def n1_link(
    store: Store, session: aiohttp.ClientSession, base_url: str, backoff: ExponentialBackoff, probes: int
) -> WsLink:
    """Node n1's link to the agent at ``base_url`` (its nodes.toml URL unused), storing into ``store``."""
    return WsLink(
        NodeSpec(name="n1", url="ws://unused"),
        store,
        session,
        holder="t",
        desired_interval=lambda: None,
        base_url=base_url,
        backoff=backoff,
        probes=probes,
    )
