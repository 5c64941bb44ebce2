"""Request bodies in, validated models out; a refusal is a :class:`BodyError` with pydantic's findings as
``{"loc", "msg"}`` items (a broken window rule names the window's field in ``loc``).

A windows body can hold 100 000 windows; parsing or validating it in one call would hold the GIL (and so
the event loop, even from a worker thread) for a second or more. :func:`window_batch` walks the body one
window at a time (:mod:`envelope_scan`), then validates the windows in slices of ``SLICE_WINDOWS`` cut from
the body's own text, each a few milliseconds, so the loop gets its turns in between.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from sparkwatch.coordinator.api.envelope_scan import ScanError, scan
from sparkwatch.coordinator.api.models import CheckedWindow, Strict
from sparkwatch.core.windows import Window, WindowError

SLICE_WINDOWS = 1000
MAX_WINDOWS = 100_000
#: How many findings a refusal lists at most.
MAX_DETAILS = 20

M = TypeVar("M", bound=BaseModel)


class BodyError(ValueError):
    """An invalid body: the findings, for a ``400 invalid_body``."""

    def __init__(self, details: list[dict[str, str]]) -> None:
        super().__init__(details)
        self.details = details[:MAX_DETAILS]


class Envelope(Strict):
    """The windows body around its windows, which are validated slice by slice."""

    windows: list[Any] = Field(min_length=1, max_length=MAX_WINDOWS)
    import_id: str | None = Field(default=None, min_length=1, max_length=64)


@dataclass(frozen=True, slots=True)
class WindowBatch:
    windows: list[Window]
    import_id: str | None


_SLICE = TypeAdapter(list[CheckedWindow], config=ConfigDict(extra="forbid", strict=True))


def model(raw: bytes, kind: type[M]) -> M:
    """A small body (a run, a mark): one pydantic call, after a key given twice in one object is refused
    (pydantic would keep the last, and the client meant one of them)."""
    repeated = _repeated_key(raw)
    if repeated is not None:
        raise BodyError([{"loc": repeated, "msg": "given more than once in one object"}])
    try:
        return kind.model_validate_json(raw)
    except ValidationError as exc:
        raise BodyError(_details(exc)) from None


def _repeated_key(raw: bytes) -> str | None:
    """The first key an object of the body repeats; None if none does or the body is not JSON (which
    pydantic then says)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise _Repeated(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except _Repeated as exc:
        return str(exc)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the stack: pydantic says so
        return None
    return None


class _Repeated(Exception):
    pass


def window_batch(raw: bytes) -> WindowBatch:
    """A windows body; meant for a worker thread (it yields the GIL between slices)."""
    try:
        scanned = scan(raw, MAX_WINDOWS)
        envelope = Envelope.model_validate(scanned.members)
    except ScanError as exc:
        raise BodyError([{"loc": exc.loc, "msg": str(exc)}]) from None
    except ValidationError as exc:
        raise BodyError(_details(exc)) from None
    spans = envelope.windows  # (start, end) in scanned.text of each window, as the scan left them
    windows: list[Window] = []
    details: list[dict[str, str]] = []
    for start in range(0, len(spans), SLICE_WINDOWS):
        last = spans[min(start + SLICE_WINDOWS, len(spans)) - 1]
        piece = "[" + scanned.text[spans[start][0] : last[1]] + "]"
        try:
            windows.extend(_SLICE.validate_json(piece))
        except ValidationError as exc:
            details.extend(_details(exc, prefix=("windows",), offset=start))
            if len(details) >= MAX_DETAILS:
                break
    if details:
        raise BodyError(details)
    return WindowBatch(windows, envelope.import_id)  # an id repeated in it is a 409 of the store's


def _details(exc: ValidationError, prefix: tuple[str, ...] = (), offset: int = 0) -> list[dict[str, str]]:
    out = []
    for error in exc.errors(include_url=False):
        loc = list(error["loc"])
        if offset and loc and isinstance(loc[0], int):
            loc[0] += offset
        out.append(_detail(error, [*prefix, *map(str, loc)], whole=not prefix))
    return out


def _detail(error: ErrorDetails, loc: list[str], whole: bool) -> dict[str, str]:
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, WindowError):
        return {"loc": ".".join([*loc, cause.field]), "msg": cause.problem}
    if error["type"] == "json_invalid" and (half := _HALF_PAIR.search(error["msg"])):
        # the parser's words name no cause; its position is the body's own unless it read a slice of it
        at = _POSITION.search(error["msg"], half.end()) if whole else None
        return {"loc": ".".join(loc), "msg": HALF_PAIR + (at.group(0) if at else "")}
    return {"loc": ".".join(loc), "msg": error["msg"]}


#: What the JSON parser (jiter) says of a \uD800–\uDFFF escape without its other half, and what is said.
_HALF_PAIR = re.compile(r"unexpected end of hex escape|lone leading surrogate in hex escape")
_POSITION = re.compile(r" at line \d+ column \d+$")
HALF_PAIR = (
    "Invalid JSON: a \\uD800–\\uDFFF escape without the other half of its surrogate pair (it stands for no"
    " character)"
)
