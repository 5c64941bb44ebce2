"""The command line's defaults and bounds, in a module that imports nothing heavy: `sparkwatch --help`
must not load aiohttp, numpy or pydantic to print them. Their users import them from here."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import Literal, TypeVar

from sparkwatch_agent.shared.strict_text import cut_short, quoted_number, utf8_escaped

#: What an export says it is (its ``schema``; core/export.py makes it, the CLI's client checks it).
EXPORT_SCHEMA = "sparkwatch.run/1"
#: ``run.notes`` of an export (core/export.py) made while its run was open: otherwise it reads like an
#: ended run's.
OPEN_RUN_NOTE = (
    "open: the run had not ended when this was exported; its end is the export's time, and windows and"
    " samples may still arrive"
)
#: What a run's figures cover: every request's span, only decode (first → last token), or the whole run.
ScopeKind = Literal["request", "decode", "run"]
SCOPES: tuple[ScopeKind, ...] = ("request", "decode", "run")

#: What a run measures unless it asks otherwise: the sampling interval it leases from the agents, the
#: utilisation the gate lets through, the scope.
DEFAULT_INTERVAL_S = 0.1
DEFAULT_GATE_THRESHOLD = 0.5
#: The series the gate reads (named so by the export, the report and `runs show`).
UTIL_SOURCE = "nvml.utilization.gpu"
DEFAULT_SCOPE: ScopeKind = "request"
#: How long `run` waits for every node's hello before the run opens (a node still silent then is measured
#: from when it says hello; --strict does not start the command), and as long again for their samples.
DEFAULT_HELLO_WAIT_S = 15.0
#: The window phases a run measures unless it names others (warm-up and other phases are kept, unmeasured),
#: and the most one run may name.
DEFAULT_PHASES: tuple[str, ...] = ("timed",)
MAX_PHASES = 16
#: The most a mark's end may be dated back (the API's ``age_ns``): a client's start-up, not a wait.
MAX_MARK_AGE_NS = 60 * 1_000_000_000
#: The longest run or mark name the API takes.
MAX_RUN_NAME_CHARS = 200
#: What a run or mark name (or a window's id) may not hold: C0 and C1 control characters, DEL, Unicode's
#: line and paragraph separators (U+2028, U+2029: ``str.splitlines`` and many viewers break lines there),
#: and its bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069: a name shown in
#: a terminal or log would read in another order than it holds, the "Trojan Source" trick; the marks
#: U+200E/U+200F, which right-to-left text may need, stay). A name is one line wherever it shows (a log
#: line, the report's title, a table cell); a line break in one could forge a log line.
CONTROL_CHARS_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: The same rule as a JSON Schema pattern (the API's schema, and bodies made from it).
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]*$"
#: What a text that breaks the rule is told, before the character found.
NOT_ONE_LINE = (
    "must not hold control characters, line breaks or bidirectional overrides (a newline, a tab, an escape,"
    " U+2028, U+202E)"
)


def check_name(name: str) -> str:
    """A run or mark name, unchanged; a ValueError if it holds a control character, or bytes that are not
    UTF-8 (a command line hands them over surrogate-escaped; JSON cannot carry them)."""
    bad = CONTROL_CHARS_RE.search(name)
    if bad:
        raise ValueError(f"{NOT_ONE_LINE}: {bad.group()!r}")
    escaped = utf8_escaped(name)
    if escaped != name:
        raise ValueError(f"must be UTF-8 text, got {cut_short(escaped)}")
    return name


#: The bounds of a run's sampling interval, enforced by the API and checked by the CLI's flags.
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 60.0

#: The serving engines' scrape interval bounds (engines/spec.py: faster scrapes only re-read values the
#: engine updates once per batch; slower ones blur short windows) and the metric families scraped
#: (engines/families.py): here, so a store's read can check its rows by the rules their writer followed.
ENGINE_MIN_INTERVAL_S, ENGINE_MAX_INTERVAL_S = 0.2, 60.0
ENGINE_FAMILY_NAMES = ("vllm", "sglang")
#: What a scraped engine value may be, by our field (engines/scrape.py leaves any other out of its scrape as
#: if the page lacked it; store/engine_samples.py refuses a row that holds one). Every field is a count, a
#: rate or a ratio: never negative. A count is at most 2**53, above which a float no longer holds every
#: integer (a sum over ranks, or a column's running sum, would lose the smaller values or overflow). A ratio
#: (vLLM's kv_cache_usage_perc, 1 = full; SGLang's token_usage, cache_hit_rate and spec_accept_rate, all
#: fractions) is at most 1, give or take an engine's float32 rounding.
ENGINE_MAX_COUNT = float(2**53)
ENGINE_MAX_RATIO = 1.0 + 1e-6
ENGINE_RATIO_FIELDS = ("kv_cache_usage_ratio", "prefix_cache_hit_ratio", "spec_accept_ratio")
#: The largest value by field, where it is not ENGINE_MAX_COUNT (a mapping: the store checks a column of
#: values with ``map(ENGINE_FIELD_MAX.get, …)``, no Python per value).
ENGINE_FIELD_MAX = MappingProxyType(dict.fromkeys(ENGINE_RATIO_FIELDS, ENGINE_MAX_RATIO))


def engine_value_max(field: str) -> float:
    """The largest value an engine field may hold (the least is 0): one rule for the scrape and the store."""
    return ENGINE_FIELD_MAX.get(field, ENGINE_MAX_COUNT)


#: The export's optional ``series`` block (what the run report plots): time buckets over the run by default
#: (2 per pixel of the report's 1100 px plot: min/max per bucket keeps every peak a screen can show), and the
#: bounds a request or flag may ask for.
SERIES_BUCKETS = 2400
MIN_SERIES_BUCKETS = 100
MAX_SERIES_BUCKETS = 20_000

#: Samples no run covers are kept this long (`sparkwatch coordinator --retain-idle`), and a retention pass
#: runs this often.
RETAIN_IDLE_S = 7 * 86400.0
RETENTION_EVERY_S = 600.0

#: Where the CLI finds a standing coordinator and its token when no flag says.
ENV_COORDINATOR = "SPARKWATCH_COORDINATOR"
ENV_TOKEN_FILE = "SPARKWATCH_TOKEN_FILE"
#: What `sparkwatch run` tells CMD (beside those two): the run it is measured in, for marks it posts itself.
ENV_RUN_ID = "SPARKWATCH_RUN_ID"
DEFAULT_COORDINATOR = "http://127.0.0.1:8750"

#: The most simulated nodes `sparkwatch demo` starts in one process.
MAX_DEMO_NODES = 64
#: The most tokens the simulated model makes for one request (`sim-model`, `demo --max-tokens`).
MAX_SIM_TOKENS = 100_000
#: Where `sparkwatch demo` writes its export by default: not run.json, which a real run may have written.
DEMO_EXPORT = "demo.json"

#: A window phase's name: `timed`, `warmup` or another short lower-case word.
PHASE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


Phases = TypeVar("Phases", bound=Sequence[str])


def check_phases(phases: Phases) -> Phases:
    """The phases a run measures, unchanged, if they are 1 to MAX_PHASES distinct window phase names; else a
    ValueError saying what is wrong (a name repeated is a slip in the list, not a weight)."""
    if not 1 <= len(phases) <= MAX_PHASES:
        raise ValueError(f"1 to {MAX_PHASES} phases, not {len(phases)}")
    for phase in phases:
        if not PHASE_RE.fullmatch(phase):  # not .match: its "$" also takes a trailing newline
            raise ValueError(f"phase {phase!r} must match {PHASE_RE.pattern}")
    repeated = sorted({p for p in phases if phases.count(p) > 1})
    if repeated:
        raise ValueError(f"phases named more than once: {', '.join(repeated)}")
    return phases


#: A wrapped command's bounds (`sparkwatch run`'s argv and its exit status, a signal's as 128 + N or -N).
MAX_ARGV = 1000
EXIT_CODE_BOUND = 255


def command_outcome(value: object) -> dict[str, object] | None:
    """A wrapped command as an export's schema has it, ``{"argv": [str, …], "exit_code": int}`` (1 to
    MAX_ARGV arguments, an exit code within ±EXIT_CODE_BOUND), or None for any other shape: what the API
    takes, a store reads back and an imported export gives (one edited to another shape made an export that
    fails its own schema)."""
    if not isinstance(value, dict):
        return None
    argv, code = value.get("argv"), value.get("exit_code")
    if not isinstance(argv, list) or not 1 <= len(argv) <= MAX_ARGV or any(type(a) is not str for a in argv):
        return None
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    if not -EXIT_CODE_BOUND <= code <= EXIT_CODE_BOUND:
        return None
    return {"argv": list(argv), "exit_code": code}


def check_series_buckets(buckets: int) -> int:
    """``buckets`` unchanged when it is within the bounds; else a ValueError saying which they are."""
    if not MIN_SERIES_BUCKETS <= buckets <= MAX_SERIES_BUCKETS:
        got = quoted_number(buckets)
        raise ValueError(f"must be {MIN_SERIES_BUCKETS} to {MAX_SERIES_BUCKETS} buckets, got {got}")
    return buckets
