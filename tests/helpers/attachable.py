"""An export file for attach's tests: the synthetic run's whole export (valid against the schema, as every
export file attach reads must be) with the figures attach reads set by the test."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Sequence
from typing import Any

from helpers.synthetic_run import synthetic_export
from sparkwatch.core.export import digest

GIB = 2**30
#: The start of an export's lmx notes as core.export writes them (attach finds its own paragraph by it).
NOTE = f"Measured by sparkwatch 0.1.0 (run bench, export sha256 {'5' * 64}). GPU power: NVML GPU-rail power."


@functools.cache
def _measured(nodes: int) -> dict[str, Any]:
    return synthetic_export(hours=0.02, nodes=nodes, windows=4, seed=1)


def attachable_export(
    watts: Sequence[float | None],
    verdicts: Sequence[str] = ("ok", "ok"),
    peak_bytes: int | None = 68 * GIB,
    peak_gb: float | None = 68.0,
) -> dict[str, Any]:
    """One one-GPU node per ``watts`` (``spark-N``, ``GPU-i``; None: not measured, with its reason), one
    window ``wI`` per verdict (not ``ok``: the reason ``coverage 0.5``), the peak memory, and the lmx part
    those give, its notes quoting the export's digest (``sealed``: again after a test edits it)."""
    out = copy.deepcopy(_measured(len(watts)))
    for i, (node, w) in enumerate(zip(out["nodes"], watts, strict=True)):
        node["node"] = f"spark-{i + 1}"
        node["gpus"][0].update(uuid=f"GPU-{i}", power_w_gated_mean=w)
        node["null_reasons"] = {"power_w.gated_mean": "no interval with util >= 0.5"} if w is None else {}
    out["windows"] = out["windows"][: len(verdicts)]
    for i, (window, v) in enumerate(zip(out["windows"], verdicts, strict=True)):
        window.update(id=f"w{i}", in_scope=True, verdict=v, reasons=[] if v == "ok" else ["coverage 0.5"])
    out["totals"]["memory_used_bytes_peak_sum"] = peak_bytes
    out["lmx"] = {"gpuPowerWatts": list(watts), "peakVramGb": peak_gb, "notes": NOTE}
    return sealed(out)


def sealed(export: dict[str, Any]) -> dict[str, Any]:
    """``export`` with its lmx notes quoting its digest, as core.export writes them (attach refuses an export
    whose notes quote another: edited since it was made); for a test that set its figures by hand."""
    quoted = digest(export)
    export["lmx"]["notes"] = re.sub(
        r"export sha256 [0-9a-f]{64}", f"export sha256 {quoted}", export["lmx"]["notes"]
    )
    return export
