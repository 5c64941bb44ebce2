"""hwmon chips that come or go while the agent runs (a driver loaded after it started: spbm is an
out-of-tree module) are found again from the chip folders, without losing a kept channel's energy count."""

from __future__ import annotations

import json
import logging
import pathlib
import shutil

import pytest
from test_sampler import FakeClock, StaticMemory

from sparkwatch_agent.hardware.hwmon import HwmonSensors
from sparkwatch_agent.hardware.hwmon_discovery import MAX_CHANNELS
from sparkwatch_agent.sampling.leases import IntervalLeases
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.serving.stream_cursor import StreamCursor

SPBM = {
    "name": "spbm",
    "power1_label": "sys_total",
    "power1_input": "41000000",
    "energy1_label": "gpu",
    "energy1_input": "1000000",
    "pl_level": "2",
}


def _chip(root: pathlib.Path, name: str, files: dict[str, str]) -> pathlib.Path:
    folder = root / name
    folder.mkdir(parents=True)
    for file, content in files.items():
        (folder / file).write_text(content + "\n")
    return folder


def _sampler(sensors: HwmonSensors, clock: FakeClock) -> Sampler:
    """A sampler of no GPU that reads ``sensors`` on ``clock``."""
    return Sampler(
        node="n1",
        boot_id="b00t",
        gpu=None,
        memory=StaticMemory(),
        sensors=sensors,
        leases=IntervalLeases(1.0),
        ring=SampleRing(100),
        clocks=clock.clocks(),
    )


class Seconds:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_chip_loaded_after_start_is_read_from_the_next_rescan(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    _chip(tmp_path, "hwmon0", {"name": "acpitz", "temp1_input": "45000"})
    clock = Seconds()
    sensors = HwmonSensors(tmp_path, now_s=clock, rescan_s=30.0)
    assert sensors.names == () and sensors.read() == ()
    _chip(tmp_path, "hwmon1", SPBM)  # modprobe spbm
    clock.now = 29.9
    sensors.refresh()
    assert sensors.names == ()  # not looked at before its time: one listing per rescan_s
    clock.now = 30.0
    with caplog.at_level(logging.INFO):
        sensors.refresh()
    assert sensors.names == ("gpu", "sys_total", "pl_level")  # energy channels first
    capture = sensors.capture()
    assert [(r.sensor, r.kind, r.power_w, r.energy_j) for r in sensors.decode(capture)] == [
        ("gpu", "gpu", None, 0.0),  # counted from its first reading
        ("sys_total", "system", 41.0, None),
    ]
    assert [(s.name, s.value) for s in sensors.decode_status(capture)] == [("pl_level", 2)]
    assert any("added ['gpu', 'sys_total', 'pl_level']" in r.getMessage() for r in caplog.records)
    sensors.close()


def test_a_kept_channel_keeps_its_energy_count_and_a_chip_gone_is_read_no_more(
    tmp_path: pathlib.Path,
) -> None:
    spbm = _chip(tmp_path, "hwmon0", SPBM)
    clock = Seconds()
    sensors = HwmonSensors(tmp_path, now_s=clock, rescan_s=30.0)
    assert sensors.read()[0].energy_j == 0.0
    (spbm / "energy1_input").write_text("3000000\n")
    clock.now = 10.0
    assert sensors.read()[0].energy_j == 2.0
    meter = _chip(tmp_path, "hwmon1", {"name": "power_meter", "power1_input": "90000000"})
    clock.now = 30.0
    sensors.refresh()
    assert sensors.names == ("gpu", "sys_total", "power_meter_power1", "pl_level")
    (spbm / "energy1_input").write_text("4000000\n")
    clock.now = 31.0
    readings = {r.sensor: r for r in sensors.read()}
    assert readings["gpu"].energy_j == 3.0  # the same channel: its count goes on, not from 0
    assert readings["power_meter_power1"].power_w == 90.0
    shutil.rmtree(meter)  # rmmod
    clock.now = 61.0
    sensors.refresh()
    assert sensors.names == ("gpu", "sys_total", "pl_level")
    sensors.close()


def test_a_capture_taken_before_a_change_is_decoded_against_what_it_read(tmp_path: pathlib.Path) -> None:
    """Captures are decoded later, in batches: one taken before a rescan pairs its bytes with the channels
    it read, not with the new ones (they were zipped against the new channels, and refused)."""
    _chip(tmp_path, "hwmon0", {"name": "spbm", "power1_label": "sys_total", "power1_input": "41000000"})
    clock = Seconds()
    sensors = HwmonSensors(tmp_path, now_s=clock, rescan_s=30.0)
    before = sensors.capture()
    _chip(tmp_path, "hwmon1", {"name": "power_meter", "power1_input": "90000000", "prochot": "0"})
    clock.now = 30.0
    sensors.refresh()
    after = sensors.capture()
    assert [(r.sensor, r.power_w) for r in sensors.decode(before)] == [("sys_total", 41.0)]
    assert sensors.decode_status(before) == ()
    assert [(r.sensor, r.power_w) for r in sensors.decode(after)] == [
        ("sys_total", 41.0),
        ("power_meter_power1", 90.0),
    ]
    assert [s.name for s in sensors.decode_status(after)] == ["prochot"]
    sensors.close()


def test_the_sampler_looks_for_new_chips_at_each_tick(tmp_path: pathlib.Path) -> None:
    clock = FakeClock()
    sensors = HwmonSensors(tmp_path, now_s=lambda: clock.mono / 1e9, rescan_s=30.0)
    sampler = _sampler(sensors, clock)
    assert sampler.tick().sensors == ()
    _chip(tmp_path, "hwmon3", SPBM)
    clock.advance(30.0)
    assert [s.sensor for s in sampler.tick().sensors] == ["gpu", "sys_total"]
    assert [s.name for s in sampler.tick().status] == ["pl_level"]
    sampler.stop()


def test_a_chip_that_sorts_before_a_kept_one_takes_neither_its_name_nor_its_count(
    tmp_path: pathlib.Path,
) -> None:
    """Chip folders sort as text (``hwmon10`` before ``hwmon2``) and the first of two labels keeps the name:
    a power meter on hwmon10 labelled ``sys_total`` took spbm's name, and spbm's count began again at 0."""
    spbm = _chip(
        tmp_path, "hwmon2", {"name": "spbm", "energy1_label": "sys_total", "energy1_input": "1000000"}
    )
    clock = Seconds()
    sensors = HwmonSensors(tmp_path, now_s=clock, rescan_s=30.0)
    assert sensors.read()[0].energy_j == 0.0
    (spbm / "energy1_input").write_text("5000000\n")
    clock.now = 10.0
    assert sensors.read()[0].energy_j == 4.0
    _chip(
        tmp_path, "hwmon10", {"name": "power_meter", "power1_label": "sys_total", "power1_input": "90000000"}
    )
    clock.now = 30.0
    sensors.refresh()
    clock.now = 31.0
    readings = {r.sensor: r for r in sensors.read()}
    assert readings["sys_total"].source == "hwmon:spbm" and readings["sys_total"].energy_j == 4.0
    assert readings["sys_total_hwmon10"].source == "hwmon:power_meter"
    assert readings["sys_total_hwmon10"].power_w == 90.0
    sensors.close()


def test_a_chip_caught_half_registered_is_read_at_the_next_rescan(tmp_path: pathlib.Path) -> None:
    """The ``hwmonN`` link appears before its attribute files: a listing that lands between the two saw a
    chip with nothing to read, and the folders, unchanged after, were never read again."""
    clock = Seconds()
    sensors = HwmonSensors(tmp_path, now_s=clock, rescan_s=30.0)
    chip = _chip(tmp_path, "hwmon0", {"name": "spbm"})  # registered, its files not yet made
    clock.now = 30.0
    sensors.refresh()
    assert sensors.names == ()
    for file, content in SPBM.items():
        (chip / file).write_text(content + "\n")
    clock.now = 60.0
    sensors.refresh()  # the folders are as they were: looked at again once, after a change
    assert sensors.names == ("gpu", "sys_total", "pl_level")
    sensors.close()


def test_a_stream_says_the_new_sensors_in_a_hello_before_the_first_sample_read_with_them(
    tmp_path: pathlib.Path,
) -> None:
    """The hello's ``sensors`` (what `nodes check` shows) stayed those of the stream's start: a hello is sent
    where the hwmon names change, as where the GPU inventory does."""
    clock = FakeClock()
    sensors = HwmonSensors(tmp_path, now_s=lambda: clock.mono / 1e9, rescan_s=30.0)
    sampler = _sampler(sensors, clock)
    sampler.tick()
    sampler.tick()
    _chip(tmp_path, "hwmon3", SPBM)
    clock.advance(30.0)
    sampler.tick()  # seq 3: the first read with spbm's channels
    sampler.tick()
    clock.advance(30.0)
    sampler.tick()  # seq 5: looked at again, nothing new: no hello
    cursor = StreamCursor(0, 0)  # a reader that got the first hello
    lines = []
    while more := cursor.next_lines(
        sampler, 500, lambda snap: b'{"type":"hello","rev":%d}' % snap.inventory_rev
    ):
        lines.extend(json.loads(x) for x in more)
    kinds = [(f["type"], f.get("seq", f.get("rev"))) for f in lines]
    assert kinds == [("sample", 1), ("sample", 2), ("hello", 1), ("sample", 3), ("sample", 4), ("sample", 5)]
    sampler.stop()


def test_a_chip_of_many_channels_that_sorts_first_does_not_push_a_kept_channel_out(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At the frame's channel limit, what is read already stays read: a chip that comes later and sorts
    before it (``hwmon1`` before ``hwmon5``) fills only the room left."""
    _chip(tmp_path, "hwmon5", SPBM)
    clock = Seconds()
    sensors = HwmonSensors(tmp_path, now_s=clock, rescan_s=30.0)
    sensors.read()  # the node's whole draw, counting
    many = {"name": "many"}
    for i in range(MAX_CHANNELS):
        many |= {f"power{i}_label": f"rail{i}", f"power{i}_input": "1000000"}
    _chip(tmp_path, "hwmon1", many)
    clock.now = 30.0
    with caplog.at_level(logging.WARNING):
        sensors.refresh()
    channels = [n for n in sensors.names if n != "pl_level"]
    assert len(channels) == MAX_CHANNELS and {"gpu", "sys_total"} <= set(channels)
    assert channels.count("rail125") == 1 and "rail126" not in channels  # the new chip's first 126
    (said,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert said.startswith("hwmon: left out 2 channels past the 128 read: hwmon1's 'rail126'"), said
