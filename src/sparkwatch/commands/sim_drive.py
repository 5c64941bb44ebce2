"""`sparkwatch sim-model --agents URL,…`: the simulated model keeps simulated agents' GPUs as busy as a
tensor-parallel model keeps its ranks while it generates, over each agent's ``POST /v1/sim/load``.

Without it, the simulated model run beside a standing coordinator streams text while every simulated GPU
stays idle, and every gated figure is null. The demo drives its in-process agents the same way
(:func:`node_util`). Each change of load is sent to every agent at once; when loads change faster than
the agents answer, only the newest is sent. An agent that is not there or not a sim agent is refused at
start (one line); one that stops answering later is logged once, not every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from sparkwatch.http_reasons import refusal_reason, unreachable_reason
from sparkwatch_agent.shared.auth import ServerToken, TokenFile, bearer_headers
from sparkwatch_agent.shared.http import AGENT_SERVER, other_service
from sparkwatch_agent.shared.units import GIB

log = logging.getLogger(__name__)

COLD_UTIL = 1.0  # the first request also captures graphs: every GPU flat out
MODEL_BYTES_PER_NODE = 28 * GIB  # a ~110 GB model split four ways
TIMEOUT_S = 5.0


def warm_util(node_index: int) -> float:
    """Tensor-parallel ranks are not equally busy; the sim gives each node its own steady utilisation
    (0.90, 0.86, … 0.62, then round again: always above the 0.5 gate)."""
    return round(0.90 - 0.04 * (node_index % 8), 2)


def node_util(level: str, node_index: int) -> float:
    """The utilisation of the ``node_index``-th node while the model is ``level`` (cold, warm, idle)."""
    return {"cold": COLD_UTIL, "warm": warm_util(node_index)}.get(level, 0.0)


class SimDriveError(Exception):
    """An agent to drive cannot be driven (not reachable, not the sim backend, a refused token)."""


@dataclass(frozen=True, slots=True)
class DrivenAgents:
    """The agents' base URLs (``http://host:port``, in tensor-parallel rank order) and their token file."""

    urls: tuple[str, ...]
    token_file: Path | None = None


class SimDriver:
    """Sends the model's load to every agent; :meth:`on_load` is :class:`SimModel`'s callback. Each agent
    has its own sender, so one slow to answer delays no other's GPU."""

    def __init__(
        self, session: aiohttp.ClientSession, urls: Sequence[str], token: ServerToken | None = None
    ) -> None:
        self._session = session
        self._urls = tuple(urls)
        self._token = token
        self._wanted = [asyncio.Event() for _ in self._urls]
        self._level = "idle"

    def on_load(self, level: str) -> None:
        """The model is now ``level`` (cold, warm, idle): every agent's sender sends it, or a newer one."""
        self._level = level
        for wanted in self._wanted:
            wanted.set()

    async def load_model(self) -> None:
        """Every agent idle with the model's share of the weights resident (as a server that has loaded
        them), or :class:`SimDriveError` naming the first that cannot be driven."""
        for i, url in enumerate(self._urls):
            said = await self._send(i, url, "idle", MODEL_BYTES_PER_NODE)
            if said is not None:
                raise SimDriveError(f"cannot drive the simulated GPU at {url}: {said}")

    async def unload_model(self) -> None:
        """Every agent idle with no weights resident, as far as they answer (the model server stops)."""
        await asyncio.gather(*(self._send(i, url, "idle", 0) for i, url in enumerate(self._urls)))

    async def run(self) -> None:
        """Until cancelled: each agent's sender, each sending the newest level whenever it changes."""
        await asyncio.gather(*(self._sender(i) for i in range(len(self._urls))))

    async def _sender(self, index: int) -> None:
        """The newest level to one agent each time it changes, the weights with it (an agent restarted
        meanwhile has them again); a failure is logged once, and once more when the agent answers again."""
        url, wanted, failing = self._urls[index], self._wanted[index], False
        while True:
            await wanted.wait()
            wanted.clear()
            why = await self._send(index, url, self._level, MODEL_BYTES_PER_NODE)
            if why is None and failing:
                log.info("driving the simulated GPU at %s again", url)
            elif why is not None and not failing:
                log.warning("cannot drive the simulated GPU at %s: %s", url, why)
            failing = why is not None

    async def _send(self, index: int, url: str, level: str, model_bytes: int) -> str | None:
        """None when the agent took the load and ``model_bytes`` resident, else why not, in a few words."""
        body = {"util_ratio": node_util(level, index), "model_bytes": model_bytes}
        try:
            auth = bearer_headers(self._token)
            async with self._session.post(f"{url}/v1/sim/load", json=body, headers=auth) as r:
                if r.status == 200:
                    return None
                service = other_service(r.headers, AGENT_SERVER)
                if service is not None:
                    return f"it is a {service}, not an agent"
                said = f"HTTP {r.status}: {refusal_reason(await r.text(errors='replace'))}"
                if r.status == 401:  # the agent's reason names its own flag, --token-file
                    said += (
                        " (the token in --agent-token-file is not the agent's)"
                        if self._token is not None
                        else " (give the agents' token with --agent-token-file)"
                    )
                return said
        except aiohttp.ClientError as exc:
            return unreachable_reason(exc)
        except TimeoutError:
            return f"no answer in {TIMEOUT_S:g} s"


@contextlib.asynccontextmanager
async def driving(agents: DrivenAgents | None) -> AsyncIterator[SimDriver | None]:
    """A :class:`SimDriver` running until the block ends, the model loaded on every agent (None: no agents
    to drive); the agents are left idle, the model unloaded (also when one could not be driven at start)."""
    if agents is None or not agents.urls:
        yield None
        return
    # rotated: read again
    token = TokenFile(agents.token_file, logger=log) if agents.token_file is not None else None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
        driver = SimDriver(session, agents.urls, token)
        task: asyncio.Task[None] | None = None
        try:
            await driver.load_model()
            task = asyncio.create_task(driver.run())
            yield driver
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await driver.unload_model()
