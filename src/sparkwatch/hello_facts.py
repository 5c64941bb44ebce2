"""What an agent's hello says of its GPUs: the ones it probed, and the fields some GPU does not measure
(read by the export and by ``nodes check``; the hello's parts were type-checked by the wire)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
