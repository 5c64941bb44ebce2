"""GPU energy split by a request's phases: *prefill* (window start → first token) and *decode* (first token →
last token). The time after the last token is in neither.

Per window, each phase is that window's own span, like the window's ``energy_j``. Per node and in the totals
the split is taken over the union of the measured windows' spans, as ``energy_j`` is over the scope: decode
is every instant some measured request is between its first and last token, prefill every instant some is
waiting for its first token while none is decoding (with concurrent requests a batch serves both, and that
time counts once, as decode). So prefill + decode never exceed the energy of those spans, and with one
request at a time they are the sums of the windows' own figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sparkwatch.core.columns import int_column
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.integrals import Integrals
from sparkwatch.core.tracks import F64, I64, known
from sparkwatch.core.windows import Scope, Window, union


@dataclass(frozen=True, slots=True)
class TokenSpans:
    """Every window's phase boundaries (its start where a stamp is unknown, so both spans are empty) and
    the unions over the measured windows."""

    stamped: npt.NDArray[np.bool_]  # per window: first and last token both known
    starts: I64
    first_token: I64
    last_token: I64
    decode: Scope  # union of the measured windows' decode spans
    either: Scope  # union of their prefill and decode spans
    unknown_why: str | None  # why the run's split is unknown (None when it is known)


def no_measured_window(windows: Sequence[Window], phases: frozenset[str]) -> str:
    """Why a run has no measured window: none of its phases was recorded, or every one was left out."""
    label = " or ".join(sorted(phases))
    recorded = sum(w.phase in phases for w in windows)
    if not recorded:
        return f"no {label} window was recorded"
    return (
        f"none of the {recorded} {label} window(s) was measured (failed, or without the stamps the scope"
        " needs)"
    )


def token_spans(windows: Sequence[Window], measured: Sequence[bool], phases: frozenset[str]) -> TokenSpans:
    n = len(windows)
    stamped = np.fromiter(
        (w.t_first_token_ns is not None and w.t_last_token_ns is not None for w in windows), bool, n
    )
    starts = int_column((w.t_start_ns for w in windows), n)
    first = int_column((w.t_first_token_ns or w.t_start_ns for w in windows), n)
    last = int_column((w.t_last_token_ns or w.t_start_ns for w in windows), n)
    first[~stamped] = starts[~stamped]
    last[~stamped] = starts[~stamped]
    chosen = np.fromiter(measured, bool, n) & stamped
    s, f, la = starts[chosen].tolist(), first[chosen].tolist(), last[chosen].tolist()
    decode = union(zip(f, la, strict=True))
    either = union([*zip(s, f, strict=True), *zip(f, la, strict=True)])
    lacking = [w.id for w, m, ok in zip(windows, measured, stamped.tolist(), strict=True) if m and not ok]
    count = sum(measured)
    why = None
    if not count:
        why = no_measured_window(windows, phases)
    elif lacking:
        why = (
            f"{len(lacking)} of {count} measured window(s) lack a first or last token stamp:"
            f" {name_ids(lacking)}"
        )
    return TokenSpans(stamped, starts, first, last, decode, either, why)


def window_split(integrals: Sequence[Integrals], spans: TokenSpans) -> tuple[F64, F64]:
    """Per window, a node's prefill and decode energy summed over its GPUs; NaN where a window lacks the
    stamps, a GPU has no valid interval in a non-empty span, or the node has no GPU."""
    n = len(spans.starts)
    prefill, decode = np.zeros(n), np.zeros(n)
    if not integrals:
        prefill[:] = np.nan
        decode[:] = np.nan
    for gpu in integrals:
        prefill += _span_energy(gpu, spans.starts, spans.first_token)
        decode += _span_energy(gpu, spans.first_token, spans.last_token)
    prefill[~spans.stamped] = np.nan
    decode[~spans.stamped] = np.nan
    return prefill, decode


def _span_energy(gpu: Integrals, a_ns: I64, b_ns: I64) -> F64:
    """Energy over each [a, b): 0 over an empty span, NaN over a span no valid interval covers."""
    energy, covered = gpu.between(a_ns, b_ns)[:2]
    return np.where((b_ns == a_ns) | (covered > 0), energy, np.nan)


def node_split(integrals: Sequence[Integrals], spans: TokenSpans) -> tuple[float | None, float | None]:
    """A node's prefill and decode energy over the run's unions (module docstring); ``None`` when the
    run's split is unknown or a GPU has no valid interval in a phase."""
    if spans.unknown_why is not None or not integrals:
        return None, None
    either = _sum_known([scope_energy(g, spans.either) for g in integrals])
    decode = _sum_known([scope_energy(g, spans.decode) for g in integrals])
    prefill = None if either is None or decode is None else max(either - decode, 0.0)
    return prefill, decode


def scope_energy(gpu: Integrals, scope: Scope) -> float | None:
    """Energy over a scope: 0 over an empty one, ``None`` when no valid interval covers any of it."""
    if scope.empty:
        return 0.0
    energy, covered = gpu.between(scope.starts, scope.ends)[:2].sum(axis=1)
    return float(energy) if covered > 0 else None


def _sum_known(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else float(sum(v for v in values if v is not None))


def as_known(values: F64) -> list[float | None]:
    return [known(v) for v in values.tolist()]
