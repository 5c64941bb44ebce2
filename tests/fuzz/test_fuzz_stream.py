"""Hostile agent streams through the coordinator's one ingest path (wire.decode_lines → links.stream
.StreamIngest → a real SQLite store), then exported.

The streams start from real frames (a sim agent's hello and samples, as its stream cursor sends them) and
are mutated, damaged, reordered, re-sent on a second connection and mixed with garbage. Every case:
feeding and flushing never raise; the store holds exactly the samples an independent oracle of the
documented rules says are usable (after a hello, of its boot, seq moving forward, every field typed and
in range) and nothing else; and the export over them answers, with no non-finite number anywhere.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import sqlite3
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from fuzz.hostile import JSON, damaged, hostile_bytes, ints, mutated, raw_fragments
from fuzz.profiles import bounded, fuzz_settings
from fuzz.window_rules import EPOCH_END_NS, EPOCH_MIN_NS
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.integrals import MAX_PLAUSIBLE_GPU_W
from sparkwatch.core.window_rows import plain
from sparkwatch.links.state import LinkState
from sparkwatch.links.stream import StreamIngest
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow
from sparkwatch.store.sample_block import decode_blob
from sparkwatch_agent.assemble import assemble
from sparkwatch_agent.config import build_config
from sparkwatch_agent.hardware.host_facts import read_host_facts
from sparkwatch_agent.sampling.sample import encode_frame
from sparkwatch_agent.serving.hello import hello_frame
from sparkwatch_agent.serving.stream_cursor import StreamCursor

INT64_MAX = 2**63 - 1
#: How deep a frame may nest (orjson's limit; an agent's frames nest four deep).
MAX_DEPTH = 1024
#: How deep msgspec (the coordinator's sample decoder) reads a line: a sample nested deeper in a field it
#: skips goes to orjson, which refuses a number no double holds anywhere.
MSGSPEC_DEPTH = 998
SAMPLE_KEYS = ("seq", "boot_id", "t_wall_ns", "t_mono_ns", "interval_s", "memory", "gpus", "sensors")


@dataclass(frozen=True, slots=True)
class RealStream:
    hello: dict[str, JSON]
    samples: list[dict[str, JSON]]


@pytest.fixture(scope="module")
def real_stream() -> RealStream:
    """A sim GB10 agent's first frames, exactly as its stream cursor writes them."""
    config = build_config({"node": "spark-f", "backend": "sim", "interval": 0.01, "ring_size": 1000}, {})
    parts = assemble(config)
    sampler = parts.sampler
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while sampler.last_seq < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        snap = sampler.snapshot
        cursor = StreamCursor(0, snap.inventory_rev - 1)  # a new reader: hello first
        lines = cursor.next_lines(sampler, 12, lambda s: encode_frame(hello_frame(s, read_host_facts())))
    finally:
        sampler.stop()
    frames = [json.loads(line) for line in lines]
    assert frames[0]["type"] == "hello" and len(frames) == 13, frames[:2]
    return RealStream(frames[0], frames[1:])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store for every case (each case is a node of its own), as a coordinator keeps one."""
    db = Store(tmp_path_factory.mktemp("stream-fuzz") / "fuzz.db")
    yield db
    db.close()


# ---- the oracle: the documented frame rules, written out apart from wire.py ----


def _int_in(value: Any, low: int) -> bool:
    return type(value) is int and low <= value <= INT64_MAX


def _number_or_null(value: Any) -> bool:
    return value is None or (type(value) in (int, float) and math.isfinite(value))


def _usable_gpu(gpu: Any) -> bool:
    return (
        isinstance(gpu, dict)
        and _int_in(gpu.get("index"), 0)
        and isinstance(gpu.get("uuid"), str)
        and gpu["uuid"] != ""
        and all(_number_or_null(gpu.get(k)) for k in ("power_w", "energy_j", "util_ratio"))
    )


def _text(value: Any) -> bool:
    return type(value) is str and 0 < len(value) <= 64


def _usable_sensor(entry: Any) -> bool:
    """docs/agent.md's sensor entry: names of at most 64 characters, a documented kind, numbers or null."""
    return (
        isinstance(entry, dict)
        and _text(entry.get("sensor"))
        and _text(entry.get("source", "hwmon"))
        and entry.get("kind") in ("system", "module", "cpu", "gpu", "other")
        and _number_or_null(entry.get("power_w"))
        and _number_or_null(entry.get("energy_j"))
    )


def _usable_sensors(sensors: Any) -> bool:
    return isinstance(sensors, list) and len(sensors) <= 128 and all(_usable_sensor(e) for e in sensors)


def usable_sample(frame: Any) -> bool:
    """docs/agent.md's sample, as the coordinator must check it."""
    if not isinstance(frame, dict) or frame.get("type") != "sample":
        return False
    memory, interval = frame.get("memory"), frame.get("interval_s")
    return (
        _int_in(frame.get("seq"), 1)
        and isinstance(frame.get("boot_id"), str)
        and frame["boot_id"] != ""
        and _int_in(frame.get("t_wall_ns"), 0)
        and _int_in(frame.get("t_mono_ns"), 0)
        and _number_or_null(interval)
        and interval is not None
        and 0 < interval <= 3600
        and (memory is None or (isinstance(memory, dict) and _used_ok(memory.get("used_bytes"))))
        and isinstance(frame.get("gpus", []), list)
        and all(_usable_gpu(g) for g in frame.get("gpus", []))
        and _usable_sensors(frame.get("sensors", []))
    )


def _signals_finite(frame: dict[str, Any]) -> bool:
    """The GPUs' clock signals are read (leniently: any JSON), so a number no double holds in one refuses
    the line, as anywhere in a line the coordinator parses whole."""
    keys = ("sm_clock_hz", "temperature_c", "clock_event_reasons")
    return all(_finite_deep(g.get(k)) for g in frame.get("gpus", []) for k in keys)


def _finite_deep(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite_deep(v) for v in value)
    if isinstance(value, dict):
        return all(_finite_deep(v) for v in value.values())
    return True


def usable_hello(frame: dict[str, Any]) -> bool:
    """docs/coordinator.md's hello: a boot id, and the parts the coordinator reads of their JSON types (or
    absent, or null)."""
    if frame.get("type") != "hello" or not isinstance(frame.get("boot_id"), str) or not frame["boot_id"]:
        return False
    kinds = {"memory_model": str, "agent_version": str, "hardware": dict, "capabilities": dict}
    if any(frame.get(k) is not None and not isinstance(frame[k], kind) for k, kind in kinds.items()):
        return False
    interval = frame.get("interval_s")
    if interval is not None and type(interval) not in (int, float):
        return False
    hardware, capabilities = frame.get("hardware") or {}, frame.get("capabilities") or {}
    objects = [hardware.get("lmx"), hardware.get("host"), capabilities.get("host_memory")]
    gpus = capabilities.get("gpus")
    return all(o is None or isinstance(o, dict) for o in objects) and (
        gpus is None or (isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus))
    )


def _used_ok(used: Any) -> bool:
    return used is None or _int_in(used, 0)


def parse_line(line: str, *, finite: bool = True, max_depth: int = MAX_DEPTH) -> Any:
    """What the line is as JSON, read by the standard library under the rules docs/agent.md gives a
    frame: RFC 8259 JSON in UTF-8 (no NaN or Infinity, no lone surrogate), every number a finite double or
    an integer of 64 bits (a larger integer reads as a double). None when it is not. ``finite=False``: a
    number no double holds reads as an infinity (what a sample may hold in a field the coordinator skips;
    nested at most ``max_depth`` deep, the skipping parser's limit)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH))  # the standard library's parser recurses
    number = _double if finite else float
    integer = functools.partial(_integer, finite=finite)
    try:
        value = json.loads(line, parse_constant=_refuse, parse_float=number, parse_int=integer)
    except (ValueError, RecursionError):  # deeper than the raised limit: far deeper than MAX_DEPTH
        return None
    finally:
        sys.setrecursionlimit(limit)
    return value if _utf8(value, max_depth) else None


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is no finite double")
    return value


def _integer(text: str, finite: bool = True) -> int | float:
    if len(text) <= 21:  # no longer one can fit 64 bits (and int() refuses beyond 4300 digits)
        value = int(text)
        if -(2**63) <= value < 2**64:
            return value
    return _double(text) if finite else float(text)


def _utf8(value: Any, max_depth: int) -> bool:
    """No lone surrogate anywhere, nested at most ``max_depth`` deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
            return False
        if isinstance(item, list | dict):
            if depth > max_depth:
                return False
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def expected_rows(streams: list[list[str]]) -> dict[tuple[str, int], str]:
    """(boot, seq) → line of every sample the coordinator must store: each connection starts without a
    boot; a hello (a non-empty boot_id) sets it; a usable sample of that boot whose seq is above the last
    one taken on this connection is taken; the first stored copy of a (boot, seq) wins."""
    rows: dict[tuple[str, int], str] = {}
    for messages in streams:
        boot: str | None = None
        last = 0
        for message in messages:
            for line in message.strip("\n").split("\n"):
                if len(line) > 256 * 1024:
                    continue
                frame = parse_line(line)
                if frame is None:  # a sample is taken whatever the fields the coordinator does not read hold
                    frame = parse_line(line, finite=False, max_depth=MSGSPEC_DEPTH)
                    frame = frame if usable_sample(frame) and _signals_finite(frame) else None
                if not isinstance(frame, dict):
                    continue
                if usable_hello(frame):
                    boot, last = frame["boot_id"], 0
                elif usable_sample(frame) and frame["boot_id"] == boot and frame["seq"] > last:
                    last = frame["seq"]
                    rows.setdefault((boot, last), line)
    return rows


# ---- hostile streams ----


def _dump(frame: JSON) -> str:
    return json.dumps(frame, separators=(",", ":"))


@st.composite
def hostile_line(draw: st.DrawFn, real: RealStream) -> str:
    """One line: a real frame, a real frame edited in one field, mutated, damaged, or garbage."""
    base = copy.deepcopy(draw(st.sampled_from([real.hello, *real.samples])))
    kind = draw(st.sampled_from(["real", "edit", "edit", "mutate", "damage", "garbage", "raw"]))
    if kind == "real":
        return _dump(base)
    if kind == "edit" and base["type"] == "sample":
        key = draw(st.sampled_from(SAMPLE_KEYS))
        base[key] = draw(_field_value(key, base))
        return _dump(base)
    if kind in ("edit", "mutate"):
        return draw(mutated(base)).encode().decode("utf-8", "replace")
    if kind == "damage":
        return draw(damaged(_dump(base).encode())).decode("utf-8", "replace")
    if kind == "raw":
        return draw(raw_fragments())
    return draw(hostile_bytes()).decode("utf-8", "replace")


def _field_value(key: str, frame: dict[str, JSON]) -> st.SearchStrategy[JSON]:
    """Values at and past the edge of what the field allows."""
    if key in ("seq", "t_wall_ns", "t_mono_ns"):
        return ints() | st.booleans() | st.just(float(frame[key])) | st.just(str(frame[key]))
    if key == "boot_id":
        return st.sampled_from(["", None, 5, "other-boot", frame["boot_id"]])
    if key == "interval_s":
        return st.sampled_from([0, -0.01, 1e-300, 1e308, 0.01, "0.01", None, True])
    if key == "memory":
        used = ints() | st.none() | st.just("x") | st.just(1.5)
        return st.none() | st.just("x") | st.just([]) | used.map(lambda u: {"used_bytes": u})
    if key == "sensors":
        return _sensors_value(frame)
    gpu = copy.deepcopy(frame["gpus"][0]) if frame["gpus"] else {"index": 0, "uuid": "GPU-x"}
    value = st.sampled_from([None, 0, -1.0, 1e308, -1e308, 5e-324, 2**63 - 1, True, "1"])
    edited = st.tuples(st.sampled_from(["index", "uuid", "power_w", "energy_j", "util_ratio"]), value).map(
        lambda kv: [{**gpu, kv[0]: kv[1]}]
    )
    return st.one_of(edited, st.just([5]), st.just([{**gpu, "uuid": None}]), st.just({}), st.just([gpu, gpu]))


def _sensors_value(frame: dict[str, JSON]) -> st.SearchStrategy[JSON]:
    sensors = frame.get("sensors")
    entry = (
        copy.deepcopy(sensors[0])
        if isinstance(sensors, list) and sensors
        else {"sensor": "s", "kind": "system"}
    )
    value = st.sampled_from(
        [None, 0, -1.0, 1e308, True, "1", "", "x" * 64, "x" * 65, "system", "wall", [], {}]
    )
    keys = st.sampled_from(["sensor", "kind", "source", "power_w", "energy_j"])
    edited = st.tuples(keys, value).map(lambda kv: [{**entry, kv[0]: kv[1]}])
    return st.one_of(
        edited,
        st.just(None),
        st.just([5]),
        st.just({}),
        st.just([entry] * 129),
        st.just([{k: v for k, v in entry.items() if k != "source"}]),
    )


@st.composite
def hostile_streams(draw: st.DrawFn, real: RealStream) -> list[list[str]]:
    """One or two connections (a redial resends what the first sent), each a list of messages."""

    def connection() -> list[str]:
        lines = [draw(hostile_line(real)) for _ in range(draw(st.integers(0, 24)))]
        if draw(st.booleans()):  # most real streams open with their hello
            lines.insert(0, _dump(real.hello))
        if draw(st.booleans()):
            lines = draw(st.permutations(lines))
        cuts = sorted(draw(st.lists(st.integers(0, len(lines)), max_size=4)))
        bounds = [0, *cuts, len(lines)]
        return ["\n".join(lines[a:b]) for a, b in itertools.pairwise(bounds)]

    first = connection()
    return [first, connection() if draw(st.booleans()) else first]


# ---- the target ----

CASES = itertools.count()


Kept = tuple[int, int, float, int]  # what the store keeps of a sample's own fields: clocks, interval, memory


def stored_rows(store: Store, node: str) -> dict[tuple[str, int], Kept]:
    db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT boot_id, data FROM sample_blocks WHERE node = ?", (node,)).fetchall()
    finally:
        db.close()
    out = {}
    for boot, data in rows:
        c = decode_blob(data).columns
        for seq, *kept in zip(*(c[k].tolist() for k in ("seq", *KEPT)), strict=True):
            assert (boot, seq) not in out, "a sample stored twice"
            out[(boot, seq)] = tuple(kept)
    return out


KEPT = ("t_wall_ns", "t_mono_ns", "interval_s", "mem_used_bytes")


def kept(rows: dict[tuple[str, int], str]) -> dict[tuple[str, int], Kept]:
    """What the store must hold of each expected sample line."""
    return {key: kept_of(line) for key, line in rows.items()}


def kept_of(line: str) -> Kept:
    frame = parse_line(line, finite=False)
    used = (frame.get("memory") or {}).get("used_bytes")
    return frame["t_wall_ns"], frame["t_mono_ns"], float(frame["interval_s"]), -1 if used is None else used


@fuzz_settings()
@given(data=st.data())
def test_hostile_streams_store_exactly_the_usable_samples(
    store: Store, real_stream: RealStream, data: st.DataObject
) -> None:
    streams = data.draw(hostile_streams(real_stream), label="connections")
    node = f"n{next(CASES)}"
    state = LinkState(node=node, transport="fuzz")
    with bounded():
        for messages in streams:
            ingest = StreamIngest(store, state)
            for message in messages:
                ingest.feed(message)
                ingest.flush()

    expected = expected_rows(streams)
    event("samples stored" if expected else "nothing storable")
    assert stored_rows(store, node) == kept(expected)
    assert state.last_seq in {0, *(seq for _boot, seq in expected)}
    rejected = sum(state.frames_rejected.values())
    assert set(state.frames_rejected) <= {
        "too_long",
        "not_json",
        "invalid",
        "before_hello",
        "foreign_boot",
        "seq_not_forward",
    }
    assert rejected >= 0
    if expected:
        _check_export(store, node, expected)


def _check_export(store: Store, node: str, rows: dict[tuple[str, int], str]) -> None:
    """Place every boot by a probe round that fits its first stored sample, export a run over the samples
    and look for anything invented: a non-finite number, or a figure no sample could give."""
    frames = [parse_line(line, finite=False) for line in rows.values()]
    for boot in {f["boot_id"] for f in frames}:
        first = min((f for f in frames if f["boot_id"] == boot), key=lambda f: f["seq"])
        offset = ClockOffset(0, 1_000_000, 5, 8, mono_offset_ns=first["t_wall_ns"] - first["t_mono_ns"])
        store.add_offset(node, boot, offset, t_ns=first["t_wall_ns"])
    walls = [f["t_wall_ns"] for f in frames]
    # a run spans the samples, as far as a run can: its times come from the coordinator's own clock
    start, end = (min(max(t, EPOCH_MIN_NS), EPOCH_END_NS - 1) for t in (min(walls), max(walls) + 1))
    run = store.create_run(RunRow(f"run-{node}", "fuzz", start, None, 0.01, 0.5, "run"))
    store.end_run(run.id, end)
    with bounded():
        export = export_run(store, run.id, [node], time.time_ns)
    json.dumps(plain(export), allow_nan=False)  # raises on NaN or an infinity anywhere
    (entry,) = export["nodes"]
    ceiling = MAX_PLAUSIBLE_GPU_W * max(1, len(entry["gpus"]))
    figures = [*entry["power_w"].values(), *(g["power_w_gated_mean"] for g in entry["gpus"])]
    for value in figures:
        assert value is None or -ceiling <= value <= ceiling, f"an implausible power figure: {value}"


def test_the_oracle_and_the_decoder_agree_on_the_real_frames(store: Store, real_stream: RealStream) -> None:
    """The real stream, unchanged, is stored whole: the oracle is not vacuous."""
    lines = [_dump(real_stream.hello), *(_dump(s) for s in real_stream.samples)]
    node = "n-real"
    ingest = StreamIngest(store, LinkState(node=node, transport="fuzz"))
    ingest.feed("\n".join(lines))
    ingest.flush()
    assert len(expected_rows([["\n".join(lines)]])) == len(real_stream.samples) == 12
    assert stored_rows(store, node) == kept(expected_rows([["\n".join(lines)]]))


def test_a_hello_with_null_parts_still_exports(store: Store, real_stream: RealStream) -> None:
    """The nightly run's find: a hello with ``"hardware": null`` made the node's export a 500."""
    hello = {**real_stream.hello, "hardware": None, "capabilities": None, "memory_model": None}
    _stored_and_exported(store, "n-null-hello", hello, real_stream.samples)


@pytest.mark.parametrize(
    ("case", "gpus"),
    [
        ("list-uuid", [{"uuid": [], "max_sm_clock_hz": 3.0e9}]),
        ("object", {"uuid": "x"}),
        ("int", 5),
        ("items", [7, None]),
    ],
)
def test_a_hello_with_odd_gpu_facts_still_exports(
    store: Store, real_stream: RealStream, case: str, gpus: JSON
) -> None:
    """The nightly run's find after the clock signals came in: a hello whose ``hardware.gpus[].uuid`` was a
    list made the node's export a 500 (the maximum SM clocks are looked up by UUID)."""
    hello = {**real_stream.hello, "hardware": {**real_stream.hello["hardware"], "gpus": gpus}}
    _stored_and_exported(store, f"n-odd-gpus-{case}", hello, real_stream.samples)


def _stored_and_exported(
    store: Store, node: str, hello: dict[str, JSON], samples: list[dict[str, JSON]]
) -> None:
    """The real samples behind this hello are all stored, and the node's export answers."""
    message = "\n".join([_dump(hello), *(_dump(s) for s in samples)])
    ingest = StreamIngest(store, LinkState(node=node, transport="fuzz"))
    ingest.feed(message)
    ingest.flush()
    rows = expected_rows([[message]])
    assert stored_rows(store, node) == kept(rows) and len(rows) == 12
    _check_export(store, node, rows)
