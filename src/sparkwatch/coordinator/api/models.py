"""Validated request bodies. Every input goes through one of these; extra keys are refused."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sparkwatch.core.windows import Window

PHASE_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
NS_MAX = 2**63 - 1  # SQLite integers are 64-bit signed


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RunCreate(Strict):
    name: str = Field(min_length=1, max_length=200)
    interval_s: float = Field(default=0.1, ge=0.01, le=60)
    gate_threshold: float = Field(default=0.5, ge=0, le=1)
    scope: Literal["request", "decode", "run"] = "request"


class CommandOutcome(Strict):
    """What `sparkwatch run` wrapped, so an export says whether the benchmark command succeeded."""

    argv: list[str] = Field(min_length=1, max_length=1000)
    exit_code: int = Field(ge=-255, le=255)


class RunEnd(Strict):
    command: CommandOutcome | None = None


class WindowIn(Strict):
    id: str = Field(min_length=1, max_length=200)
    phase: str = Field(pattern=PHASE_PATTERN)
    t_start_ns: int = Field(gt=0, le=NS_MAX)
    t_first_byte_ns: int | None = Field(default=None, gt=0, le=NS_MAX)
    t_first_token_ns: int | None = Field(default=None, gt=0, le=NS_MAX)
    t_last_token_ns: int | None = Field(default=None, gt=0, le=NS_MAX)
    t_end_ns: int = Field(gt=0, le=NS_MAX)
    prompt_tokens: int | None = Field(default=None, ge=0, le=NS_MAX)
    completion_tokens: int | None = Field(default=None, ge=0, le=NS_MAX)
    cached_tokens: int | None = Field(default=None, ge=0, le=NS_MAX)
    reasoning_tokens: int | None = Field(default=None, ge=0, le=NS_MAX)
    http_status: int | None = Field(default=None, ge=100, le=599)
    finish_reason: str | None = Field(default=None, min_length=1, max_length=64)
    source: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ordered(self) -> WindowIn:
        try:
            json.dumps(self.source, allow_nan=False)
        except ValueError:
            raise ValueError("source must not contain NaN or infinite numbers") from None
        if self.t_end_ns < self.t_start_ns:
            raise ValueError("t_end_ns must not be before t_start_ns")
        for name in ("t_first_byte_ns", "t_first_token_ns", "t_last_token_ns"):
            value = getattr(self, name)
            if value is not None and not self.t_start_ns <= value <= self.t_end_ns:
                raise ValueError(f"{name} must lie within [t_start_ns, t_end_ns]")
        if (
            self.t_first_token_ns is not None
            and self.t_last_token_ns is not None
            and self.t_last_token_ns < self.t_first_token_ns
        ):
            raise ValueError("t_last_token_ns must not be before t_first_token_ns")
        return self

    def to_window(self) -> Window:
        return Window(**self.model_dump())


class WindowBatch(Strict):
    windows: list[WindowIn] = Field(min_length=1, max_length=100_000)

    @model_validator(mode="after")
    def _unique(self) -> WindowBatch:
        ids = [w.id for w in self.windows]
        if len(set(ids)) != len(ids):
            raise ValueError("window ids must be unique within a batch")
        return self


class MarkIn(Strict):
    name: str = Field(min_length=1, max_length=200)
    event: Literal["begin", "end"]
    phase: str = Field(default="timed", pattern=PHASE_PATTERN)
