"""JSON Schema of the export's optional ``series`` block (core/series.py): what the run report plots."""

from __future__ import annotations

from typing import Any

from sparkwatch.core.series import METHOD, UNITS

_SECONDS = {"type": "number", "description": "seconds since t0_ns (to the ms)"}
_SPAN = {"type": "array", "items": _SECONDS, "minItems": 2, "maxItems": 2}

_LINE = {
    "type": "object",
    "required": ["key", "kind", "unit", "label", "samples", "t_s", "v"],
    "properties": {
        "key": {"type": "string", "description": "unique within the node: <kind>/<GPU index or domain>"},
        "kind": {"enum": list(UNITS)},
        "unit": {"enum": sorted(set(UNITS.values()))},
        "label": {
            "type": "string",
            "description": "what a legend calls the line (GPU 0 (NVML), sys_total (hwmon:spbm), …)",
        },
        "gpu_uuid": {"type": ["string", "null"]},
        "domain": {"type": "string", "description": "system_power_w: the power domain"},
        "domain_kind": {"enum": ["system", "module", "cpu", "gpu", "other"]},
        "source": {"type": "string", "description": "system_power_w: hwmon:<chip>, meter:<kind>, …"},
        "samples": {
            "type": "integer",
            "minimum": 0,
            "description": "raw samples of the line's source inside the run, before decimation",
        },
        "t_s": {"type": "array", "items": _SECONDS},
        "v": {
            "type": "array",
            "items": {"type": ["number", "null"]},
            "description": "aligned with t_s; null is a break (a gap): never joined across. Power lines hold"
            " the measured interval power at each interval's middle; the others the raw samples",
        },
    },
}

_THROTTLE = {
    "type": "object",
    "required": ["t_s", "gpu_uuid", "reasons"],
    "properties": {
        "t_s": {
            **_SPAN,
            "description": "from the first sample that shows it to the next sample that does not (the last"
            " that does when a gap follows)",
        },
        "gpu_uuid": {"type": ["string", "null"]},
        "reasons": {
            "type": "array",
            "items": {"type": "string"},
            "description": "the slowdown clock event reasons seen (hw_slowdown, sw_thermal, hw_thermal,"
            " hw_power_brake), and sm_clock when the SM clock was under 0.6 of its maximum",
        },
    },
}

SERIES: dict[str, Any] = {
    "type": "object",
    "description": "Optional (`sparkwatch export --series`, `GET …/export?series=true`): each node's"
    " decimated time series for plotting, on one time axis from t0_ns. Not part of the export's digest.",
    "required": ["method", "about", "t0_ns", "t_end_ns", "bucket_s", "buckets", "nodes"],
    "properties": {
        "method": {"const": METHOD},
        "about": {"type": "string", "description": "the decimation in one sentence, to state on a plot"},
        "t0_ns": {
            "type": "integer",
            "description": "the plots' start, every t_s counts from here: the run's start, or its first"
            " window's when that started earlier",
        },
        "t_end_ns": {"type": "integer", "description": "the run's end, or its last window's when later"},
        "bucket_s": {"type": "number", "exclusiveMinimum": 0, "description": "the resolution: one bucket"},
        "buckets": {"type": "integer", "minimum": 1},
        "nodes": {
            "type": "array",
            "description": "in the order of the export's nodes",
            "items": {
                "type": "object",
                "required": ["node", "lines", "gated_out", "gated_out_joined_s", "throttle"],
                "properties": {
                    "node": {"type": "string"},
                    "lines": {"type": "array", "items": _LINE},
                    "gated_out": {
                        "type": "array",
                        "items": _SPAN,
                        "description": "[a_s, b_s] pieces of the scope (within the run) where the gate"
                        " dropped a valid interval of any of the node's GPUs",
                    },
                    "gated_out_joined_s": {
                        "type": "number",
                        "minimum": 0,
                        "description": "0: gated_out is exact; else it had more than 8 pieces per bucket and"
                        " the pieces separated by gaps up to this long were joined, so it stays small",
                    },
                    "throttle": {"type": "array", "items": _THROTTLE},
                },
            },
        },
    },
}
