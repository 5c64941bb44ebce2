"""An aiohttp remote-write receiver on loopback that answers as scripted and decodes what it is sent, and a
writer for it with an injected backoff and sleep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from sparkwatch.coordinator.remote_write.proto import Messages
from sparkwatch.coordinator.remote_write.sender import RemoteWriter
from sparkwatch.coordinator.remote_write.spec import RemoteWriteSpec
from sparkwatch_agent.shared.backoff import ExponentialBackoff

MESSAGES = Messages()
HELLO = {"type": "hello", "node": "n1", "boot_id": "b1", "agent_version": "0.1.0", "backend": "sim"}


@dataclass
class Receiver:
    """Answers each POST with the next scripted reply (then ``after``, 204 unless set): an int status,
    ``(status, headers)``, ``"drop"`` (the connection closes with no answer) or ``"slow"`` (204 after 2 s)."""

    script: list[Any] = field(default_factory=list)
    after: Any = 204
    requests: list[tuple[dict[str, str], Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((dict(request.headers), MESSAGES.decode(body)))
        reply = self.script.pop(0) if self.script else self.after
        if reply == "slow":
            await asyncio.sleep(2.0)
            reply = 204
        if reply == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=204)
        status, headers = reply if isinstance(reply, tuple) else (reply, {})
        return web.Response(status=status, headers=headers, text="" if status < 300 else f"said {status}")

    def samples(self, index: int) -> dict[str, list[tuple[int, float]]]:
        """Request ``index``'s samples by metric name (node n1's only series of each)."""
        request = self.requests[index][1]
        out: dict[str, list[tuple[int, float]]] = {}
        for ts in request.timeseries:
            name = next(label.value for label in ts.labels if label.name == "__name__")
            out[name] = [(s.timestamp, s.value) for s in ts.samples]
        return out


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = Receiver()
    app = web.Application()
    app.router.add_post("/api/v1/write", rx.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    rx.url = f"http://127.0.0.1:{port}/api/v1/write"
    yield rx
    await runner.cleanup()


class Sleeps:
    """The writer's sleep: records each delay and yields without waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay_s: float) -> None:
        self.delays.append(delay_s)
        await asyncio.sleep(0)


def writer(url: str, sleeps: Sleeps | None = None, **kwargs: Any) -> RemoteWriter:
    backoff = ExponentialBackoff(initial_s=1.0, factor=2.0, maximum_s=8.0, jitter=0.5, rand=lambda: 0.5)
    options: dict[str, Any] = {"batch_wait_s": 0.0, "backoff": backoff, "sleep": sleeps or Sleeps()}
    return RemoteWriter(RemoteWriteSpec(url), **(options | kwargs))


async def until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)
