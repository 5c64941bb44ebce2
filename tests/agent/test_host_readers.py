"""/proc/meminfo parsing, hwmon discovery and energy wrap-around, host facts from an injected root."""

from __future__ import annotations

import errno
import os
import pathlib
import threading

import pytest

from sparkwatch_agent.hardware.energy_counter import EnergyAccumulator
from sparkwatch_agent.hardware.host_facts import cpu_model, os_name
from sparkwatch_agent.hardware.hwmon import HwmonSensors
from sparkwatch_agent.hardware.hwmon_discovery import MAX_CHANNELS, MAX_TEXT_CHARS, classify
from sparkwatch_agent.hardware.meminfo import MeminfoReader, memory_of, parse_meminfo
from sparkwatch_agent.hardware.readings import StatusReading

# Shape of a DGX Spark's /proc/meminfo under load (values in kB).
GB10_MEMINFO = b"""MemTotal:       124546968 kB
MemFree:         5230144 kB
MemAvailable:   13876420 kB
Buffers:           11204 kB
Cached:          8102332 kB
SwapCached:            0 kB
SReclaimable:     712236 kB
SwapTotal:      16777212 kB
SwapFree:       16514044 kB
"""


def test_used_is_total_minus_available() -> None:
    mem = parse_meminfo(GB10_MEMINFO)
    assert mem.total_bytes == 124546968 * 1024
    assert mem.available_bytes == 13876420 * 1024
    assert mem.used_bytes == (124546968 - 13876420) * 1024
    assert mem.free_bytes == 5230144 * 1024
    assert mem.page_cache_bytes == (8102332 + 712236) * 1024
    assert mem.swap_used_bytes == (16777212 - 16514044) * 1024


def test_missing_keys_are_unknown_not_zero(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "meminfo"
    path.write_bytes(b"MemTotal: 1000 kB\nMemFree: garbage kB\n")
    mem = MeminfoReader(path).read()
    assert mem.total_bytes == 1024000
    assert mem.available_bytes is None and mem.used_bytes is None and mem.free_bytes is None
    assert mem.page_cache_bytes is None


def _chip(root: pathlib.Path, name: str, files: dict[str, str]) -> None:
    d = root / name
    d.mkdir(parents=True)
    for fname, content in files.items():
        (d / fname).write_text(content + "\n")


def test_hwmon_discovery_by_label_and_kind(tmp_path: pathlib.Path) -> None:
    _chip(
        tmp_path,
        "hwmon0",
        {
            "name": "spbm",
            "power1_label": "sys_total",
            "power1_input": "25000000",
            "power2_label": "gpu",
            "power2_input": "5500000",
            "power3_label": "cpu_p",
            "power3_input": "9000000",
            "energy1_label": "sys_total",
            "energy1_input": "1000000",
        },
    )
    _chip(tmp_path, "hwmon1", {"name": "power_meter", "power1_average": "310000000"})
    _chip(
        tmp_path,
        "hwmon2",
        {"name": "grace", "power1_label": "Module Power Socket 0", "power1_input": "400000000"},
    )
    _chip(tmp_path, "hwmon3", {"name": "coretemp", "temp1_input": "40000"})
    sensors = HwmonSensors(tmp_path)
    readings = {r.sensor: r for r in sensors.read()}
    assert readings["sys_total"].kind == "system" and readings["sys_total"].power_w == 25.0
    assert readings["gpu"].kind == "gpu" and readings["gpu"].power_w == 5.5  # never system power
    assert readings["cpu_p"].kind == "cpu"
    assert readings["power_meter_power1"].kind == "system" and readings["power_meter_power1"].power_w == 310.0
    assert readings["module_power_socket_0"].kind == "module"
    assert readings["sys_total"].energy_j == 0.0  # first read is the origin
    (tmp_path / "hwmon0" / "energy1_input").write_text("3500000\n")
    assert {r.sensor: r for r in sensors.read()}["sys_total"].energy_j == 2.5
    assert "coretemp" not in " ".join(sensors.names)


@pytest.mark.parametrize("legacy", [True, False])
def test_grace_power_meters_are_named_by_their_oem_info_and_never_the_system(
    tmp_path: pathlib.Path, legacy: bool
) -> None:
    """Grace's ACPI power meters, one per socket and part, name themselves in ``power1_oem_info`` (the
    layout NVIDIA's tools and the alumet grace-hopper plugin read: ``hwmonN/device/`` on kernels that
    register the meter the old way, ``hwmonN/`` on newer ones). Read as ``power_meter_power1`` and as
    system power, a Grace socket (CPU and memory, 80 W) stood for the node's whole draw."""
    parts = {"Module Power Socket 0": 450, "Grace Power Socket 0": 80, "CPU Power Socket 0": 60}
    parts["SysIO Power Socket 0"] = 12
    for k, (info, watts) in enumerate(parts.items()):
        files = {
            "power1_average": str(watts * 10**6),
            "power1_oem_info": info,
            "power1_average_interval": "50",
        }
        if legacy:  # hwmon_device_register(): the name and attributes on the parent device only
            _chip(tmp_path, f"hwmon{k}/device", {"name": "power_meter", **files})
        else:
            _chip(tmp_path, f"hwmon{k}", {"name": "power_meter", **files})
    _chip(tmp_path, "hwmon9", {"name": "power_meter", "power1_average": "310000000"})  # a server's meter
    readings = {r.sensor: (r.kind, r.power_w, r.source) for r in HwmonSensors(tmp_path).read()}
    assert readings == {
        "module_power_socket_0": ("module", 450.0, "hwmon:power_meter"),
        "grace_power_socket_0": ("cpu", 80.0, "hwmon:power_meter"),
        "cpu_power_socket_0": ("cpu", 60.0, "hwmon:power_meter"),
        "sysio_power_socket_0": ("other", 12.0, "hwmon:power_meter"),
        "power_meter_power1": ("system", 310.0, "hwmon:power_meter"),
    }


def test_spbm_status_attributes_are_read_as_integers_and_unknown_when_unreadable(
    tmp_path: pathlib.Path,
) -> None:
    """spark_hwmon's spbm.c exposes ``prochot`` and ``pl_level`` in its hwmon directory as ``"%u\\n"``."""
    files = {"name": "spbm", "power1_label": "sys_total", "power1_input": "25000000", "prochot": "0"}
    _chip(tmp_path, "hwmon0", {**files, "pl_level": "2"})
    sensors = HwmonSensors(tmp_path)
    assert sensors.names == ("sys_total", "prochot", "pl_level")
    captured = sensors.capture()
    assert sensors.decode_status(captured) == (
        StatusReading("prochot", "hwmon:spbm", 0),
        StatusReading("pl_level", "hwmon:spbm", 2),
    )
    (tmp_path / "hwmon0" / "prochot").write_text("1\n")
    (tmp_path / "hwmon0" / "pl_level").write_text("garbage\n")
    later = sensors.decode_status(sensors.capture())
    assert [(s.name, s.value) for s in later] == [("prochot", 1), ("pl_level", None)]  # unknown, never 0
    sensors.close()


def test_hwmon_attributes_are_read_again_in_place_and_retried_when_unreadable(
    tmp_path: pathlib.Path,
) -> None:
    _chip(tmp_path, "hwmon0", {"name": "spbm", "power1_label": "sys_total", "power1_input": "25000000"})
    power = tmp_path / "hwmon0" / "power1_input"
    sensors = HwmonSensors(tmp_path)
    assert sensors.read()[0].power_w == 25.0
    power.write_text("26500000\n")  # rewritten in place, as sysfs regenerates it: the open file sees it
    assert sensors.read()[0].power_w == 26.5
    # On sysfs a removed attribute fails its next read (ENODEV) and is closed; a regular file keeps
    # reading through its open descriptor, so close it here to take the same reopen path.
    sensors.close()
    power.unlink()  # gone: unknown, not 0 and not the last value
    assert sensors.read()[0].power_w is None
    power.write_text("garbage\n")
    assert sensors.read()[0].power_w is None
    power.write_text("27000000\n")  # back: reopened on the next read
    assert sensors.read()[0].power_w == 27.0
    sensors.close()


def test_hwmon_energy_decodes_captures_in_order(tmp_path: pathlib.Path) -> None:
    _chip(tmp_path, "hwmon0", {"name": "spbm", "energy1_label": "sys_total", "energy1_input": "1000000"})
    energy = tmp_path / "hwmon0" / "energy1_input"
    ticks = iter(range(1000))
    sensors = HwmonSensors(tmp_path, now_s=lambda: next(ticks) * 0.1)  # captured 0.1 s apart, decoded later
    captures = []
    for raw_uj in (1_000_000, 3_000_000, 2**32 - 1_000_000, 500_000):
        energy.write_text(f"{raw_uj}\n")
        captures.append(sensors.capture())
    top_j = 2**32 / 1e6  # a 32-bit µJ counter wraps here
    assert [sensors.decode(c)[0].energy_j for c in captures] == [0.0, 2.0, top_j - 2.0, top_j - 0.5]


def test_absent_hwmon_is_simply_absent(tmp_path: pathlib.Path) -> None:
    assert HwmonSensors(tmp_path / "missing").read() == ()


def test_a_negative_unparsable_or_vanished_value_is_unknown_with_its_reason(tmp_path: pathlib.Path) -> None:
    files = {"name": "spbm", "power1_label": "dc_input", "power1_input": "-84000000"}
    _chip(tmp_path, "hwmon0", {**files, "energy1_label": "dc_input", "energy1_input": "1000000"})
    sensors = HwmonSensors(tmp_path)
    errors: list[tuple[str, str]] = []
    (first,) = sensors.decode(sensors.capture(), errors)
    assert first.power_w is None and first.energy_j == 0.0  # never -84 W
    assert errors == [("sensor_power:dc_input", "negative")]
    (tmp_path / "hwmon0" / "power1_input").write_text("\n")
    (tmp_path / "hwmon0" / "energy1_input").write_text("-2000000000\n")
    errors.clear()
    (second,) = sensors.decode(sensors.capture(), errors)
    assert second.power_w is None and second.energy_j is None
    assert errors == [("sensor_power:dc_input", "not_a_number"), ("sensor_energy:dc_input", "negative")]
    (tmp_path / "hwmon0" / "energy1_input").write_text("3000000\n")  # the count goes on from 1 J
    assert sensors.decode(sensors.capture())[0].energy_j == 2.0
    sensors.close()
    (tmp_path / "hwmon0" / "power1_input").unlink()
    errors.clear()
    assert sensors.decode(sensors.capture(), errors)[0].power_w is None
    assert errors == [("sensor_power:dc_input", "unreadable")]
    sensors.close()


def test_a_power_meter_without_a_reading_is_no_reading_not_four_megawatts(tmp_path: pathlib.Path) -> None:
    """An ACPI power meter without a reading gives 0xFFFFFFFF, which the kernel makes 4294967295000 µW: it
    was published as the node's draw (4.3 MW; a 29-digit value as 1e23 W). Past 20 kW it is unknown."""
    _chip(tmp_path, "hwmon0", {"name": "power_meter", "power1_input": "4294967295000"})
    sensors = HwmonSensors(tmp_path)
    errors: list[tuple[str, str]] = []
    (reading,) = sensors.decode(sensors.capture(), errors)
    assert reading.power_w is None and errors == [(f"sensor_power:{reading.sensor}", "out_of_range")]
    (tmp_path / "hwmon0" / "power1_input").write_text("20000000000\n")  # 20 kW: the most it may be
    assert sensors.decode(sensors.capture())[0].power_w == 20_000.0
    sensors.close()


def test_long_or_undecodable_labels_keep_within_the_frame_limits(tmp_path: pathlib.Path) -> None:
    """A coordinator refuses a frame whose sensor name or source is over 64 characters (every frame of
    the node), so a driver's long label or chip name is shortened, each to a name of its own."""
    long_chip = "c" * 100
    files = {"name": long_chip, "power1_label": "L" * 200, "power1_input": "1000000"}
    _chip(tmp_path, "hwmon0", {**files, "power2_label": "L" * 199 + "M", "power2_input": "2000000"})
    (tmp_path / "hwmon1").mkdir()
    (tmp_path / "hwmon1" / "name").write_bytes(b"spbm\n")
    (tmp_path / "hwmon1" / "power1_label").write_bytes(b"\xff\xfe dc\n")  # not UTF-8
    (tmp_path / "hwmon1" / "power1_input").write_text("3000000\n")
    readings = HwmonSensors(tmp_path).read()
    assert [
        (r.power_w, len(r.sensor) <= MAX_TEXT_CHARS, len(r.source) <= MAX_TEXT_CHARS) for r in readings
    ] == [
        (1.0, True, True),
        (2.0, True, True),
        (3.0, True, True),
    ]
    long_names = [r.sensor for r in readings[:2]]
    assert long_names[0] != long_names[1] and all(n.startswith("l" * 55 + "~") for n in long_names)
    assert readings[0].source.startswith("hwmon:ccc") and readings[2].sensor == "dc"
    assert [r.sensor for r in HwmonSensors(tmp_path).read()] == [r.sensor for r in readings]  # stable


def test_at_most_the_frames_number_of_channels_is_read(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = {"name": "many"}
    for i in range(MAX_CHANNELS + 2):
        files |= {f"power{i}_label": f"rail{i}", f"power{i}_input": "1000000"}
    _chip(tmp_path, "hwmon0", files)
    assert len(HwmonSensors(tmp_path).names) == MAX_CHANNELS
    (said,) = [
        r.getMessage() for r in caplog.records if "left out" in r.getMessage()
    ]  # one line, not one each
    assert (
        said
        == f"hwmon: left out 2 channels past the {MAX_CHANNELS} read: hwmon0's 'rail128', hwmon0's 'rail129'"
    )  # the last by number (by text, rail98 and rail99 came last)


def test_a_name_taken_even_with_its_chip_added_is_left_out_with_a_warning(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = {"name": "a", "power1_label": "gpu", "power1_input": "1", "power2_label": "gpu hwmon1"}
    _chip(tmp_path, "hwmon0", {**first, "power2_input": "2"})
    _chip(tmp_path, "hwmon1", {"name": "b", "power1_label": "gpu", "power1_input": "3"})
    assert HwmonSensors(tmp_path).names == ("gpu", "gpu_hwmon1")  # hwmon1's gpu: both names taken
    (warning,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert warning.endswith("channel 'gpu': its name 'gpu_hwmon1' is taken")


def test_two_power_channels_of_one_label_are_both_read_the_later_under_its_files_name(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A chip whose power1 and power2 both say sys_total: the second overwrote the first, unsaid."""
    files = {"name": "spbm", "power1_label": "sys_total", "power1_input": "61000000"}
    files |= {"power2_label": "sys_total", "power2_input": "58000000"}
    files |= {"energy1_label": "sys_total_energy", "energy1_input": "1000000"}
    _chip(tmp_path, "hwmon0", files)
    sensors = HwmonSensors(tmp_path)
    assert sensors.names == ("sys_total", "sys_total_power2")
    first, second = sensors.read()
    assert (first.power_w, second.power_w) == (61.0, 58.0)
    assert first.energy_j is not None and second.energy_j is None  # the counter stays with the first
    (warning,) = [r.getMessage() for r in caplog.records if "two power channels" in r.getMessage()]
    assert warning.endswith("labelled 'sys_total': power2 is 'sys_total_power2'")
    sensors.close()
    files = {"name": "spbm", "power2_label": "x", "power2_input": "1000000", "power10_label": "x"}
    _chip(tmp_path / "ten", "hwmon0", {**files, "power10_input": "2000000"})  # by number: 2 before 10
    assert HwmonSensors(tmp_path / "ten").names == ("x", "x_power10")


class _Fed:
    """An accumulator fed readings ``step_s`` apart (the sampler's interval), as the agent feeds it."""

    def __init__(self, step_s: float = 0.1) -> None:
        self.acc, self.step_s, self.t_s = EnergyAccumulator(), step_s, 0.0

    def update(self, raw_uj: int) -> float:
        self.t_s += self.step_s
        return self.acc.update(raw_uj, self.t_s)

    @property
    def total_j(self) -> float:
        return self.acc.total_j


def test_energy_accumulator_handles_32bit_wrap_and_reset() -> None:
    acc = _Fed()
    acc.update(2**32 - 1_000_000)  # µJ, near the top of a 32-bit counter
    assert acc.update(500_000) == 1.5  # wrapped: 1.0 J to the top + 0.5 J after
    assert acc.update(2_500_000) == 3.5
    acc.update(2**32 * 1000 - 2_000_000)  # the spbm shape: 32-bit mJ counter exposed in µJ
    total = acc.total_j
    assert acc.update(1_000_000) - total == 3.0


def test_energy_accumulator_reset_low_counter_counts_from_zero() -> None:
    acc = _Fed()
    acc.update(5_000_000)
    assert acc.update(1_000_000) == 1.0  # driver restarted counting: only the new 1 J is added


def test_host_facts_from_injected_root(tmp_path: pathlib.Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nBogoMIPS\t: 2000\n")
    (tmp_path / "sys/firmware/devicetree/base").mkdir(parents=True)
    (tmp_path / "sys/firmware/devicetree/base/model").write_text("NVIDIA DGX Spark\x00")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04.3 LTS"\n')
    assert cpu_model(tmp_path) == "NVIDIA DGX Spark"
    assert os_name(tmp_path) == "Ubuntu 24.04.3 LTS"


def test_energy_accumulator_ignores_small_backward_jitter() -> None:
    """The higher reading stays the base: the way back up to it was counted a second time (1.1 J here
    for a counter that moved 1.0 J; a still counter jittering ±0.5 J gained a joule each time)."""
    acc = _Fed()
    acc.update(10_000_000_000)
    assert acc.update(9_999_900_000) == 0.0  # 0.1 J back: jitter, not a reset adding 10 kJ
    assert acc.update(10_001_000_000) == pytest.approx(1.0)
    for raw in (10_000_500_000, 10_001_000_000, 10_000_500_000, 10_001_000_000):  # still, jittering
        assert acc.update(raw) == pytest.approx(1.0)


def test_energy_accumulator_tells_a_reset_in_a_moduluss_upper_half_from_a_wrap() -> None:
    """spbm counts mJ in 32 bits, exposed in µJ: a driver reload when the count was past half of 2^32 mJ
    (4.3 MJ) was read as a wrap and added what was left to the top (here ≈ 1.3 MJ in 0.1 s). A wrap adds
    no more than 20 kW could draw since the last reading, whatever the sampler's interval."""
    step = 10_000_000  # 10 J a sample: 100 W at 10 Hz
    near_top = 2**32 * 1000 - 5_000_000
    wrapped = _Fed()
    for k in range(3):
        wrapped.update(near_top - (2 - k) * step)
    assert wrapped.update(5_000_000) == pytest.approx(20.0 + 10.0)  # 5 J to the top, 5 J after
    reset = _Fed()
    for k in range(3):
        reset.update(3 * 10**12 + k * step)  # 3 MJ counted: in the upper half of 2^32 mJ
    assert reset.update(7_000_000) == pytest.approx(20.0 + 7.0)  # counted again from zero: 7 J
    slow = _Fed(60.0)  # a lease's 60 s interval: a wrap of 6 kJ is still a wrap
    slow.update(2**32 * 1000 - 3_000_000_000)
    assert slow.update(3_000_000_000) == pytest.approx(6000.0)


@pytest.mark.parametrize(
    ("label", "chip", "kind"),
    [
        ("gpu", "spbm", "gpu"),  # jaim12005/spark_hwmon: the GPU module's power and accumulator
        ("gpu_out", "spbm", "gpu"),  # edisonchan/spark_hwmon: its rails and accumulators
        ("gpm", "spbm", "gpu"),
        ("gpc_in", "spbm", "gpu"),
        ("sys_in", "spbm", "other"),  # not one of the documented whole-node labels: never promoted
        ("cpu_gpu", "spbm", "other"),  # both: not the GPU rail (it was classed gpu), nor the CPU's
        ("cpu_p", "spbm", "cpu"),
        ("budget_gpu", "spbm", "other"),  # what the firmware allows the GPU, not what it draws
        ("budget_cpu_e", "spbm", "other"),
        ("pl1", "spbm", "other"),  # a power limit
        ("syspl2", "spbm", "other"),
        ("ewma_pl1", "spbm", "other"),  # a smoothed draw under one controller: no one part's
        ("dc_input", "spbm", "system"),
        ("Module Power Socket 0", "grace", "module"),
    ],
)
def test_both_spbm_forks_labels_are_classified(label: str, chip: str, kind: str) -> None:
    assert classify(label, chip) == kind


def test_impossible_meminfo_differences_are_unknown_never_negative() -> None:
    """A container's meminfo view out of step (MemAvailable above MemTotal) gave used_bytes −102400, and the
    coordinator refused the whole frame over it, GPU power and all."""
    odd = parse_meminfo(b"MemTotal: 100 kB\nMemAvailable: 200 kB\nSwapTotal: 10 kB\nSwapFree: 20 kB\n")
    assert odd.total_bytes == 102400 and odd.available_bytes == 204800
    assert odd.used_bytes is None and odd.swap_used_bytes is None
    errors: list[tuple[str, str]] = []
    memory, why = memory_of(parse_meminfo, b"MemTotal: 100 kB\nMemAvailable: 200 kB\n", errors)
    assert memory is not None and errors == [("host_memory", "unparsable")]
    assert why == "meminfo's MemAvailable (204800 B) is more than its MemTotal (102400 B)"
    _, why = memory_of(parse_meminfo, b"MemTotal: 100 kB\nMemAvailable: x kB\n", [])
    assert why == "meminfo has no MemAvailable number to take used memory from"
    huge = parse_meminfo(
        b"MemTotal: " + b"9" * 26 + b" kB\nMemAvailable: 100 kB\nMemFree: 9007199254740992 kB\n"
    )
    assert huge.total_bytes is None and huge.used_bytes is None and huge.free_bytes is None  # past int64
    assert huge.available_bytes == 102400


def test_a_meminfo_file_outside_proc_is_read_anew_so_a_replaced_one_is_seen(tmp_path: pathlib.Path) -> None:
    """A file given with --meminfo-path (a container's view) was held open: replaced, its old numbers were
    read for ever; removed, never said."""
    path = tmp_path / "meminfo"
    path.write_bytes(GB10_MEMINFO)
    reader = MeminfoReader(path)
    assert reader.read().total_bytes == 124546968 * 1024
    staged = tmp_path / "meminfo.new"
    staged.write_bytes(b"MemTotal: 1000 kB\nMemAvailable: 400 kB\n")
    staged.replace(path)
    assert reader.read().used_bytes == 600 * 1024
    path.unlink()
    with pytest.raises(FileNotFoundError):
        reader.read()
    reader.close()


@pytest.mark.parametrize("value", ["1_000", "+1000", "١٠٠٠", "9" * 80, "1000 W", "0x3e8"])
def test_a_sensor_value_that_is_not_plain_decimal_is_not_a_number(tmp_path: pathlib.Path, value: str) -> None:
    """int() took 1_000 and other scripts' digits, and an 80-digit value cut at 64 bytes read as 1e58 W."""
    _chip(tmp_path, "hwmon0", {"name": "spbm", "power1_label": "dc_input", "power1_input": value})
    sensors = HwmonSensors(tmp_path)
    errors: list[tuple[str, str]] = []
    (reading,) = sensors.decode(sensors.capture(), errors)
    assert reading.power_w is None and errors == [("sensor_power:dc_input", "not_a_number")]
    sensors.close()


def test_a_fifo_named_as_meminfo_is_unreadable_not_a_hang(tmp_path: pathlib.Path) -> None:
    """The open blocked until a writer came: `serve` bound its port and never said it listened, `probe`
    hung until killed (a sweep). Now the read fails at once, as any unreadable file's does."""
    fifo = tmp_path / "meminfo"
    os.mkfifo(fifo)
    reader = MeminfoReader(fifo)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            reader.capture()
        except OSError as exc:
            failed.append(exc)

    worker = threading.Thread(target=read, daemon=True)
    worker.start()
    worker.join(5.0)
    if worker.is_alive():
        with open(fifo, "wb"):  # let the blocked open go, so the thread ends
            pass
        pytest.fail("reading a FIFO as meminfo blocked")
    assert len(failed) == 1 and failed[0].errno == errno.ESPIPE


def test_fifos_in_a_hwmon_tree_are_unreadable_not_a_hang(tmp_path: pathlib.Path) -> None:
    """A FIFO named as a chip's label or power file blocked its open until a writer came: `probe` hung
    (a sweep). Now the label reads as absent and the power as unknown, at once."""
    _chip(tmp_path, "hwmon0", {"name": "spbm", "power2_label": "gpu", "power2_input": "9000000"})
    os.mkfifo(tmp_path / "hwmon0" / "power1_label")
    os.mkfifo(tmp_path / "hwmon0" / "power1_input")
    done: list[list[float | None]] = []

    def discover_and_read() -> None:
        sensors = HwmonSensors(tmp_path)
        done.append([r.power_w for r in sensors.read()])
        assert sensors.names == ("spbm_power1", "gpu")  # the label unread: the channel's file name
        sensors.close()

    worker = threading.Thread(target=discover_and_read, daemon=True)
    worker.start()
    worker.join(5.0)
    blocked = worker.is_alive()
    for fifo in ("power1_label", "power1_input"):  # let a blocked open go, so the thread ends
        if worker.is_alive():
            with open(tmp_path / "hwmon0" / fifo, "wb"):
                pass
    assert not blocked, "a FIFO in the hwmon tree blocked the agent"
    assert done == [[None, 9.0]]


def test_a_chip_folder_that_cannot_be_entered_holds_no_status_not_a_traceback(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chip folder the agent's user may not enter (mode 000): ``Path.is_file`` of its status files
    raised PermissionError and `serve` and `probe` stopped with a traceback (a sweep, as nobody). The
    tests run as root, whom mode bits do not stop, so the refusal is the OS's answer played here."""
    _chip(tmp_path, "hwmon0", {"name": "spbm", "power1_label": "sys_total", "power1_input": "25000000"})
    _chip(tmp_path, "hwmon1", {"name": "spbm", "prochot": "1"})
    shut = tmp_path / "hwmon1"
    real_is_file = pathlib.Path.is_file

    def is_file(path: pathlib.Path) -> bool:
        if path.parent == shut:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_is_file(path)

    monkeypatch.setattr(pathlib.Path, "is_file", is_file)
    sensors = HwmonSensors(tmp_path)
    assert sensors.names == ("sys_total",)
    sensors.close()
