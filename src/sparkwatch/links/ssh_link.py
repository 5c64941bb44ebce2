"""SSH links. "tunnel" (default): an asyncssh connection forwards a local loopback port to the agent's own
loopback port on the node and the WebSocket link runs through it — no port is opened on the node. "exec":
runs ``sparkwatch-agent stream --stdio`` on the node and reads its frames from stdout; clock probes and
interval leases travel as command lines on stdin. Host keys are checked against known_hosts; skipping that
takes the loudly named ``insecure_skip_host_key_check = true`` in nodes.toml.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

import asyncssh
import orjson

from sparkwatch.core.clock import ClockOffset, TimeProbe, estimate_offset
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.ws_link import LinkError, WsLink, parse_lines, well_formed
from sparkwatch.store.db import Frame

log = logging.getLogger(__name__)

EXEC_BATCH = 200
EXEC_FLUSH_S = 0.2
PROBE_TIMEOUT_S = 5.0


def connect_options(spec: NodeSpec) -> dict[str, Any]:
    """asyncssh.connect arguments for a node."""
    assert spec.ssh is not None
    user, _, host = spec.ssh.rpartition("@")
    options: dict[str, Any] = {"host": host, "port": spec.ssh_port}
    if user:
        options["username"] = user
    if spec.client_keys:
        options["client_keys"] = [str(k) for k in spec.client_keys]
    if spec.insecure_skip_host_key_check:
        log.warning("node %s: SSH HOST KEY CHECK DISABLED (insecure_skip_host_key_check = true)", spec.name)
        options["known_hosts"] = None
    elif spec.known_hosts is not None:
        options["known_hosts"] = str(spec.known_hosts)
    return options


class SshTunnelLink(WsLink):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state.transport = "ssh"

    async def _connected_session(self) -> None:
        try:
            async with asyncssh.connect(**connect_options(self.spec)) as conn:
                listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", self.spec.agent_port)
                try:
                    self._base = f"http://127.0.0.1:{listener.get_port()}"
                    await super()._connected_session()
                finally:
                    listener.close()
        except (asyncssh.Error, OSError) as exc:
            raise LinkError(f"ssh {self.spec.ssh}: {exc}") from exc


class SshExecLink(WsLink):
    """Each session starts a fresh agent on the node (a new boot): nothing to resume, nothing replayed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state.transport = "ssh-exec"
        self._process: asyncssh.SSHClientProcess[str] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    async def _connected_session(self) -> None:
        try:
            async with asyncssh.connect(**connect_options(self.spec)) as conn:
                # not `async with` for the process: its exit waits for the remote end to close the channel,
                # which an agent busy writing samples never does; closing the connection ends the session
                process = await conn.create_process(self.spec.exec_command)
                self._process = process
                reader = asyncio.create_task(self._read_frames(process))
                try:
                    await self.probe_clock()
                    await self._run_helpers(reader)
                finally:
                    reader.cancel()
                    await asyncio.gather(reader, return_exceptions=True)
                    self._process = None
                    process.close()
                    conn.abort()
        except (asyncssh.Error, OSError) as exc:
            raise LinkError(f"ssh {self.spec.ssh}: {exc}") from exc

    async def _send(self, command: dict[str, Any]) -> None:
        if self._process is None:
            raise LinkError("no agent process")
        self._process.stdin.write(orjson.dumps(command).decode() + "\n")
        await self._process.stdin.drain()

    async def _read_frames(self, process: asyncssh.SSHClientProcess[str]) -> None:
        boot: str | None = None
        frames: list[Frame] = []
        flush_at = 0.0
        try:
            while True:
                try:
                    line = await asyncio.wait_for(process.stdout.readline(), timeout=EXEC_FLUSH_S)
                except TimeoutError:
                    line = None
                if line == "":
                    raise LinkError(f"agent process ended: {process.exit_status}")
                for raw, data in parse_lines(line or "", self.spec.name):
                    kind = data.get("type")
                    if kind == "time":
                        future = self._pending.pop(int(data.get("id") or 0), None)
                        if future is not None and not future.done():
                            future.set_result(data)
                    elif kind == "hello":
                        if frames and boot is not None:
                            self._ingest(boot, frames)
                            frames = []
                        boot = str(data["boot_id"])
                        self._on_hello(data)
                        self.state.connected = True
                        self.state.error = None
                        self._backoff.reset()
                    elif kind in ("sample", "gap") and well_formed(data):
                        if not frames:
                            flush_at = time.monotonic() + EXEC_FLUSH_S
                        frames.append(Frame(raw, data))
                if (
                    frames
                    and boot is not None
                    and (len(frames) >= EXEC_BATCH or time.monotonic() >= flush_at)
                ):
                    self._ingest(boot, frames)
                    frames = []
        finally:
            if frames and boot is not None:  # each exec session is a new boot: what we hold is not replayable
                self._ingest(boot, frames)

    async def probe_clock(self) -> tuple[ClockOffset, str]:
        probes: list[TimeProbe] = []
        boot = ""
        loop = asyncio.get_running_loop()
        for _ in range(self._probes):
            probe_id = next(self._ids)
            future: asyncio.Future[dict[str, Any]] = loop.create_future()
            self._pending[probe_id] = future
            t_send = self._now()
            try:
                await self._send({"type": "time", "id": probe_id})
                reply = await asyncio.wait_for(future, PROBE_TIMEOUT_S)
            except TimeoutError:
                raise LinkError("clock probe over stdio timed out") from None
            finally:
                self._pending.pop(probe_id, None)
            probes.append(TimeProbe(t_send, int(reply["t_wall_ns"]), self._now()))
            boot = str(reply["boot_id"])
        offset = estimate_offset(probes)
        self._store.add_offset(self.spec.name, boot, offset)
        self.state.offset = offset
        return offset, boot

    async def _put_lease(self, interval_s: float) -> None:
        await self._send({"type": "interval", "holder": self._holder, "interval_s": interval_s, "ttl_s": 600})

    async def _release_lease(self) -> None:
        await self._send({"type": "release", "holder": self._holder})
