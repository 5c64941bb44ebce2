"""The link a node's entry in nodes.toml asks for."""

from __future__ import annotations

from typing import Any

from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.ssh_link import SshExecLink, SshTunnelLink
from sparkwatch.links.ws_link import WsLink


def make_link(spec: NodeSpec, *args: Any, **kwargs: Any) -> WsLink:
    """WebSocket (``url``), SSH tunnel (``ssh``) or SSH exec (``ssh`` with ``mode = "exec"``)."""
    if spec.ssh is None:
        return WsLink(spec, *args, **kwargs)
    return SshExecLink(spec, *args, **kwargs) if spec.mode == "exec" else SshTunnelLink(spec, *args, **kwargs)
