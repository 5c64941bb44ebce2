"""What an agent's hello says of its GPUs: the ones it probed, and the fields some GPU does not measure
(read by the export and by ``nodes check``; the hello's parts were type-checked by the wire, and a stored
one again as it is read back: ``hello_problem``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sparkwatch.wire import FrameError, decode_frame
from sparkwatch_agent.shared.protocol import FRAME_HELLO


def hello_problem(hello: dict[str, Any]) -> str | None:
    """Why a hello read back from the store is not one the wire takes, from "hello", or None. Its readers
    trust the wire's checks, and a file edited outside sparkwatch may hold anything."""
    try:
        decode_frame("", {**hello, "type": FRAME_HELLO})
    except FrameError as exc:
        said = str(exc)
        return said if said.startswith("hello ") else f"hello {said}"
    return None


def announced_gpus(hello: Mapping[str, Any] | None) -> list[str]:
    """UUIDs of the GPUs the agent probed, in its order."""
    return [str(g["uuid"]) for g in _capability_gpus((hello or {}).get("capabilities")) if "uuid" in g]


def capability_gaps(capabilities: Any) -> dict[str, dict[str, str]]:
    """field → {GPU index → reason} for every field some GPU does not measure (unsupported or untrusted)."""
    gaps: dict[str, dict[str, str]] = {}
    for gpu in _capability_gpus(capabilities):
        fields = gpu.get("fields")
        for name, status in fields.items() if isinstance(fields, dict) else ():
            if isinstance(status, dict) and not status.get("supported", False):
                reason = str(status.get("reason", status.get("state", "unsupported")))
                gaps.setdefault(str(name), {})[str(gpu.get("index"))] = reason
    return gaps


def unsupported_fields(hello: Mapping[str, Any] | None) -> dict[str, str]:
    """field → the reason it is not measured (the last GPU's that lacks it)."""
    gaps = capability_gaps((hello or {}).get("capabilities"))
    return {name: next(reversed(by_gpu.values())) for name, by_gpu in gaps.items()}


def _capability_gpus(capabilities: Any) -> list[dict[str, Any]]:
    gpus = capabilities.get("gpus") if isinstance(capabilities, dict) else None
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


class SharedIdentity(NamedTuple):
    """Two ``nodes.toml`` entries that reach one agent or measure one GPU."""

    first: str
    second: str
    what: str  # "agent boot id" | "GPU"
    value: str

    def __str__(self) -> str:
        return f"nodes {self.first} and {self.second} share {self.what} {self.value}: one agent listed twice?"


def shared_identities(nodes: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[SharedIdentity]:
    """Every pair of entries that reach the same agent (same agent boot id) or measure the same GPU (same
    UUID): their figures would be summed twice. ``nodes`` pairs each entry's name with its agent's hello
    (None before one arrived)."""
    seen: dict[tuple[str, str], str] = {}
    found: dict[tuple[str, str], SharedIdentity] = {}
    for name, hello in nodes:
        keys = [("agent boot id", str(hello["boot_id"]))] if hello and hello.get("boot_id") else []
        keys += [("GPU", uuid) for uuid in dict.fromkeys(announced_gpus(hello))]
        for what, value in keys:
            first = seen.setdefault((what, value), name)
            if first != name:  # one finding per pair of entries is enough
                found.setdefault((first, name), SharedIdentity(first, name, what, value))
    return list(found.values())


def listed_hello(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parts of a node's hello that /v1/nodes shows, as ``shared_identities`` reads a hello (None before
    the agent said hello)."""
    if node.get("hardware") is None:
        return None
    return {
        "boot_id": node.get("boot_id"),
        "node": node.get("agent_node"),
        "capabilities": node.get("capabilities"),
    }


def agent_name(name: str, hello: Mapping[str, Any] | None) -> str:
    """The name the agent calls itself (the ``node`` label of its series), else ``name`` (its nodes.toml
    entry's)."""
    named = (hello or {}).get("node")
    return named if isinstance(named, str) and named else name


def misnamed(name: str, hello: Mapping[str, Any] | None) -> str | None:
    """A warning when the agent calls itself by another name than its ``nodes.toml`` entry (a swapped URL)."""
    agent_name = (hello or {}).get("node")
    if agent_name is None or str(agent_name) == name:
        return None
    said = f"its agent calls itself {str(agent_name)!r}"
    return f"node {name}: {said} (does nodes.toml point at another node?)"
