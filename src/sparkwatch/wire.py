"""The agent's stream as the coordinator reads it: the one decoder of its frames (sample, gap, hello, time
reply), their validation, and readers of what a hello says.

Every line is JSON; a message may hold many lines. A line that is not a frame we can use is handed back as
``Rejected`` (the link counts and logs it) — never stored, never fatal to the link. Frames of a type this
coordinator does not know are skipped quietly: a newer agent may send them.
Imports nothing else of sparkwatch (only the frame names it shares with the agent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, NamedTuple, NoReturn, cast, get_args

import orjson
from msgspec import Meta, MsgspecError, Raw, Struct, field
from msgspec.json import Decoder

from sparkwatch_agent.shared.protocol import FRAME_GAP, FRAME_HELLO, FRAME_SAMPLE, FRAME_TIME, MAX_INTERVAL_S

#: Largest seq and timestamp the store keeps (SQLite integers are 64-bit signed).
INT64_MAX = 2**63 - 1
#: No agent frame comes near this (a GB10 sample is ~700 characters, eight GPUs ~3000): longer is refused
#: before it is parsed.
MAX_LINE_CHARS = 256 * 1024
#: A WebSocket message holds at most a batch of 500 frames.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


#: What a sensor may say it measures (docs/agent.md, *hwmon sensors*).
SensorKind = Literal["system", "module", "cpu", "gpu", "other"]
SENSOR_KINDS = frozenset(get_args(SensorKind))
#: A name or source longer than this, or more channels than MAX_SENSORS, is not a real agent's.
MAX_SENSOR_TEXT = 64
MAX_SENSORS = 128
#: The source of a channel from an agent that predates sources (all of them were hwmon's).
LEGACY_SENSOR_SOURCE = "hwmon"

_Count = Annotated[int, Meta(ge=0, le=INT64_MAX)]
_Text = Annotated[str, Meta(min_length=1, max_length=MAX_SENSOR_TEXT)]


class GpuValues(Struct, frozen=True, gc=False):
    """One GPU's values in a sample: what the core measures with (None = not known for this sample), and
    its clock signals (read leniently: one of the wrong type is unknown). Untracked by the collector
    (``gc=False``: numbers and strings only): one is made per GPU and sample, and its passes cost ingest."""

    gpu_index: _Count = field(name="index")  # not "index": a name too common to grep
    uuid: Annotated[str, Meta(min_length=1)]
    power_w: float | None = None
    energy_j: float | None = None
    util_ratio: float | None = None
    # a signal of another type sends the line to the slow path, which reads it as unknown rather than refuse
    # the sample (a number no double holds is refused by both paths, as anywhere in a field that is read)
    sm_clock_hz: float | None = None
    temperature_c: float | None = None
    clock_event_reasons: int | None = None


class SensorValues(Struct, frozen=True, gc=False):
    """One power channel of a node in a sample (hwmon, or the sim's spbm): a domain of its node."""

    sensor: _Text
    kind: SensorKind
    source: _Text = LEGACY_SENSOR_SOURCE  # hwmon:<chip>, sim:spbm
    power_w: float | None = None
    energy_j: float | None = None  # the agent's wrap-aware count since it started, J


class _Memory(Struct, gc=False):
    used_bytes: _Count | None = None  # one out of bounds (an older agent's) sends the line to the slow path
    page_cache_bytes: Raw = Raw()  # Cached + SReclaimable: unparsed, a bad one is unknown (page_cache)


def page_cache(memory: _Memory) -> int | None:
    """The page cache of a sample msgspec took: a JSON integer within int64, else unknown (read leniently,
    as the clock signals are: a bad one costs the sample nothing, as it did while it was not read)."""
    raw = bytes(memory.page_cache_bytes)
    return int(raw) if raw.isdigit() and len(raw) <= 19 and int(raw) <= INT64_MAX else None


class _Sample(Struct, gc=False):
    """A sample as docs/agent.md defines it, checked while it is parsed (msgspec): the fields the
    coordinator reads, with every bound ``_sample`` checks; the agent's other fields are skipped. ``type``
    is a field, not a msgspec tag: every "type" key a line repeats is checked, so a line whose last "type"
    is another frame's fails here and orjson (the last key wins) decides what it is. ``gpus`` and
    ``sensors`` are decoded as the tuples a ``SampleFrame`` holds, so they are not copied again."""

    type: Literal["sample"]
    seq: Annotated[int, Meta(gt=0, le=INT64_MAX)]
    boot_id: Annotated[str, Meta(min_length=1)]
    t_wall_ns: _Count
    t_mono_ns: _Count
    interval_s: Annotated[float, Meta(gt=0, le=MAX_INTERVAL_S)]
    memory: _Memory | None = None
    gpus: tuple[GpuValues, ...] = ()
    sensors: Annotated[tuple[SensorValues, ...], Meta(max_length=MAX_SENSORS)] = ()


#: Samples are decoded by this first. A field it does not read is skipped unparsed: a number in one that
#: no double holds (1e400) does not refuse the sample, where the slow path's orjson refuses the line.
_SAMPLE = Decoder(_Sample)


class SampleFrame(NamedTuple):
    """One sample, decoded and checked (a NamedTuple: one is made per ingested sample)."""

    seq: int
    boot_id: str
    t_wall_ns: int  # the agent's wall clock
    t_mono_ns: int  # the agent's monotonic clock (per boot)
    interval_s: float
    mem_used_bytes: int | None
    gpus: tuple[GpuValues, ...]
    raw: str  # the line as received
    sensors: tuple[SensorValues, ...] = ()
    mem_page_cache_bytes: int | None = None


class GapFrame(NamedTuple):
    """The agent's ring dropped ``missing`` samples after seq ``after`` before we read them."""

    after: int
    missing: int


class HelloFrame(NamedTuple):
    boot_id: str
    data: dict[str, Any]  # the whole hello, as the agent sent it (stored, shown in /v1/nodes)


class TimeFrame(NamedTuple):
    """A clock-probe reply on the stdio stream."""

    id: int
    t_wall_ns: int
    boot_id: str
    t_mono_ns: int | None = None


Frame = SampleFrame | GapFrame | HelloFrame | TimeFrame


class FrameError(ValueError):
    """A frame whose content cannot be used; the message says which field."""


class Rejected(NamedTuple):
    """A line that is not a frame we can use: why (a short, bounded word) and what was wrong."""

    reason: str  # "too_long", "not_json" or "invalid"
    detail: str
    seq: int | None  # when the line said one


def decode_lines(text: str) -> tuple[list[Frame], list[Rejected]]:
    """The usable frames of one message (or stdout chunk), in order, and the lines that were not.

    A sample is parsed and checked in one step by msgspec (5x faster than parsing and checking it here:
    ingest's largest cost); any line that step does not take — another frame type, a sample with something
    wrong — is parsed by orjson and checked field by field, which also says what is wrong."""
    frames: list[Frame] = []
    rejected: list[Rejected] = []
    text = text.strip("\n")
    decode = _SAMPLE.decode
    append = frames.append
    for line in text.split("\n") if text else ():
        if len(line) > MAX_LINE_CHARS:
            rejected.append(Rejected("too_long", f"a line of {len(line)} characters", None))
            continue
        try:
            m = decode(line)
        except (MsgspecError, UnicodeEncodeError, RecursionError):
            _slow_line(line, frames, rejected)  # a lone surrogate, deep nesting: orjson says
            continue
        used, cache = (None, None) if (mem := m.memory) is None else (mem.used_bytes, page_cache(mem))
        append(
            SampleFrame(
                m.seq, m.boot_id, m.t_wall_ns, m.t_mono_ns, m.interval_s, used, m.gpus, line, m.sensors, cache
            )
        )
    return frames, rejected


def _slow_line(line: str, frames: list[Frame], rejected: list[Rejected]) -> None:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        if line.strip():
            rejected.append(Rejected("not_json", f"not a JSON object: {line[:80]!r}", None))
        return
    try:
        frame = decode_frame(line, data)
    except FrameError as exc:
        seq = data.get("seq")
        rejected.append(Rejected("invalid", str(exc), seq if type(seq) is int else None))
        return
    if frame is not None:
        frames.append(frame)


def decode_frame(line: str, data: dict[str, Any]) -> Frame | None:
    """One parsed line as a frame; ``None`` for a type we do not know; FrameError when it is unusable."""
    kind = data.get("type")
    if kind == FRAME_SAMPLE:
        return _sample(line, data)
    if kind == FRAME_GAP:
        return GapFrame(_int(data, "after", 0), _int(data, "missing", 1))
    if kind == FRAME_HELLO:
        return _hello(data)
    if kind == FRAME_TIME:
        return time_reply(data, _int(data, "id", 0))
    return None


#: The parts of a hello the coordinator reads (the export, /v1/nodes, `nodes check`, `hardware`), with the
#: JSON type each must have when present: a hello that breaks one is refused whole, so no reader meets it.
HELLO_SHAPE: Mapping[str, tuple[tuple[type, ...], str]] = MappingProxyType(
    {
        "memory_model": ((str,), "a string"),
        "agent_version": ((str,), "a string"),
        "interval_s": ((int, float), "a number"),
        "hardware": ((dict,), "an object"),
        "capabilities": ((dict,), "an object"),
    }
)
HELLO_OBJECTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"hardware": ("lmx", "host"), "capabilities": ("host_memory",)}
)


def _hello(data: dict[str, Any]) -> HelloFrame:
    boot_id = _str(data, "boot_id")
    for key, (types, word) in HELLO_SHAPE.items():
        value = data.get(key)
        if value is not None and (type(value) is bool or not isinstance(value, types)):
            raise FrameError(f"hello {key} must be {word}")
    for key, inner in HELLO_OBJECTS.items():
        part = data.get(key) or {}
        for name in inner:
            if part.get(name) is not None and not isinstance(part[name], dict):
                raise FrameError(f"hello {key}.{name} must be an object")
    gpus = (data.get("capabilities") or {}).get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus)):
        raise FrameError("hello capabilities.gpus must be a list of objects")
    return HelloFrame(boot_id, data)


def time_reply(data: Any, probe_id: int = 0) -> TimeFrame:
    """A clock probe's answer: a ``time`` frame on the stdio stream, or the body of ``GET /v1/time``."""
    if not isinstance(data, dict):
        raise FrameError("a time reply must be an object")
    mono = None if data.get("t_mono_ns") is None else _int(data, "t_mono_ns", 0)
    return TimeFrame(probe_id, _int(data, "t_wall_ns", 0), _str(data, "boot_id"), mono)


def _sample(line: str, d: dict[str, Any]) -> SampleFrame:
    """A sample msgspec did not take (or one read by ``decode_frame`` directly), checked field by field
    (JSON numbers parsed by orjson are always finite); a FrameError says what is wrong."""
    seq: Any = d.get("seq")
    boot: Any = d.get("boot_id")
    t_wall: Any = d.get("t_wall_ns")
    t_mono: Any = d.get("t_mono_ns")
    interval: Any = d.get("interval_s")
    memory: Any = d.get("memory")
    gpus: Any = d.get("gpus", [])
    sensors: Any = d.get("sensors", [])
    used: Any = memory.get("used_bytes") if type(memory) is dict else None
    if type(used) is int and not 0 <= used <= INT64_MAX:
        used = None  # an older agent's MemTotal − MemAvailable below 0: unknown memory, the power kept
    cache: Any = memory.get("page_cache_bytes") if type(memory) is dict else None
    cache = cache if type(cache) is int and 0 <= cache <= INT64_MAX else None  # leniently: see _Memory
    if not (
        type(seq) is int
        and 0 < seq <= INT64_MAX
        and type(boot) is str
        and boot
        and type(t_wall) is int
        and 0 <= t_wall <= INT64_MAX
        and type(t_mono) is int
        and 0 <= t_mono <= INT64_MAX
        and (type(interval) is float or type(interval) is int)
        and 0 < interval <= MAX_INTERVAL_S
        and (memory is None or type(memory) is dict)
        and (used is None or type(used) is int)  # in bounds, or made None above
        and type(gpus) is list
        and type(sensors) is list
        and len(sensors) <= MAX_SENSORS
    ):
        _explain_sample(d)
    channels = tuple(
        sensor_values(entry) for entry in sensors
    )  # raises the FrameError that names what is wrong
    gpu_values = tuple([_gpu(g) for g in gpus])
    return SampleFrame(seq, boot, t_wall, t_mono, float(interval), used, gpu_values, line, channels, cache)


def _explain_sample(d: dict[str, Any]) -> NoReturn:
    """Raise the FrameError that says which of a sample's fields is wrong."""
    _int(d, "seq", 1)
    _str(d, "boot_id")
    _int(d, "t_wall_ns", 0)
    _int(d, "t_mono_ns", 0)
    interval_s = _number(d, "interval_s")
    if interval_s is None or not 0 < interval_s <= MAX_INTERVAL_S:
        raise FrameError(f"interval_s must be a number in (0, {MAX_INTERVAL_S:g}] s")
    memory = d.get("memory")
    if memory is not None and not isinstance(memory, dict):
        raise FrameError("memory must be an object or null")
    used = None if memory is None else memory.get("used_bytes")
    if used is not None and type(used) is not int:
        raise FrameError("used_bytes must be an integer")
    if not isinstance(d.get("gpus", []), list):
        raise FrameError("gpus must be a list")
    sensors = d.get("sensors", [])
    if not isinstance(sensors, list) or len(sensors) > MAX_SENSORS:
        raise FrameError(f"sensors must be a list of at most {MAX_SENSORS}")
    raise FrameError("malformed sample")  # not reached while the checks above mirror the fast path


def sensor_values(entry: Any) -> SensorValues:
    """One entry of a sample's ``sensors``, checked; a FrameError says what is wrong."""
    if not isinstance(entry, dict):
        raise FrameError("each of sensors must be an object")
    name, kind = entry.get("sensor"), entry.get("kind")
    source = entry.get("source", LEGACY_SENSOR_SOURCE)
    for key, text in (("sensor", name), ("source", source)):
        if type(text) is not str or not 0 < len(text) <= MAX_SENSOR_TEXT:
            what = "name" if key == "sensor" else key
            raise FrameError(f"a sensor's {what} must be a string of 1 to {MAX_SENSOR_TEXT} characters")
    if type(kind) is not str or kind not in SENSOR_KINDS:
        raise FrameError(f"sensor kind must be one of {', '.join(sorted(SENSOR_KINDS))}")
    values = (entry.get("power_w"), entry.get("energy_j"))
    if not all(v is None or type(v) is float or type(v) is int for v in values):  # JSON numbers or null
        raise FrameError("sensor power_w and energy_j must be numbers or null")
    power, energy = (None if v is None else float(v) for v in values)
    return SensorValues(str(name), cast(SensorKind, kind), str(source), power, energy)


def _gpu(g: Any) -> GpuValues:
    if not isinstance(g, dict):
        raise FrameError("each of gpus must be an object")
    return GpuValues(
        _int(g, "index", 0),
        _str(g, "uuid"),
        _number(g, "power_w"),
        _number(g, "energy_j"),
        _number(g, "util_ratio"),
        signal_float(g.get("sm_clock_hz")),
        signal_float(g.get("temperature_c")),
        signal_int(g.get("clock_event_reasons")),
    )


def signal_float(value: Any) -> float | None:
    """A GPU's clock signal: a number a double holds, else unknown (the export flags throttling with it,
    and a bad one must not cost the sample's power)."""
    if type(value) is float:
        return value
    if type(value) is int:
        try:
            return float(value)
        except OverflowError:
            return None
    return None


def signal_int(value: Any) -> int | None:
    return value if type(value) is int else None


def _int(d: Mapping[str, Any], key: str, minimum: int) -> int:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError(f"{key} must be an integer")
    if not minimum <= value <= INT64_MAX:
        raise FrameError(f"{key} {value} is outside [{minimum}, 2^63)")
    return value


def _number(d: Mapping[str, Any], key: str) -> float | None:
    """A finite number, or None for null/absent (unknown)."""
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FrameError(f"{key} must be a finite number or null")
    return float(value)


def _str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise FrameError(f"{key} must be a non-empty string")
    return value
