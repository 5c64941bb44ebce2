"""Real aiohttp servers for tests, run on a thread of their own."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class AppThread(threading.Thread):
    """An aiohttp app on a loopback port, on its own event loop in a thread, until stopped: a server that
    a separate process (a coordinator, a proxy) can reach while the test goes on synchronously."""

    def __init__(self, app: web.Application, port: int) -> None:
        super().__init__(daemon=True)
        self.app, self.port = app, port
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    def run(self) -> None:
        runner = web.AppRunner(self.app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.join(5)
