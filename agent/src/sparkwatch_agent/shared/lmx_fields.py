"""lmx ``hardware.json`` fields that a node and the cluster (`sparkwatch hardware`) both write."""

from __future__ import annotations

from sparkwatch_agent.shared.units import lmx_gb


def discrete_gpus(gpus: list[tuple[str, int | None]]) -> dict[str, object]:
    """lmx's DISCRETE_GPU fields for (name, memory bytes) per GPU, as its own nvidia-smi detector writes
    them (cmd/lmx/main.go ``applyNvidiaSMIHardware``): ``gpuCount``, ``gpus`` [{``name``, ``vramGb``}],
    ``gpuName`` and ``vramGb`` of the first GPU, ``totalVramGb`` from the summed bytes (rounded once)."""
    listed: list[dict[str, object]] = [
        {"name": name, **({"vramGb": lmx_gb(b)} if b else {})} for name, b in gpus
    ]
    out: dict[str, object] = {"hwClass": "DISCRETE_GPU", "gpuCount": len(gpus), "gpus": listed}
    if not listed:
        return out
    out["gpuName"] = listed[0]["name"]
    if "vramGb" in listed[0]:  # a size lmx could not read is left out, as it leaves it out
        out["vramGb"] = listed[0]["vramGb"]
    total = sum(b for _, b in gpus if b)
    if total > 0:
        out["totalVramGb"] = lmx_gb(total)
    return out
