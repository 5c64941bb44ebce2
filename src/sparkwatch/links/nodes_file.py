"""`nodes.toml`: which agents the coordinator dials, in the order used everywhere (exports, tables, lmx)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from sparkwatch.meters.spec import MeterSpec, MeterSpecError, parse_meter


class NodesFileError(Exception):
    """A malformed nodes file; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    url: str | None = None  # ws://host:port (the agent's HTTP base)
    token_file: Path | None = None
    ssh: str | None = None  # user@host
    ssh_port: int = 22
    known_hosts: Path | None = None
    client_keys: tuple[Path, ...] = ()
    mode: Literal["tunnel", "exec"] = "tunnel"
    agent_port: int = 9464  # the agent's loopback port on the node (ssh tunnel mode)
    insecure_skip_host_key_check: bool = False
    exec_command: str = "sparkwatch-agent stream --stdio"  # ssh exec mode: what runs on the node
    meter: MeterSpec | None = None  # a wall/BMC/PDU meter the coordinator polls for this node

    @property
    def http_base(self) -> str:
        """http:// form of ``url`` for /v1/time and /v1/interval (SSH links find theirs when connected)."""
        if self.url is None:
            return ""
        parsed = urlparse(self.url)
        scheme = {"ws": "http", "wss": "https"}.get(parsed.scheme, parsed.scheme)
        return parsed._replace(scheme=scheme).geturl().rstrip("/")


_KEYS = {
    "url",
    "token_file",
    "ssh",
    "port",
    "known_hosts",
    "client_keys",
    "mode",
    "agent_port",
    "insecure_skip_host_key_check",
    "exec_command",
    "meter",
}


def parse_nodes(text: str, origin: str = "nodes.toml") -> list[NodeSpec]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NodesFileError(f"{origin}: not valid TOML: {exc}") from None
    nodes = data.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise NodesFileError(f"{origin}: needs at least one [nodes.NAME] table")
    specs = []
    for name, table in nodes.items():
        specs.append(_node(origin, name, table))
    return specs


def _node(origin: str, name: str, table: Any) -> NodeSpec:
    where = f"{origin}: [nodes.{name}]"
    if not isinstance(table, dict):
        raise NodesFileError(f"{where} must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise NodesFileError(f"{where}: unknown keys {', '.join(unknown)}")
    url, ssh = table.get("url"), table.get("ssh")
    if (url is None) == (ssh is None):
        raise NodesFileError(f'{where}: give exactly one of url = "ws://host:9464" or ssh = "user@host"')
    if url is not None:
        parsed = urlparse(str(url))
        if parsed.scheme not in ("ws", "wss", "http", "https") or not parsed.hostname:
            raise NodesFileError(f"{where}: url must look like ws://host:9464, got {url!r}")
    mode = table.get("mode", "tunnel")
    if mode not in ("tunnel", "exec"):
        raise NodesFileError(f'{where}: mode must be "tunnel" or "exec", got {mode!r}')
    try:
        meter = parse_meter(table["meter"]) if "meter" in table else None
    except MeterSpecError as exc:
        raise NodesFileError(f"{where}: {exc}") from None
    keys = table.get("client_keys", [])
    if isinstance(keys, str):
        keys = [keys]
    try:
        return NodeSpec(
            name=name,
            url=str(url) if url is not None else None,
            token_file=Path(table["token_file"]) if "token_file" in table else None,
            ssh=str(ssh) if ssh is not None else None,
            ssh_port=int(table.get("port", 22)),
            known_hosts=Path(table["known_hosts"]) if "known_hosts" in table else None,
            client_keys=tuple(Path(k) for k in keys),
            mode=mode,
            agent_port=int(table.get("agent_port", 9464)),
            insecure_skip_host_key_check=bool(table.get("insecure_skip_host_key_check", False)),
            exec_command=str(table.get("exec_command", "sparkwatch-agent stream --stdio")),
            meter=meter,
        )
    except (TypeError, ValueError) as exc:
        raise NodesFileError(f"{where}: {exc}") from None


def load_nodes(path: Path) -> list[NodeSpec]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise NodesFileError(f"cannot read nodes file {path}: {exc.strerror}") from None
    return parse_nodes(text, str(path))
