"""The link a node's entry in nodes.toml asks for, and the name its interval leases go by."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path
from typing import Any

from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.ws_link import WsLink


def make_link(spec: NodeSpec, *args: Any, **kwargs: Any) -> WsLink:
    """WebSocket (``url``), SSH tunnel (``ssh``) or SSH exec (``ssh`` with ``mode = "exec"``)."""
    if spec.ssh is None:
        return WsLink(spec, *args, **kwargs)
    # asyncssh only where a node is reached by SSH: importing it was a fifth of every `run`'s start-up
    from sparkwatch.links.ssh_link import SshExecLink, SshTunnelLink  # noqa: PLC0415

    return SshExecLink(spec, *args, **kwargs) if spec.mode == "exec" else SshTunnelLink(spec, *args, **kwargs)


def lease_holder(db: Path) -> str:
    """The name this coordinator's interval leases go by: its host and database, not its process, so a
    restarted coordinator renews (and at a run's end releases) the lease its last life took, which a new
    name each start left on every agent for its whole ttl (sampling at 10 Hz up to 10 min after a run)."""
    identity = f"{socket.gethostname()}:{Path(db).resolve()}".encode()
    return f"sparkwatch-coordinator-{hashlib.sha256(identity).hexdigest()[:8]}"
