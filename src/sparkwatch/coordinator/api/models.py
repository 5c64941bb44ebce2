"""Validated request bodies. Every input goes through one of these; extra keys are refused."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from sparkwatch.core.windows import Window, check_window
from sparkwatch.defaults import (
    DEFAULT_GATE_THRESHOLD,
    DEFAULT_INTERVAL_S,
    DEFAULT_PHASES,
    DEFAULT_SCOPE,
    EXIT_CODE_BOUND,
    MAX_ARGV,
    MAX_INTERVAL_S,
    MAX_MARK_AGE_NS,
    MAX_PHASES,
    MAX_RUN_NAME_CHARS,
    MIN_INTERVAL_S,
    NAME_PATTERN,
    PHASE_RE,
    ScopeKind,
    check_name,
    check_phases,
)


class Strict(BaseModel):
    #: allow_inf_nan off: a NaN is "not a finite number", not "should be at most 60" (its comparisons fail)
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


PhaseName = Annotated[str, StringConstraints(pattern=PHASE_RE.pattern)]
#: A run's or a mark's name: one line of text (the schema states the rule as a pattern; the check says it).
Name = Annotated[  # the length on the string itself: after the validator it read "at most 200 items"
    str,
    Field(min_length=1, max_length=MAX_RUN_NAME_CHARS, json_schema_extra={"pattern": NAME_PATTERN}),
    AfterValidator(check_name),
]


class RunCreate(Strict):
    name: Name
    interval_s: float = Field(default=DEFAULT_INTERVAL_S, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S)
    gate_threshold: float = Field(default=DEFAULT_GATE_THRESHOLD, ge=0, le=1)
    scope: ScopeKind = DEFAULT_SCOPE
    #: distinct: the schema says uniqueItems, ``check_phases`` enforces it
    phases: Annotated[list[PhaseName], AfterValidator(check_phases)] = Field(
        default=list(DEFAULT_PHASES),
        min_length=1,
        max_length=MAX_PHASES,
        description="the window phases the run measures; windows of other phases are kept, unmeasured",
        json_schema_extra={"uniqueItems": True},
    )


class CommandOutcome(Strict):
    """What `sparkwatch run` wrapped, so an export says whether the benchmark command succeeded."""

    argv: list[str] = Field(min_length=1, max_length=MAX_ARGV)  # defaults.command_outcome's bounds
    exit_code: int = Field(ge=-EXIT_CODE_BOUND, le=EXIT_CODE_BOUND)


class Empty(Strict):
    """A body that carries nothing (beginning or committing an import): ``{}``, or none at all."""


class RunEnd(Strict):
    command: CommandOutcome | None = None


#: A window as the API takes it: the core's model with its types enforced strictly (no "5" for 5, no
#: 5.0, no unknown keys) and then every window rule (``check_window``); no field list of its own. A batch
#: of them is read in slices (api/bodies.py).
CheckedWindow = Annotated[Window, AfterValidator(check_window)]


class MarkIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        allow_inf_nan=False,
        # the validator's rule, for clients and for bodies made from the schema (tests/fuzz)
        json_schema_extra={
            "if": {"properties": {"event": {"const": "end"}}, "required": ["event"]},
            "then": {"properties": {"phase": {"type": "null"}}},  # an end has no phase: absent or null
            "else": {"properties": {"age_ns": {"type": "null"}}},  # a begin no age
        },
    )
    name: Name
    event: Literal["begin", "end"]
    phase: str | None = Field(
        default=None,
        pattern=PHASE_RE.pattern,
        description="begin only: the phase of its window (default timed)",
    )
    age_ns: int | None = Field(
        default=None,
        ge=0,
        le=MAX_MARK_AGE_NS,
        description="end only: how long before this request reached the coordinator the mark ended, by the"
        " client's own clock (`sparkwatch runs mark` sends how long it has run: its start-up is not the"
        " request's); the window ends that long before now",
    )

    @model_validator(mode="after")
    def _phase_with_begin(self) -> MarkIn:
        if self.event == "end" and self.phase is not None:
            raise ValueError("phase goes with event 'begin' (a mark's phase is set when it begins)")
        if self.event == "begin" and self.age_ns is not None:
            raise ValueError("age_ns goes with event 'end' (a mark begins when its request arrives)")
        return self
