"""lmx's speed-test payload file: the only place lmx reports per-request token counts.

lmx writes the payload to ``--out PATH`` (else ``runs/<model>/<stamp>.json``) and names it in the status
event ``speed_test_payload_file_written {path, pathAbsolute}``. ``samples[]`` has one entry per timed request
(``iteration``, ``request``, ``outputTokens``, ``promptTokens``, ``tokSOut``, ``ttftMs``), present only when
``iterations > 1 || concurrency > 1``; otherwise the top-level ``outputTokens`` / ``tokSOut`` are the one
request's. Samples carry no timestamps, so they are matched to status lines by iteration and ``ttftMs``.
Source: LottoLottoLotto/localmaxxing-cli cmd/lmx/main.go @338a68be (docs/importers.md).

Nothing here is fatal to an import: a payload that is missing or unreadable only leaves the token counts
unknown, with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from sparkwatch.importers.common import Problem, read_json

#: A payload larger than this is not lmx's (a few kB per hundred requests): it is not read.
PAYLOAD_MAX_BYTES = 64 * 1024 * 1024
#: ttftMs is rounded to 2 decimals in both the status line and the sample: equal means within this.
TTFT_MATCH_MS = 0.006


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed request as the payload's ``samples[]`` reports it."""

    iteration: int
    request: int | None
    output_tokens: int | None
    prompt_tokens: int | None
    tok_s_out: float | None
    ttft_ms: float | None


@dataclass(frozen=True, slots=True)
class Payload:
    """What the importer uses of a payload file."""

    path: Path
    samples: dict[int, list[Sample]] = field(default_factory=dict)  # by iteration
    output_tokens: int | None = None  # top level: the median, or the one request's
    prompt_tokens: int | None = None
    tok_s_out: float | None = None

    def match(self, iteration: int, ttft_ms: float, requests: int) -> tuple[Sample | None, str]:
        """The sample of this timed request, and how it was matched (or why none was)."""
        candidates = self.samples.get(iteration, [])
        if not candidates:
            return None, f"{self.path.name} has no samples[] entry for iteration {iteration}"
        if requests == 1 and len(candidates) == 1:
            return candidates[0], "the iteration's only request"
        same = [s for s in candidates if s.ttft_ms is not None and abs(s.ttft_ms - ttft_ms) < TTFT_MATCH_MS]
        if len(same) == 1:
            return same[0], "ttftMs"
        why = "several samples have" if same else "no sample has"
        return None, f"{why} ttftMs {ttft_ms:g} in iteration {iteration} of {self.path.name}"


def locate(path: Any, path_absolute: Any, workdir: Path) -> tuple[Path | None, str]:
    """The payload file a ``speed_test_payload_file_written`` event names: ``path`` taken from the
    command's working directory, else ``pathAbsolute``; or None and why not."""
    tried: list[str] = []
    for value, base in ((path, workdir), (path_absolute, None)):
        if not isinstance(value, str) or not value or "\x00" in value:
            continue
        candidate = Path(value) if base is None or Path(value).is_absolute() else base / value
        try:
            if candidate.is_file():
                return candidate, ""
        except OSError:
            pass
        tried.append(str(candidate))
    if not tried:
        return None, "the payload event names no path"
    return None, f"payload file not found ({' nor '.join(tried)})"


def read_payload(path: Path) -> Payload | str:
    """The payload, or why it cannot be used (one line)."""
    try:
        if path.stat().st_size > PAYLOAD_MAX_BYTES:
            return f"{path.name} is over {PAYLOAD_MAX_BYTES >> 20} MiB: not an lmx payload"
        doc = read_json(path)
    except OSError as exc:
        return f"{path.name}: cannot read: {exc.strerror or exc}"
    except Problem as exc:
        return f"{path.name}: {exc}"
    if isinstance(doc, dict) and isinstance(doc.get("payload"), dict):
        doc = doc["payload"]  # a saved run file may wrap it
    if not isinstance(doc, dict):
        return f"{path.name} is not an lmx payload (not a JSON object)"
    samples: dict[int, list[Sample]] = {}
    raw = doc.get("samples")
    for item in raw if isinstance(raw, list) else []:
        sample = _sample(item)
        if sample is not None:
            samples.setdefault(sample.iteration, []).append(sample)
    return Payload(
        path=path,
        samples=samples,
        output_tokens=_count(doc.get("outputTokens")),
        prompt_tokens=_count(doc.get("promptTokens")),
        tok_s_out=_rate(doc.get("tokSOut")),
    )


def _sample(item: Any) -> Sample | None:
    if not isinstance(item, dict):
        return None
    iteration = _count(item.get("iteration"))
    if iteration is None or iteration < 1:
        return None
    ttft: Any = item.get("ttftMs")
    return Sample(
        iteration=iteration,
        request=_count(item.get("request")),
        output_tokens=_count(item.get("outputTokens")),
        prompt_tokens=_count(item.get("promptTokens")),
        tok_s_out=_rate(item.get("tokSOut")),
        ttft_ms=float(ttft) if _finite(ttft) and ttft >= 0 else None,  # _finite: a number
    )


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> int | None:
    """A count as Go writes it (``float64`` → ``256``), or None."""
    if not _finite(value) or value < 0 or value != int(value) or value > 2**62:
        return None
    return int(value)


def _rate(value: Any) -> float | None:
    return float(value) if _finite(value) and value > 0 else None


@dataclass(frozen=True, slots=True)
class Tokens:
    """A timed request's token counts and decode rate, and where they came from (or why they are unknown)."""

    output: int | None
    prompt: int | None
    tok_s_out: float | None
    source: str

    @property
    def decode_s(self) -> Fraction | None:
        if self.output is None or self.tok_s_out is None:
            return None
        return Fraction(max(self.output - 1, 0)) / Fraction(self.tok_s_out)

    def last_ns(self, first_ns: int | None) -> int | None:
        """The last token: first token + (outputTokens − 1) / tokSOut, lmx's own decode rate inverted."""
        decode = self.decode_s
        return None if decode is None or first_ns is None else first_ns + round(decode * 10**9)

    @property
    def last_method(self) -> str:
        if self.decode_s is not None:
            return "first token + (outputTokens - 1) / tokSOut"
        if self.output is None:
            return f"unknown: no output token count ({self.source})"
        return "unknown: no tokSOut for this request"

    @property
    def rounding_ns(self) -> int | None:
        """tokSOut is printed to one decimal: the last token is off by up to decode time x 0.05 / tokSOut."""
        decode = self.decode_s
        if decode is None or self.tok_s_out is None:
            return None
        return round(decode * Fraction(1, 20) / Fraction(self.tok_s_out) * 10**9)


def tokens_for(
    payload: Payload | None,
    why: str,
    *,
    iteration: int,
    ttft_ms: float,
    requests: int,
    tok_s_out: float | None,
    single: bool,
) -> Tokens:
    """The counts of timed request (``iteration``, ``ttft_ms``) among ``requests`` first tokens of its
    iteration; ``tok_s_out``: the status line's rate when it is this request's; ``single``: lmx ran one
    iteration (with one request, lmx writes no samples[] and the top level is that request's)."""
    if payload is None:
        return Tokens(None, None, None, why)
    sample, how = payload.match(iteration, ttft_ms, requests)
    if sample is not None:
        where = f"{payload.path.name} samples[] iteration {sample.iteration} request {sample.request}"
        rate = sample.tok_s_out or tok_s_out
        return Tokens(sample.output_tokens, sample.prompt_tokens, rate, f"{where} (matched by {how})")
    if not payload.samples and single and requests == 1:
        where = f"{payload.path.name} top-level outputTokens (iterations = concurrency = 1)"
        return Tokens(payload.output_tokens, payload.prompt_tokens, tok_s_out or payload.tok_s_out, where)
    return Tokens(None, None, None, how)
