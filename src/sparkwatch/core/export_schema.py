"""JSON Schema of the `sparkwatch.run/1` export (printed by `sparkwatch schema`)."""

from __future__ import annotations

from typing import Any

from sparkwatch.core import windows
from sparkwatch.core.export import LMX_NOTES_MAX_CHARS
from sparkwatch.core.failures import FAILURES_SCHEMA
from sparkwatch.core.series_schema import SERIES
from sparkwatch.defaults import EXPORT_SCHEMA, PHASE_RE


def _nullable(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


_NUM = _nullable("number")
_INT = _nullable("integer")
_COUNT, _AMOUNT = _nullable("integer", minimum=0), _nullable("number", minimum=0)  # never below 0
_REASONS = {"type": "object", "additionalProperties": {"type": "string"}}
#: A Unix epoch ns stamp as every window and run holds one (core.windows.epoch_ns_problem: 2000 to 2100).
_EPOCH = {"minimum": windows.EPOCH_NS_MIN, "maximum": windows.EPOCH_NS_MAX - 1}
_STAMP, _NULLABLE_STAMP = {"type": "integer", **_EPOCH}, _nullable("integer", **_EPOCH)


def _at_time(*integers: str) -> dict[str, Any]:
    """An event at coordinator time ``t_ns`` with integer fields (a clock step, a probe disagreement)."""
    fields = ("t_ns", *integers)
    integer = {f: {"type": "integer"} for f in fields}
    return {"type": "object", "required": list(fields), "properties": integer}


_POWER_W = {
    "type": "object",
    "required": ["gated_mean", "mean", "max"],
    "properties": {"gated_mean": _NUM, "mean": _NUM, "max": _NUM},
    "additionalProperties": False,
}
_SAMPLES = {
    "type": "object",
    "required": ["count", "coverage_ratio", "max_gap_s"],
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "coverage_ratio": _nullable("number", minimum=0, maximum=1.0001),
        "max_gap_s": _NUM,
        "implausible_intervals": {"type": "integer", "minimum": 0},
        # optional: the median spacing of the samples seen (a TSDB's scrape interval); exports before lack it
        "interval_s": _NUM,
    },
}
#: Idle power over the baseline period before the first window, and energy above it (optional: additive).
_IDLE = {"idle_power_w": _NUM, "energy_above_idle_j": _NUM}
#: GPU energy from a window's start to its first token, and from its first to its last token (optional).
_SPLIT = {"prefill_energy_j": _NUM, "decode_energy_j": _NUM}
_STATS = ("baseline", "peak", "mean")  # a memory figure: the baseline before the run, its peak and mean in it
_MEMORY = {"type": "object", "required": list(_STATS), "properties": dict.fromkeys(_STATS, _INT)}
_KINDS = {"enum": ["system", "module", "cpu", "gpu", "other"]}
_METHODS = {"enum": ["counter", "trapezoid", "mixed", "none"]}

#: A node's power domains beside its GPU rail: optional (an additive change, so the schema id stays).
_SYSTEM = {
    "type": ["object", "null"],
    "required": ["headline_domain", "domains"],
    "properties": {
        "headline_domain": _nullable("string"),
        "domains": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["domain", "kind", "source", "power_w", "energy_j", "energy_method", "samples"],
                "properties": {
                    "domain": {"type": "string"},
                    "kind": _KINDS,
                    "source": {"type": "string"},
                    "power_w": _POWER_W,
                    "energy_j": _NUM,
                    **_IDLE,
                    "energy_method": _METHODS,
                    "gated_s": {"type": "number", "minimum": 0},
                    **FAILURES_SCHEMA,
                    "samples": _SAMPLES,
                },
            },
        },
    },
}

_WINDOW_SYSTEM = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "required": ["domain", "power_w_gated_mean", "energy_j", "coverage_ratio"],
        "properties": {
            "domain": {"type": "string"},
            "power_w_gated_mean": _NUM,
            "energy_j": _NUM,
            "coverage_ratio": _NUM,
        },
    },
}

_NODE_REQUIRED = [
    "node", "hardware", "memory_model", "clock", "unsupported", "power_w", "energy_j", "energy_method",
    "gated_s", "excluded_s", "memory_used_bytes", "samples", "gpus", "null_reasons",
]  # fmt: skip
_NODE = {
    "type": "object",
    "required": _NODE_REQUIRED,
    "properties": {
        "node": {"type": "string"},
        "hardware": {"type": "object"},
        "memory_model": {"enum": ["unified", "discrete", "none", "unknown"]},
        "clock": {
            "type": "object",
            "required": ["offset_ns", "uncertainty_ns"],
            "properties": {
                "offset_ns": _INT,
                "uncertainty_ns": _INT,
                "probes_used": {"type": "integer", "minimum": 0},
                "probes_total": {"type": "integer", "minimum": 0},
                "method": {"enum": ["monotonic", "wall", "mixed", "none", "tsdb"]},
                "rate_ppm": _NUM,
                "steps": {"type": "array", "items": _at_time("size_ns")},
                "disagreements": {"type": "array", "items": _at_time("residual_ns", "allowed_ns")},
            },
        },
        "unsupported": _REASONS,
        "power_w": _POWER_W,
        "energy_j": _NUM,
        **_IDLE,
        **_SPLIT,
        "energy_method": _METHODS,
        "gated_s": {"type": "number", "minimum": 0},
        "excluded_s": {"type": "number", "minimum": 0},
        "system": _SYSTEM,
        "memory_used_bytes": _MEMORY,
        "memory_page_cache_bytes": _MEMORY,
        "samples": _SAMPLES,
        "gpus": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["uuid", "power_w_gated_mean"],
                "properties": {
                    "uuid": {"type": "string"},
                    "power_w_gated_mean": _NUM,
                    "energy_j": _NUM,
                    "gated_s": {"type": "number", "minimum": 0},
                    "excluded_s": {"type": "number", "minimum": 0},
                    **_IDLE,
                },
            },
        },
        "null_reasons": _REASONS,
    },
}

_MEAN_MAX = {
    "type": "object",
    "required": ["mean", "max"],
    "properties": {"mean": _AMOUNT, "max": _AMOUNT},
    "additionalProperties": False,
}
#: What the serving engine's /metrics said over a span (core/engine.py): optional, null without a scrape.
_ENGINE_FIGURES = {
    "family": {"enum": ["vllm", "sglang", None]},
    "scrapes": {"type": "integer", "minimum": 0},
    "running_requests": _MEAN_MAX,
    "waiting_requests": _MEAN_MAX,
    "kv_cache_usage_ratio_max": _AMOUNT,
    "prefix_cache_hit_ratio": _AMOUNT,
    "prompt_tokens": _AMOUNT,
    "generation_tokens": _AMOUNT,
    "prompt_tokens_per_s": _AMOUNT,
    "generation_tokens_per_s": _AMOUNT,
    "preemptions": _AMOUNT,
    "spec_decode_acceptance_ratio": _AMOUNT,
    "spec_decode_mean_acceptance_length": _AMOUNT,
    "sources": _REASONS,
    "null_reasons": _REASONS,
}
_ENGINE_WINDOW = {
    "type": ["object", "null"],
    "required": list(_ENGINE_FIGURES),
    "properties": _ENGINE_FIGURES,
}
_ENGINE = {
    "type": ["object", "null"],
    "required": [*_ENGINE_FIGURES, "errors"],
    "properties": {
        **_ENGINE_FIGURES,
        **FAILURES_SCHEMA,
        "unknown_series": {"type": "array", "items": {"type": "string"}},
        "reason": {"type": "string"},
        "token_cross_check": {
            "type": "object",
            "required": [
                "engine_generation_tokens",
                "engine_generation_tokens_range",
                "window_completion_tokens",
                "difference_ratio",
                "agrees",
            ],
            "properties": {
                "engine_generation_tokens": _NUM,
                "engine_generation_tokens_range": {
                    "description": "[low, high]: the counter between the scrapes inside the scope, and"
                    " between those around it; the windows' count is judged against this range",
                    "type": ["array", "null"],
                    "items": {"type": "number"},
                    "minItems": 2,
                    "maxItems": 2,
                },
                "window_completion_tokens": _INT,
                "difference_ratio": _NUM,
                "agrees": _nullable("boolean"),
            },
        },
    },
}

#: Each of the window's own fields (core.windows), as the export shows it.
_WINDOW_FIELDS: dict[str, Any] = {
    "id": {"type": "string"},
    "phase": {"type": "string", "pattern": PHASE_RE.pattern},
    "t_start_ns": _STAMP,
    "t_end_ns": _STAMP,
    **dict.fromkeys(windows.STAMP_FIELDS, _NULLABLE_STAMP),
    **dict.fromkeys(windows.COUNT_FIELDS, _nullable("integer", minimum=0, maximum=windows.NS_MAX)),
    "http_status": _nullable("integer", minimum=100, maximum=599),
    **dict.fromkeys(windows.OPTIONAL_STR_FIELDS, _nullable("string")),
    "source": {"type": "object"},
}

_OPTIONAL = windows.WINDOW_FIELDS[4:]  # required keys too: null when unknown
_WINDOW = {
    "type": "object",
    "required": [*windows.REQUIRED_FIELDS, "verdict", "reasons", "nodes", "in_scope", *_OPTIONAL],
    "properties": {
        **{name: _WINDOW_FIELDS[name] for name in windows.WINDOW_FIELDS},
        "in_scope": {"type": "boolean"},
        "verdict": {"enum": ["ok", "low_confidence", "incomplete"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
        **_SPLIT,
        "null_reasons": _REASONS,
        "engine": _ENGINE_WINDOW,
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["node", "power_w_gated_mean", "energy_j", "coverage_ratio"],
                "properties": {
                    "node": {"type": "string"},
                    "power_w_gated_mean": _NUM,
                    "energy_j": _NUM,
                    **_SPLIT,
                    "coverage_ratio": _NUM,
                    "implausible_intervals": {"type": "integer", "minimum": 0},
                    "system": _WINDOW_SYSTEM,
                    "sm_clock_hz_mean": _NUM,
                    "sm_clock_ratio": _NUM,
                    "temperature_c_max": _NUM,
                    "clock_event_reasons": {"type": ["array", "null"], "items": {"type": "string"}},
                    "throttle": {"type": "array", "items": {"type": "string"}},
                    "null_reasons": _REASONS,
                },
            },
        },
    },
}


_RUN = {
    "type": "object",
    "required": ["id", "name", "t_start_ns", "t_end_ns", "sparkwatch_version"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "command": {
            "type": ["object", "null"],
            "required": ["argv", "exit_code"],
            "properties": {
                "argv": {"type": "array", "items": {"type": "string"}},
                "exit_code": {"type": "integer"},
            },
        },
        "t_start_ns": _STAMP,
        "t_end_ns": _STAMP,
        "sparkwatch_version": {"type": "string"},
        # run-level warnings (optional): the engine's token cross-check, …
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}

_METHOD = {
    "type": "object",
    "required": ["scope", "gate", "interval_s"],
    "properties": {
        "scope": {"enum": ["request", "decode", "run"]},
        "phases": {"type": "array", "items": {"type": "string"}},
        "scope_s": {"type": "number", "minimum": 0},
        "gap_intervals": {"type": "integer", "minimum": 1},
        "gate": {
            "type": "object",
            "required": ["threshold_ratio", "source"],
            "properties": {"threshold_ratio": {"type": "number"}, "source": {"type": "string"}},
        },
        "interval_s": {"type": "number"},
    },
}


#: Where the samples came from (sources/): optional, exports before it lack it.
_SOURCE = {
    "type": "object",
    "required": ["kind", "metrics"],
    "properties": {
        "kind": {"enum": ["sqlite", "prometheus", "victoriametrics"]},
        "metrics": {"enum": ["sparkwatch", "dcgm", "nvidia_gpu_exporter"]},
        "url": {"type": "string", "description": "the engine's URL, without credentials"},
        "api": {"type": "string", "description": "the endpoint the raw samples were read through"},
        "nodes_label": {"type": "string"},
        "gate_series": {"type": "string"},
        "memory_series": {"type": "string"},
        "page_cache_series": {"type": "string"},
        "clock": {"type": "string"},
        "energy": {"type": "string", "description": "how a window's energy is taken at its edges"},
        # the label matchers of --engine-metrics (the serving engine's series) and --series-matchers
        "engine_series": {"type": ["string", "null"]},
        "series_matchers": {"type": ["string", "null"]},
    },
}

_TOTALS_FIELDS = {
    "power_w_gated_mean_sum": _NUM,
    "energy_j": _NUM,
    "memory_used_bytes_peak_sum": _INT,
    "memory_used_bytes_peak_of_sum": _INT,
    "completion_tokens": _COUNT,
    "joules_per_token": _NUM,
}
_TOTALS = {
    "type": "object",
    "required": list(_TOTALS_FIELDS),
    "properties": {
        **_TOTALS_FIELDS,
        "system_energy_j": _NUM,  # optional: exports before system domains lack them
        "system_joules_per_token": _NUM,
        "energy_above_idle_j": _NUM,  # optional: exports before idle baselines lack them
        "system_energy_above_idle_j": _NUM,
        **_SPLIT,
        "null_reasons": _REASONS,
    },
}

_LMX = {
    "type": "object",
    "required": ["gpuPowerWatts", "peakVramGb", "notes"],
    "properties": {
        "gpuPowerWatts": {"type": "array", "items": _NUM},
        "peakVramGb": _AMOUNT,
        "notes": {"type": "string", "maxLength": LMX_NOTES_MAX_CHARS},
    },
}


def run_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://sparkwatch.invalid/schema/sparkwatch.run-1.json",
        "title": "sparkwatch run export",
        "type": "object",
        "required": ["schema", "run", "method", "nodes", "windows", "totals", "lmx"],
        "properties": {
            "schema": {"const": EXPORT_SCHEMA},
            "run": _RUN,
            "method": _METHOD,
            "nodes": {"type": "array", "items": _NODE},
            "windows": {"type": "array", "items": _WINDOW},
            "totals": _TOTALS,
            "lmx": _LMX,
            "engine": _ENGINE,
            "series": SERIES,
            "source": _SOURCE,
        },
    }
