"""The coordinator's one decoder of agent frames: what it keeps, what it skips, what a hello says."""

from __future__ import annotations

import json
import pathlib

import msgspec
import orjson
import pytest

from sparkwatch.hello_facts import announced_gpus, capability_gaps, unsupported_fields
from sparkwatch.links.state import latest_summary
from sparkwatch.wire import (
    MAX_LINE_CHARS,
    MAX_SENSOR_TEXT,
    MAX_SENSORS,
    GapFrame,
    GpuValues,
    HelloFrame,
    SampleFrame,
    TimeFrame,
    decode_lines,
    sensor_values,
)
from sparkwatch_agent.hardware.hwmon import HwmonSensors
from sparkwatch_agent.hardware.hwmon_discovery import MAX_CHANNELS, MAX_TEXT_CHARS

GOOD = {
    "type": "sample",
    "seq": 7,
    "boot_id": "b1",
    "t_wall_ns": 1_800_000_000_000_000_000,
    "t_mono_ns": 5,
    "interval_s": 0.1,
    "gpus": [{"index": 0, "uuid": "GPU-a", "power_w": 50.5, "energy_j": 100, "util_ratio": 0.9}],
    "memory": {"used_bytes": 42},
    "sensors": [],
}


def line(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


def test_a_sample_decodes_to_typed_values_with_its_line() -> None:
    text = line()
    (frame,), rejected = decode_lines(text)
    assert rejected == []
    assert frame == SampleFrame(
        seq=7,
        boot_id="b1",
        t_wall_ns=GOOD["t_wall_ns"],
        t_mono_ns=5,
        interval_s=0.1,
        mem_used_bytes=42,
        gpus=(GpuValues(0, "GPU-a", 50.5, 100.0, 0.9),),
        raw=text,
    )


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"memory": "x"}, "memory must be an object"),
        ({"gpus": [5]}, "each of gpus must be an object"),
        ({"gpus": [{"index": 0, "power_w": 1.0}]}, "uuid must be a non-empty string"),
        ({"seq": 2**63}, "seq 9223372036854775808 is outside"),
        ({"seq": 2**64}, "seq must be an integer"),  # orjson reads it as a float
        ({"seq": 0}, "seq 0 is outside"),
        ({"seq": True}, "seq must be an integer"),
        ({"boot_id": None}, "boot_id must be a non-empty string"),
        ({"interval_s": "x"}, "interval_s must be a finite number"),
        ({"interval_s": 0}, "interval_s must be a number in (0, 3600] s"),
        ({"interval_s": 1e308}, "interval_s must be a number in (0, 3600] s"),
        ({"sensors": None}, "sensors must be a list of at most 128"),
        ({"sensors": [{"sensor": "s", "kind": "system"}] * 129}, "sensors must be a list of at most 128"),
        ({"sensors": [5]}, "each of sensors must be an object"),
        ({"sensors": [{"sensor": "", "kind": "system"}]}, "a sensor's name must be a string of 1 to 64"),
        ({"sensors": [{"sensor": "s", "kind": "system", "source": "x" * 65}]}, "a sensor's source must be"),
        ({"sensors": [{"sensor": "s", "kind": "wall"}]}, "sensor kind must be one of"),
        ({"sensors": [{"sensor": "s", "kind": ["system"]}]}, "sensor kind must be one of"),
        ({"sensors": [{"sensor": "s", "kind": "gpu", "power_w": True}]}, "sensor power_w and energy_j"),
        ({"t_wall_ns": -1}, "t_wall_ns -1 is outside"),
        ({"gpus": [{"index": 0, "uuid": "GPU-a", "power_w": "hot"}]}, "power_w must be a finite number"),
        ({"memory": {"used_bytes": 1.5}}, "used_bytes must be an integer"),
    ],
)
def test_a_bad_sample_is_skipped_and_named_by_seq_and_field(changes: dict[str, object], why: str) -> None:
    text = "\n".join([line(seq=1), line(**changes), line(seq=3)])
    frames, rejected = decode_lines(text)
    assert [f.seq for f in frames if isinstance(f, SampleFrame)] == [1, 3]
    (bad,) = rejected
    assert bad.reason == "invalid" and why in bad.detail
    seq = changes.get("seq", 7)
    assert bad.seq == (seq if type(seq) is int and seq < 2**64 else None)  # orjson reads 2^64 as a float


def test_the_page_cache_is_read_on_both_paths() -> None:
    """msgspec's and the field-by-field path (a GPU's signal of another type sends a line there)."""
    memory = {"used_bytes": 42, "page_cache_bytes": 7 * 2**30}
    slow = {"index": 0, "uuid": "GPU-a", "power_w": 50.5, "sm_clock_hz": "fast"}
    frames, rejected = decode_lines("\n".join([line(memory=memory), line(seq=8, memory=memory, gpus=[slow])]))
    assert rejected == [] and [f.mem_page_cache_bytes for f in frames] == [7 * 2**30] * 2  # type: ignore[union-attr]
    (frame,), _ = decode_lines(line(memory={"used_bytes": 42}))
    assert isinstance(frame, SampleFrame) and frame.mem_page_cache_bytes is None  # an older agent's: unknown


@pytest.mark.parametrize("used", [-1, -(2**40), 2**63])
def test_memory_used_out_of_bounds_is_unknown_and_costs_the_sample_nothing(used: int) -> None:
    """An older agent's MemTotal − MemAvailable went below 0 when MemAvailable read above MemTotal: the
    whole sample was refused, its GPU power with it. Now its memory is unknown and the rest is kept."""
    frames, rejected = decode_lines(
        line(memory={"used_bytes": used}, gpus=[{"index": 0, "uuid": "GPU-a", "power_w": 50.5}])
    )
    (frame,) = frames
    assert rejected == [] and isinstance(frame, SampleFrame)
    assert frame.mem_used_bytes is None and frame.gpus[0].power_w == 50.5


@pytest.mark.parametrize(
    "bad", ["-1", "1.5", "3.0", '"7"', "true", "[1]", str(2**63), str(2**64 + 5), "1" * 5000, "1e400"]
)
@pytest.mark.parametrize("slow", [False, True])
def test_a_bad_page_cache_is_unknown_and_costs_the_sample_nothing(bad: str, slow: bool) -> None:
    """Read leniently, as the clock signals are: the sample's power and memory used are kept (``bad`` is
    the JSON text; ``slow``: a GPU signal of another type sends the line down the field-by-field path)."""
    gpus = [{"index": 0, "uuid": "GPU-a", "power_w": 50.5, "sm_clock_hz": "fast" if slow else 1e9}]
    text = line(gpus=gpus).replace('"used_bytes": 42', f'"used_bytes": 42, "page_cache_bytes": {bad}')
    frames, rejected = decode_lines(text)
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:  # beyond what orjson reads: that path refuses the line, as it always has
        if slow:
            assert frames == [] and rejected[0].reason == "not_json"
            return
    (frame,) = frames
    assert rejected == [] and isinstance(frame, SampleFrame)
    assert frame.mem_page_cache_bytes is None and frame.mem_used_bytes == 42 and frame.gpus[0].power_w == 50.5


def test_lines_that_are_not_objects_too_long_or_of_unknown_type_are_skipped() -> None:
    huge = line(seq=9, node="x" * (MAX_LINE_CHARS + 1))
    lines = [line(seq=1), "{not json", "[1,2]", '{"type":"future-kind","x":1}', huge, line(seq=2)]
    frames, rejected = decode_lines("\n".join(lines))
    assert [f.seq for f in frames if isinstance(f, SampleFrame)] == [1, 2]
    assert [r.reason for r in rejected] == ["not_json", "not_json", "too_long"]  # a newer frame type: quiet
    assert decode_lines("") == ([], [])


def test_hello_gap_and_time_frames() -> None:
    text = "\n".join(
        [
            '{"type":"hello","boot_id":"b9","node":"n"}',
            '{"type":"gap","after":3,"missing":40,"next_seq":44}',
            '{"type":"time","id":4,"t_wall_ns":12,"t_mono_ns":3,"boot_id":"b9"}',
            '{"type":"hello","boot_id":""}',  # no boot: unusable
        ]
    )
    (hello, gap, reply), (no_boot,) = decode_lines(text)
    assert no_boot.reason == "invalid" and "boot_id" in no_boot.detail
    assert hello == HelloFrame("b9", {"type": "hello", "boot_id": "b9", "node": "n"})
    assert gap == GapFrame(after=3, missing=40)
    assert reply == TimeFrame(id=4, t_wall_ns=12, boot_id="b9", t_mono_ns=3)


HELLO = {
    "boot_id": "b",
    "capabilities": {
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-a",
                "fields": {
                    "power": {"supported": True},
                    "memory_info": {"supported": False, "state": "unsupported", "reason": "NOT_SUPPORTED"},
                    "memory_utilization": {"supported": False, "state": "untrusted"},
                },
            },
            {
                "index": 1,
                "uuid": "GPU-b",
                "fields": {"memory_info": {"supported": False, "reason": "NO_PERMISSION"}},
            },
        ]
    },
}


def test_what_a_hello_says() -> None:
    assert announced_gpus(HELLO) == ["GPU-a", "GPU-b"]
    assert capability_gaps(HELLO["capabilities"]) == {
        "memory_info": {"0": "NOT_SUPPORTED", "1": "NO_PERMISSION"},
        "memory_utilization": {"0": "untrusted"},
    }
    assert unsupported_fields(HELLO) == {"memory_info": "NO_PERMISSION", "memory_utilization": "untrusted"}
    assert announced_gpus(None) == [] and unsupported_fields({"capabilities": "junk"}) == {}


def test_latest_summary_never_sums_an_unknown() -> None:
    two = (GpuValues(0, "a", 10.0, None, 0.2), GpuValues(1, "b", 20.0, None, 0.7))
    frame = SampleFrame(1, "b", 99, 1, 0.1, 5, two, "")
    assert latest_summary(frame) == {
        "t_wall_ns": 99,
        "interval_s": 0.1,
        "power_w": 30.0,
        "util_ratio": 0.7,
        "memory_used_bytes": 5,
    }
    unknown = frame._replace(gpus=(msgspec.structs.replace(two[0], power_w=None), two[1]))
    assert latest_summary(unknown)["power_w"] is None


def test_a_frame_is_one_line_and_never_borrows_text_from_another() -> None:
    """Lines that only make objects when a message is read as one array (a sample split over two lines, two
    objects on one line, a string that swallows a line break) are each rejected on their own; the good
    lines around them keep their own text."""
    split = [line(seq=3)[:-1] + ', "pad": [1', "2]}", "{}, {}"]  # joined: as many objects as lines
    swallowing = ['{"a": "}', '{"}', '{"k": "\ud800"}']
    for hostile in (split, swallowing):
        frames, rejected = decode_lines("\n".join([line(seq=1), *hostile, line(seq=2)]))
        assert [(f.seq, f.raw) for f in frames] == [(1, line(seq=1)), (2, line(seq=2))]  # type: ignore[union-attr]
        assert [r.reason for r in rejected] == ["not_json"] * 3


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"hardware": None}, None),  # absent is fine
        ({"hardware": [1]}, "hello hardware must be an object"),
        ({"hardware": {"lmx": 5}}, "hello hardware.lmx must be an object"),
        ({"capabilities": "x"}, "hello capabilities must be an object"),
        ({"capabilities": {"gpus": [5]}}, "hello capabilities.gpus must be a list of objects"),
        ({"capabilities": {"host_memory": []}}, "hello capabilities.host_memory must be an object"),
        ({"memory_model": 5}, "hello memory_model must be a string"),
        ({"interval_s": True}, "hello interval_s must be a number"),
    ],
)
def test_a_hello_whose_parts_have_the_wrong_type_is_refused_whole(
    changes: dict[str, object], why: str | None
) -> None:
    """Found by tests/fuzz/test_fuzz_stream.py: a hello with "hardware": null made the node's export a 500."""
    hello = {"type": "hello", "boot_id": "b1", "memory_model": "unified", "hardware": {}, **changes}
    frames, rejected = decode_lines(json.dumps(hello))
    if why is None:
        assert isinstance(frames[0], HelloFrame) and not rejected
    else:
        assert frames == [] and [(r.reason, r.detail) for r in rejected] == [("invalid", why)]


def test_the_agents_sensor_limits_are_the_decoders(tmp_path: pathlib.Path) -> None:
    """A hwmon driver's long label and chip name reach the coordinator as a sensor it keeps (a frame with
    one too long is refused whole: every sample of that node would be lost)."""
    chip = tmp_path / "hwmon0"
    chip.mkdir()
    for name, text in (("name", "c" * 100), ("power1_label", "L" * 200), ("power1_input", "84000000")):
        (chip / name).write_text(text + "\n")
    (reading,) = HwmonSensors(tmp_path).read()
    kept = sensor_values(reading.to_json())
    assert (kept.sensor, kept.source, kept.power_w) == (reading.sensor, reading.source, 84.0)
    assert (MAX_TEXT_CHARS, MAX_CHANNELS) == (MAX_SENSOR_TEXT, MAX_SENSORS)
