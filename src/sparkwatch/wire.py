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
from typing import Any, NamedTuple, NoReturn

import orjson

from sparkwatch_agent.shared.protocol import FRAME_GAP, FRAME_HELLO, FRAME_SAMPLE, FRAME_TIME, MAX_INTERVAL_S

#: Largest seq and timestamp the store keeps (SQLite integers are 64-bit signed).
INT64_MAX = 2**63 - 1
#: No agent frame comes near this (a GB10 sample is ~700 characters, eight GPUs ~3000): longer is refused
#: before it is parsed.
MAX_LINE_CHARS = 256 * 1024
#: A WebSocket message holds at most a batch of 500 frames.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class GpuValues(NamedTuple):
    """One GPU's values in a sample: what the core measures with (None = not known for this sample)."""

    gpu_index: int  # not "index": that name is tuple.index
    uuid: str
    power_w: float | None
    energy_j: float | None
    util_ratio: float | None


class SensorValues(NamedTuple):
    """One power channel of a node in a sample (hwmon, or the sim's spbm): a domain of its node."""

    sensor: str
    kind: str  # one of SENSOR_KINDS
    source: str  # hwmon:<chip>, sim:spbm
    power_w: float | None
    energy_j: float | None  # the agent's wrap-aware count since it started, J


#: What a sensor may say it measures (docs/agent.md, *hwmon sensors*).
SENSOR_KINDS = frozenset({"system", "module", "cpu", "gpu", "other"})
#: A name or source longer than this, or more channels than MAX_SENSORS, is not a real agent's.
MAX_SENSOR_TEXT = 64
MAX_SENSORS = 128
#: The source of a channel from an agent that predates sources (all of them were hwmon's).
LEGACY_SENSOR_SOURCE = "hwmon"


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
    """The usable frames of one message (or stdout chunk), in order, and the lines that were not."""
    frames: list[Frame] = []
    rejected: list[Rejected] = []
    for line, data in _parsed_lines(text, rejected):
        try:
            frame = decode_frame(line, data)
        except FrameError as exc:
            seq = data.get("seq")
            rejected.append(Rejected("invalid", str(exc), seq if type(seq) is int else None))
            continue
        if frame is not None:
            frames.append(frame)
    return frames, rejected


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


def _parsed_lines(text: str, rejected: list[Rejected]) -> list[tuple[str, dict[str, Any]]]:
    """(line, object) pairs, one parse per line (as fast per line as one parse of the message joined into
    an array, and a line can never lend its text to another); a line longer than ``MAX_LINE_CHARS`` or that
    is not a JSON object goes to ``rejected`` unparsed."""
    text = text.strip("\n")
    if not text:
        return []
    lines = text.split("\n")
    out = []
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            rejected.append(Rejected("too_long", f"a line of {len(line)} characters", None))
            continue
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            out.append((line, data))
        elif line.strip():
            rejected.append(Rejected("not_json", f"not a JSON object: {line[:80]!r}", None))
    return out


def _sample(line: str, d: dict[str, Any]) -> SampleFrame:
    """Checked the fast way first (this runs for every sample ingested; JSON numbers parsed by orjson are
    always finite), the slow way only to say what is wrong."""
    seq: Any = d.get("seq")
    boot: Any = d.get("boot_id")
    t_wall: Any = d.get("t_wall_ns")
    t_mono: Any = d.get("t_mono_ns")
    interval: Any = d.get("interval_s")
    memory: Any = d.get("memory")
    gpus: Any = d.get("gpus", [])
    sensors: Any = d.get("sensors", [])
    used: Any = memory.get("used_bytes") if type(memory) is dict else None
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
        and (used is None or (type(used) is int and 0 <= used <= INT64_MAX))
        and type(gpus) is list
        and type(sensors) is list
        and len(sensors) <= MAX_SENSORS
    ):
        _explain_sample(d)
    if sensors and not _sensors_ok(sensors):
        for entry in sensors:
            sensor_values(entry)  # raises the FrameError that names what is wrong
    gpu_values = tuple([_gpu(g) for g in gpus])
    return SampleFrame(
        seq, boot, t_wall, t_mono, float(interval), used, gpu_values, line
    )  # positional: faster


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
    if memory is not None:
        _optional_int(memory, "used_bytes")
    if not isinstance(d.get("gpus", []), list):
        raise FrameError("gpus must be a list")
    sensors = d.get("sensors", [])
    if not isinstance(sensors, list) or len(sensors) > MAX_SENSORS:
        raise FrameError(f"sensors must be a list of at most {MAX_SENSORS}")
    raise FrameError("malformed sample")  # not reached while the checks above mirror the fast path


def _value(value: Any) -> bool:
    """A JSON number or null, as a GPU value may be."""
    return value is None or type(value) is float or type(value) is int


def _sensors_ok(sensors: list[Any]) -> bool:
    """The fast check of every entry (this runs per ingested sample; nothing is built)."""
    for e in sensors:
        if type(e) is not dict:
            return False
        name, source, kind = e.get("sensor"), e.get("source", LEGACY_SENSOR_SOURCE), e.get("kind")
        power, energy = e.get("power_w"), e.get("energy_j")
        if not (
            type(name) is str
            and 0 < len(name) <= MAX_SENSOR_TEXT
            and type(source) is str
            and 0 < len(source) <= MAX_SENSOR_TEXT
            and type(kind) is str
            and kind in SENSOR_KINDS
            and (power is None or type(power) is float or type(power) is int)
            and (energy is None or type(energy) is float or type(energy) is int)
        ):
            return False
    return True


def sensor_values(entry: Any) -> SensorValues:
    """One entry of a sample's ``sensors``, checked; a FrameError says what is wrong."""
    if not isinstance(entry, dict):
        raise FrameError("each of sensors must be an object")
    name, kind = entry.get("sensor"), entry.get("kind")
    source = entry.get("source", LEGACY_SENSOR_SOURCE)
    for key, text in (("sensor", name), ("source", source)):
        if type(text) is not str or not 0 < len(text) <= MAX_SENSOR_TEXT:
            raise FrameError(f"sensor {key} must be a string of 1 to {MAX_SENSOR_TEXT} characters")
    if type(kind) is not str or kind not in SENSOR_KINDS:
        raise FrameError(f"sensor kind must be one of {', '.join(sorted(SENSOR_KINDS))}")
    power, energy = entry.get("power_w"), entry.get("energy_j")
    if not (_value(power) and _value(energy)):
        raise FrameError("sensor power_w and energy_j must be numbers or null")
    return SensorValues(
        str(name),
        str(kind),
        str(source),
        None if power is None else float(power),
        None if energy is None else float(energy),
    )


def _gpu(g: Any) -> GpuValues:
    if type(g) is dict:
        index, uuid = g.get("index"), g.get("uuid")
        power, energy, util = g.get("power_w"), g.get("energy_j"), g.get("util_ratio")
        if (
            type(index) is int
            and 0 <= index <= INT64_MAX
            and type(uuid) is str
            and uuid
            and _value(power)
            and _value(energy)
            and _value(util)
        ):
            return GpuValues(
                index,
                uuid,
                None if power is None else float(power),
                None if energy is None else float(energy),
                None if util is None else float(util),
            )
    if not isinstance(g, dict):
        raise FrameError("each of gpus must be an object")
    return GpuValues(
        gpu_index=_int(g, "index", 0),
        uuid=_str(g, "uuid"),
        power_w=_number(g, "power_w"),
        energy_j=_number(g, "energy_j"),
        util_ratio=_number(g, "util_ratio"),
    )


def _int(d: Mapping[str, Any], key: str, minimum: int) -> int:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrameError(f"{key} must be an integer")
    if not minimum <= value <= INT64_MAX:
        raise FrameError(f"{key} {value} is outside [{minimum}, 2^63)")
    return value


def _optional_int(d: Mapping[str, Any], key: str) -> int | None:
    return None if d.get(key) is None else _int(d, key, 0)


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


def latest_summary(sample: SampleFrame) -> dict[str, Any]:
    """The newest sample in brief, for live displays: power summed over the node's GPUs (None if any is
    unknown), the highest utilisation, memory used."""
    powers = [g.power_w for g in sample.gpus]
    utils = [g.util_ratio for g in sample.gpus if g.util_ratio is not None]
    known = [p for p in powers if p is not None]
    return {
        "t_wall_ns": sample.t_wall_ns,
        "interval_s": sample.interval_s,
        "power_w": sum(known) if powers and len(known) == len(powers) else None,
        "util_ratio": max(utils) if utils else None,
        "memory_used_bytes": sample.mem_used_bytes,
    }
