"""The SSH link (default "tunnel" mode): an asyncssh connection forwards a local loopback port to the
agent's own loopback port on the node, and the WebSocket link runs through it — no port is opened on the
node. Host keys are checked against known_hosts; skipping that takes the loudly named
``insecure_skip_host_key_check = true`` in nodes.toml.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncssh

from sparkwatch.links.ws_link import LinkError, WsLink

log = logging.getLogger(__name__)


class SshTunnelLink(WsLink):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state.transport = "ssh"
        if self.spec.mode != "tunnel":
            raise LinkError(f"node {self.spec.name}: ssh mode {self.spec.mode!r} is not implemented yet")

    def _connect_options(self) -> dict[str, Any]:
        spec = self.spec
        assert spec.ssh is not None
        user, _, host = spec.ssh.rpartition("@")
        options: dict[str, Any] = {"host": host, "port": spec.ssh_port}
        if user:
            options["username"] = user
        if spec.client_keys:
            options["client_keys"] = [str(k) for k in spec.client_keys]
        if spec.insecure_skip_host_key_check:
            log.warning(
                "node %s: SSH HOST KEY CHECK DISABLED (insecure_skip_host_key_check = true)", spec.name
            )
            options["known_hosts"] = None
        elif spec.known_hosts is not None:
            options["known_hosts"] = str(spec.known_hosts)
        return options

    async def _connected_session(self) -> None:
        try:
            async with asyncssh.connect(**self._connect_options()) as conn:
                listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", self.spec.agent_port)
                try:
                    self._base = f"http://127.0.0.1:{listener.get_port()}"
                    await super()._connected_session()
                finally:
                    listener.close()
        except (asyncssh.Error, OSError) as exc:
            raise LinkError(f"ssh {self.spec.ssh}: {exc}") from exc


def make_link(spec: Any, *args: Any, **kwargs: Any) -> WsLink:
    """The link for a node: SSH when nodes.toml says ``ssh = …``, else WebSocket."""
    return SshTunnelLink(spec, *args, **kwargs) if spec.ssh is not None else WsLink(spec, *args, **kwargs)
