"""Waiting on the coordinator's ``/v1/nodes`` until the nodes are as a command needs them (every agent said
hello, clocks probed, samples caught up to a time): polled, bounded, and cut short where waiting longer
could not help (an agent that refused the coordinator's token)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

log = logging.getLogger(__name__)

POLL_S = 0.1
#: The /v1/nodes statuses of a link that waiting cannot bring up (links.state.Misconfigured): its agent
#: answered 401, or another sparkwatch service answers at its address.
REFUSED_STATUSES = ("unauthorized", "misaddressed")
#: The least and the most a command waits for its nodes' samples up to a run's end.
END_WAIT_S = (5.0, 60.0)


def end_wait_s(nodes: Collection[dict[str, Any]]) -> float:
    """How long to wait for every node's first sample and meter reading after a run's end: once the run's
    lease is released, an agent samples at its own interval again (a node idling at 10 s was named behind
    after 5 s), at most a minute; a meter is polled at its own interval, which nodes.toml keeps to a minute
    (up to 91 s then)."""
    slowest = max((float(n.get("interval_s") or 0.0) for n in nodes), default=0.0)
    meter = max((_meter_interval_s(n) for n in nodes), default=0.0)
    return max(
        min(END_WAIT_S[1], max(END_WAIT_S[0], 1.5 * slowest + 1.0)), 1.5 * meter + 1.0 if meter else 0.0
    )


class NodeWaits:
    """The waits of :class:`sparkwatch.client.CoordinatorClient`, over its ``nodes`` and
    ``nodes_and_engine`` reads."""

    async def nodes(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def nodes_and_engine(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        raise NotImplementedError

    async def wait_for_nodes(
        self, ready: Callable[[dict[str, Any]], bool], timeout_s: float
    ) -> tuple[list[dict[str, Any]], bool]:
        """The nodes once ``ready`` holds for every one (True), or as they are when the time is up or when
        every node that is not ready has been refused (False): waiting longer would not change that."""
        deadline = time.monotonic() + timeout_s
        while True:
            nodes = await self.nodes()
            if all(ready(n) for n in nodes):
                return nodes, True
            if time.monotonic() > deadline or all(ready(n) or refused(n) for n in nodes):
                return nodes, False
            await asyncio.sleep(POLL_S)

    async def wait_caught_up(
        self,
        t_wall_ns: int,
        timeout_s: float,
        interval_s: float | None = None,
        skip: Collection[str] = (),
        *,
        meters: bool = False,
    ) -> list[str]:
        """Until every node's newest stored sample is from ``t_wall_ns`` or later (and, given ``interval_s``,
        was taken at that interval): a run's last window is covered only once its samples have arrived.
        With ``meters`` (a run's end), until each wall meter has read from then on too, or fails: its
        reading after the end closes its last interval. ``skip``: nodes not waited for (an agent not heard
        from at all, already said). Returns the nodes whose samples are still behind when the time is up
        (none: all caught up); a meter still behind is only warned of (its domain's coverage says it)."""

        def sampled(node: dict[str, Any]) -> bool:
            return node["node"] in skip or _caught_up(node, t_wall_ns, interval_s)

        def metered(node: dict[str, Any]) -> bool:
            return not meters or node["node"] in skip or _meter_read_since(node, t_wall_ns)

        slow = (
            [n for n in await self.nodes() if 1.5 * _meter_interval_s(n) + 1 > END_WAIT_S[0]]
            if meters
            else []
        )
        if slow:  # a meter polled every 40 s can hold a run's end that long: said, not a silent pause
            names = ", ".join(f"{n['node']}'s (every {_meter_interval_s(n):g} s)" for n in slow)
            log.info("waiting up to %.0f s for the wall meters' readings after the end: %s", timeout_s, names)
        nodes, ok = await self.wait_for_nodes(lambda n: sampled(n) and metered(n), timeout_s)
        behind = [] if ok else [str(n["node"]) for n in nodes if not sampled(n)]
        if behind:
            said = ", ".join(f"{n['node']} ({link_state(n)})" for n in nodes if n["node"] in behind)
            log.warning("not caught up after %.0f s: %s", timeout_s, said)
        if late := [] if ok else [n for n in nodes if not metered(n)]:
            said = ", ".join(f"{n['node']}'s {n['meter']['kind']} meter" for n in late)
            log.warning("no meter reading since the end after %.0f s: %s", timeout_s, said)
        return behind

    async def wait_for_hellos(self, timeout_s: float) -> list[dict[str, Any]]:
        """The nodes once every one has said hello (or as they are when the time is up)."""
        return (await self.wait_for_nodes(lambda n: bool(n.get("hardware")), timeout_s))[0]

    async def wait_for_connected(self, timeout_s: float) -> list[dict[str, Any]]:
        """The nodes once every one has said hello and is connected now (or as they are when the time is
        up): what a run about to open needs."""
        return (await self.wait_for_nodes(connected, timeout_s))[0]

    async def wait_for_clocks(self, timeout_s: float) -> list[dict[str, Any]]:
        """The nodes once every one has said hello, had its clock probed and its wall meter (if any) polled
        once, answered or not (or when the time is up)."""
        return (await self.wait_for_nodes(_preflight_ready, timeout_s))[0]

    async def wait_for_engine(self, timeout_s: float) -> dict[str, Any] | None:
        """The engine scraper once it has tried once, answered or not (or when the time is up)."""
        deadline = time.monotonic() + timeout_s
        while True:
            _, engine = await self.nodes_and_engine()
            if (
                engine is None
                or engine.get("scrapes")
                or engine.get("failures")
                or time.monotonic() > deadline
            ):
                return engine
            await asyncio.sleep(POLL_S)


def _preflight_ready(node: dict[str, Any]) -> bool:
    meter = node.get("meter")
    polled = not isinstance(meter, dict) or bool(meter.get("polls"))
    return bool(node.get("hardware") and node.get("clock")) and polled


def refused(node: dict[str, Any]) -> bool:
    """The node's agent refused the coordinator's token, or another sparkwatch service answers at its
    address (``/v1/nodes`` status ``unauthorized``, ``misaddressed``): a mistake in nodes.toml or the token
    file that the link's slow retries will not mend while a command waits."""
    return node.get("status") in REFUSED_STATUSES


def _caught_up(node: dict[str, Any], t_wall_ns: int, interval_s: float | None) -> bool:
    latest = node.get("latest") or {}
    offset = (node.get("clock") or {}).get("offset_ns") or 0
    stamp = latest.get("t_wall_ns")
    if not node["connected"] or stamp is None or stamp + offset < t_wall_ns:  # corrected to our clock
        return False
    return interval_s is None or (latest.get("interval_s") or 1e9) <= interval_s


def _meter_interval_s(node: dict[str, Any]) -> float:
    """The poll interval of the node's wall meter; 0 without one."""
    meter = node.get("meter")
    return float(meter.get("interval_s") or 0.0) if isinstance(meter, dict) else 0.0


def _meter_read_since(node: dict[str, Any], t_wall_ns: int) -> bool:
    """The node has no wall meter, its meter has read from ``t_wall_ns`` on (stamped on the coordinator's
    own clock), or its latest poll failed: waiting on a meter that does not answer closes nothing."""
    meter = node.get("meter")
    if not isinstance(meter, dict) or meter.get("error"):
        return True
    last = meter.get("last_t_ns")
    return isinstance(last, int) and last >= t_wall_ns


def link_state(node: dict[str, Any]) -> str:
    """A node's link as /v1/nodes says it: its status, and its error when it has one."""
    status, error = node.get("status") or "unknown", node.get("error")
    return f"{status}: {error}" if error else str(status)


def connected(node: dict[str, Any]) -> bool:
    """The node's agent has said hello and its link is up now: a standing coordinator keeps a node's last
    hello while its agent is away, which alone would pass a node that is down."""
    return bool(node.get("hardware")) and node.get("connected", True) is not False
