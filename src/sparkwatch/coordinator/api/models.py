"""Validated request bodies. Every input goes through one of these; extra keys are refused."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sparkwatch.core.run_spec import DEFAULT_GATE_THRESHOLD, DEFAULT_INTERVAL_S, DEFAULT_SCOPE
from sparkwatch.core.windows import PHASE_RE, ScopeKind, Window, check_window


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RunCreate(Strict):
    name: str = Field(min_length=1, max_length=200)
    interval_s: float = Field(default=DEFAULT_INTERVAL_S, ge=0.01, le=60)
    gate_threshold: float = Field(default=DEFAULT_GATE_THRESHOLD, ge=0, le=1)
    scope: ScopeKind = DEFAULT_SCOPE


class CommandOutcome(Strict):
    """What `sparkwatch run` wrapped, so an export says whether the benchmark command succeeded."""

    argv: list[str] = Field(min_length=1, max_length=1000)
    exit_code: int = Field(ge=-255, le=255)


class RunEnd(Strict):
    command: CommandOutcome | None = None


#: A window as the API takes it: the core's model with its types enforced strictly (no "5" for 5, no
#: 5.0, no unknown keys) and then every window rule (``check_window``); no field list of its own. A batch
#: of them is read in slices (api/bodies.py).
CheckedWindow = Annotated[Window, AfterValidator(check_window)]


class MarkIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    event: Literal["begin", "end"]
    phase: str = Field(default="timed", pattern=PHASE_RE.pattern)
