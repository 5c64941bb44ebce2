"""Raw samples out of a Prometheus-compatible engine, never resampled.

- Prometheus (and Thanos, Mimir, …): ``/api/v1/query`` with a range selector ``m{…}[Nms]`` evaluated at the
  end of each chunk returns every stored sample in the chunk with its own timestamp; chunks keep every
  answer small. (``/api/v1/query_range`` would resample onto a step grid and hold values across gaps
  for up to the lookback delta: it is not used.)
- VictoriaMetrics: ``/api/v1/export`` returns raw samples as JSON lines ``{"metric", "values",
  "timestamps" (ms)}``; neither lines nor labels come in a stable order and one series may be split over
  several lines, so lines are merged by label set.

Samples of one series are sorted by time and deduplicated (chunk edges meet); NaN (a staleness marker)
is no sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from sparkwatch.core.tracks import F64, I64
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.client import Client, Unreachable

Engine = Literal["prometheus", "victoriametrics"]
ENGINES: tuple[Engine, ...] = ("prometheus", "victoriametrics")
#: One range-selector query covers at most this much time (at 1 s scrapes, 1 800 samples per series).
CHUNK_MS = 1_800_000
NS_PER_MS = 1_000_000
#: A series' samples as an answer gives them: labels, ms stamps, values.
Piece = tuple[dict[str, str], "list[int] | np.ndarray", "list[float] | np.ndarray"]


@dataclass(frozen=True, slots=True)
class RawSeries:
    labels: dict[str, str]
    t_ns: I64  # sorted, unique
    values: F64


def refuse_outside(series: Iterable[RawSeries], lo: float, hi: float, why: str) -> None:
    """A :class:`SourceError` naming the first series with a value outside [lo, hi] (NaN is no sample):
    a unit the family's table does not read (a percentage where a ratio is, ``why``), or a broken exporter.
    Nothing is measured from it; a figure from it would be wrong without a word."""
    for r in series:
        values = r.values[~np.isnan(r.values)]
        bad = values[(values < lo) | (values > hi)]
        if bad.size:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(r.labels.items()) if k != "__name__")
            raise SourceError(
                f"{r.labels.get('__name__', 'a series')}{{{labels}}} holds {bad[0]:g}, outside"
                f" [{lo:g}, {hi:g}]: {why}"
            )


class Reader(Protocol):
    api: str  # the endpoint, for the export's ``source`` block

    def read(self, selector: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]: ...

    def label_values(self, selector: str, label: str, t_from_ns: int, t_to_ns: int) -> set[str]:
        """The values ``label`` has on the series ``selector`` matches that hold a sample in the span."""
        ...


class ShapeError(SourceError):
    """An answer that is JSON but not the shape the API documents; the reader says which URL gave it."""


def detect(client: Client) -> Engine:
    """VictoriaMetrics answers ``/api/v1/status/buildinfo`` with empty data; Prometheus (and the engines
    that copy its API) with a version. An engine that refuses it (an error status, not JSON) is taken to be
    Prometheus-like: the range-selector path works against VictoriaMetrics too, only less cheaply. One that
    cannot be reached at all ends the export here, with that reason."""
    try:
        data = client.get_json("/api/v1/status/buildinfo", {})
    except Unreachable:
        raise  # asking the query API next would only wait as long again
    except SourceError:
        return "prometheus"
    return "victoriametrics" if isinstance(data, dict) and "version" not in data else "prometheus"


def reader(client: Client, engine: Engine, chunk_ms: int = CHUNK_MS) -> Reader:
    return ExportReader(client) if engine == "victoriametrics" else QueryReader(client, chunk_ms)


class QueryReader:
    api = "/api/v1/query (range selectors)"

    def __init__(self, client: Client, chunk_ms: int = CHUNK_MS) -> None:
        self._client = client
        self._chunk_ms = chunk_ms

    def read(self, selector: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]:
        pieces: list[Piece] = []
        for length_ms, at_ms in chunks(t_from_ns, t_to_ns, self._chunk_ms):
            params = {"query": f"{selector}[{length_ms}ms]", "time": f"{at_ms / 1000:.3f}"}
            data = self._client.get_json("/api/v1/query", params)
            try:
                pieces.extend(matrix_pieces(data))
            except ShapeError as exc:
                raise SourceError(f"{self._client.url}/api/v1/query: {exc}") from None
        return merged(pieces)

    def label_values(self, selector: str, label: str, t_from_ns: int, t_to_ns: int) -> set[str]:
        return counted_label_values(self._client, selector, label, (t_from_ns, t_to_ns), self._chunk_ms)


class ExportReader:
    api = "/api/v1/export"

    def __init__(self, client: Client) -> None:
        self._client = client

    def read(self, selector: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]:
        params = {
            "match[]": selector,
            "start": f"{t_from_ns // NS_PER_MS / 1000:.3f}",
            "end": f"{-(-t_to_ns // NS_PER_MS) / 1000:.3f}",
        }
        lines = self._client.get_lines("/api/v1/export", params)
        try:
            return merged(export_piece(line) for line in lines)
        except ShapeError as exc:
            raise SourceError(f"{self._client.url}/api/v1/export: {exc}") from None

    def label_values(self, selector: str, label: str, t_from_ns: int, t_to_ns: int) -> set[str]:
        return counted_label_values(self._client, selector, label, (t_from_ns, t_to_ns), CHUNK_MS)


def chunks(t_from_ns: int, t_to_ns: int, chunk_ms: int) -> Iterator[tuple[int, int]]:
    """(length, end) in ms of the range selectors that cover the span, each at most ``chunk_ms``: a range
    ``(end - length, end]`` leaves its start out, so the first starts 1 ms before the span."""
    at, end_ms = t_from_ns // NS_PER_MS - 1, -(-t_to_ns // NS_PER_MS)
    while at < end_ms:
        length = min(chunk_ms, end_ms - at)
        at += length
        yield length, at


def counted_label_values(
    client: Client, selector: str, label: str, span_ns: tuple[int, int], chunk_ms: int
) -> set[str]:
    """``label``'s values on the series with a sample in the span, counted by the engine a chunk at a time
    (``count by (label) (count_over_time(selector[…]))``): a number per value comes back, where reading the
    series to see their labels brought every sample, and the export then read each node's again."""
    found: set[str] = set()
    for length_ms, at_ms in chunks(*span_ns, chunk_ms):
        query = f"count by ({label}) (count_over_time({selector}[{length_ms}ms]))"
        data = client.get_json("/api/v1/query", {"query": query, "time": f"{at_ms / 1000:.3f}"})
        try:
            found.update(vector_label(data, label))
        except ShapeError as exc:
            raise SourceError(f"{client.url}/api/v1/query: {exc}") from None
    return found


def vector_label(data: Any, label: str) -> list[str]:
    """The non-empty values of ``label`` in an instant query's answer (a vector); anything else is refused."""
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise ShapeError(f"a count's answer must be a vector, not {kind!r}")
    out = []
    for series in _list(data.get("result"), "result"):
        if not isinstance(series, dict):
            raise ShapeError("a series in the answer is not an object")
        value = _labels(series.get("metric")).get(label)
        if value:
            out.append(value)
    return out


def matrix_pieces(data: Any) -> list[Piece]:
    """A range-selector answer's series as (labels, ms, values); anything else is refused."""
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise ShapeError(f"a range selector's answer must be a matrix, not {kind!r}")
    out: list[Piece] = []
    for series in _list(data.get("result"), "result"):
        if not isinstance(series, dict):
            raise ShapeError("a series in the answer is not an object")
        values = _list(series.get("values"), "values")
        try:
            t_ms = [round(float(v[0]) * 1000) for v in values]
            vs = [float(v[1]) for v in values]
        except (TypeError, ValueError, IndexError):
            raise ShapeError(f'a sample in the answer is not [time, "value"]: {values[:1]!r:.80}') from None
        out.append((_labels(series.get("metric")), t_ms, vs))
    return out


def export_piece(line: Any) -> Piece:
    """One line of VictoriaMetrics' export as (labels, ms, values): each column converted by numpy in one
    pass when it holds numbers only (what the engine writes), else value by value, as strictly."""
    if not isinstance(line, dict):
        raise ShapeError("an export line is not an object")
    stamps, values = _list(line.get("timestamps"), "timestamps"), _list(line.get("values"), "values")
    if len(stamps) != len(values):
        raise ShapeError(f"an export line has {len(stamps)} timestamps for {len(values)} values")
    try:
        t_ms, vs = _column(stamps, np.int64, int), _column(values, np.float64, _value)
        return _labels(line.get("metric")), t_ms, vs
    except (TypeError, ValueError, OverflowError):
        raise ShapeError("an export line holds a timestamp or value that is not a number") from None


def _value(item: Any) -> float:
    """An export line's value: ``null`` is how VictoriaMetrics writes a staleness marker (seen from its
    /api/v1/export after a remote-written stale NaN), read as NaN, which is no sample (:func:`merged`)."""
    return math.nan if item is None else float(item)


def _column(items: Sequence[Any], dtype: type, each: Any) -> np.ndarray:
    """Numbers as a column: numpy's own reading where it finds only numbers of the kinds ``dtype`` takes
    (integers, and floats for a float column), else item by item through ``each`` (``int``/``float``, which
    refuse what is not a number: numpy would read None as NaN)."""
    column = np.array(items)
    if column.dtype.kind in ("i" if dtype is np.int64 else "if") and column.ndim == 1:
        return column.astype(dtype, copy=False)
    return np.array([each(x) for x in items], dtype=dtype)


def merged(pieces: Iterable[Piece]) -> list[RawSeries]:
    """Pieces of the same label set joined, sorted by time, deduplicated, NaN dropped."""
    by_key: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[Any], list[Any]]] = {}
    for labels, t_ms, values in pieces:
        key = tuple(sorted(labels.items()))
        held = by_key.setdefault(key, (labels, [], []))
        held[1].append(np.asarray(t_ms, dtype=np.int64))
        held[2].append(np.asarray(values, dtype=np.float64))
    out = []
    for labels, t_parts, v_parts in by_key.values():
        t = np.concatenate(t_parts) * NS_PER_MS
        v = np.concatenate(v_parts)
        if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):
            order = np.argsort(t, kind="stable")
            t, v = t[order], v[order]
        keep = np.isfinite(v)
        keep[1:] &= t[1:] != t[:-1]
        out.append(RawSeries(labels, t[keep], v[keep]))
    return out


def _list(value: Any, what: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise ShapeError(f"the answer's {what} is not a list")
    return value


def _labels(metric: Any) -> dict[str, str]:
    if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
        raise ShapeError("a series' labels are not an object of strings")
    return {str(k): v for k, v in metric.items()}
