"""The real nvidia-ml-py against the fake libnvidia-ml.so.1: in-process backend and real agent processes."""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import pathlib
import time
import types
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pynvml
import pytest

from doubles.fake_nvml import write_control
from sparkwatch_agent.hardware.nvml import direct as nvml_direct
from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
from sparkwatch_agent.hardware.readings import READ_ORDER, DeviceError

HOST_TOTAL = 24 * 2**30


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as err:
        body, status = err.read(), err.code
    return status, (json.loads(body) if body[:1] in (b"{", b"[") else body.decode())


def wait_for(predicate: Any, timeout_s: float = 10.0) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


# ---- in-process: real pynvml ctypes path ------------------------------------------------------------
def test_gb10_profile_through_real_pynvml(nvml_profile: Any) -> None:
    nvml_profile("gb10")
    backend = NvmlBackend()
    inventory, model = backend.open(128 * 10**9)
    try:
        assert model == "unified"
        gpu = inventory.gpus[0]
        assert gpu.name == "NVIDIA GB10" and inventory.driver_version == "580.95.05"
        caps = {f: (c.state, c.reason) for f, c in gpu.capabilities.items()}
        assert caps["memory_info"] == ("unsupported", "NOT_SUPPORTED")
        assert caps["power_limit"] == ("unsupported", "NOT_SUPPORTED")
        assert caps["memory_utilization"] == ("untrusted", "BOGUS_ON_UNIFIED_MEMORY")
        assert gpu.capabilities["power_instant"].detail == "scope=gpu"  # module scope is NOT_SUPPORTED
        assert gpu.pcie_link_gen == 1 and gpu.pcie_link_trusted is False
        t0 = time.monotonic()
        (r1,) = backend.read()
        t1 = time.monotonic()
        time.sleep(0.2)
        t2 = time.monotonic()
        (r2,) = backend.read()
        t3 = time.monotonic()
        assert r1.power_w == 5.0 and r1.power_instant_w == 5.0 and r1.util_ratio == 0.0
        assert r1.process_mem_bytes == 9663676416
        assert r1.mem_used_bytes is None and r1.power_limit_w is None and r1.mem_util_ratio is None
        assert r1.energy_j is not None and r2.energy_j is not None
        # 5 W between the two counter reads, which lie between t2 - t1 and t3 - t0 apart (not "0.2 s":
        # a loaded machine stretches the sleep and the reads)
        assert 0.98 * (t2 - t1) < (r2.energy_j - r1.energy_j) / 5.0 < 1.02 * (t3 - t0)
    finally:
        backend.close()


def test_gb10_without_energy_counter(nvml_profile: Any) -> None:
    nvml_profile("gb10-noenergy")
    backend = NvmlBackend()
    inventory, _ = backend.open(128 * 10**9)
    try:
        assert inventory.gpus[0].capabilities["energy"].reason == "NOT_SUPPORTED"
        assert backend.read()[0].energy_j is None
    finally:
        backend.close()


def test_discrete_profile_through_real_pynvml(nvml_profile: Any) -> None:
    nvml_profile("discrete")
    backend = NvmlBackend()
    inventory, model = backend.open(HOST_TOTAL)
    try:
        assert model == "discrete" and len(inventory.gpus) == 2
        assert all(c.polled for c in inventory.gpus[0].capabilities.values())
        r = backend.read()[1]
        assert r.mem_total_bytes == 85520809984 and r.mem_used_bytes == 21 * 2**30
        assert r.power_limit_w == 700.0 and r.power_w == 70.0 and r.mem_util_ratio == 0.0
    finally:
        backend.close()


def test_injected_gpu_lost_and_field_failure(nvml_profile: Any, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    nvml_profile("gb10", control)
    backend = NvmlBackend()
    backend.open(128 * 10**9)
    try:
        write_control(control, fail="nvmlDeviceGetTemperature:999")
        (r,) = backend.read()
        assert r.temperature_c is None and ("temperature", "UNKNOWN") in r.read_errors
        write_control(control, lost=1)
        with pytest.raises(DeviceError) as err:
            backend.read()
        assert err.value.reason == "GPU_IS_LOST"
    finally:
        backend.close()


# ---- direct polling readers (nvml_direct) against the wrappers ---------------------------------------
def _readings_without_energy(backend: NvmlBackend) -> list[dict[str, Any]]:
    return [{k: v for k, v in r._asdict().items() if k != "energy_j"} for r in backend.read()]


@pytest.mark.parametrize("profile", ["gb10", "gb10-noenergy", "discrete"])
def test_direct_readers_read_what_the_wrappers_read(nvml_profile: Any, profile: str) -> None:
    nvml_profile(profile)
    direct, wrapped = NvmlBackend(), NvmlBackend(direct=False)
    direct_inventory, _ = direct.open(HOST_TOTAL)
    wrapped_inventory, _ = wrapped.open(HOST_TOTAL)
    try:
        assert direct_inventory == wrapped_inventory
        assert _readings_without_energy(direct) == _readings_without_energy(wrapped)
        for d, w in zip(direct.read(), wrapped.read(), strict=True):  # the fake's counter moves per call
            assert (d.energy_j is None) == (w.energy_j is None)
            assert d.energy_j is None or w.energy_j is None or abs(d.energy_j - w.energy_j) < 1.0
        # each polled field really is read directly (none fell back to its wrapper), and not by accident
        assert direct.wrapped_fields == {gpu.index: () for gpu in direct_inventory.gpus}
        caps = direct_inventory.gpus[0].capabilities
        polled = tuple(f for f in READ_ORDER if caps[f].polled and f != "memory_utilization")
        assert wrapped.wrapped_fields[0] == polled
        # both read the energy counter first, right after the sample's stamp (no GIL hand-over between)
        assert direct.read_order[0] == wrapped.read_order[0] == polled
        assert (polled[0] == "energy") == (profile != "gb10-noenergy")
        first_call = direct._devices[0].direct._calls[0][0]  # type: ignore[union-attr]  # what C is called first
        assert (first_call.__name__ == "nvmlDeviceGetTotalEnergyConsumption") == (profile != "gb10-noenergy")
    finally:
        direct.close()
        wrapped.close()


def test_direct_readers_report_nvml_errors_per_field(nvml_profile: Any, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    nvml_profile("discrete", control)
    backend = NvmlBackend()
    backend.open(HOST_TOTAL)
    try:
        write_control(
            control,
            fail=["nvmlDeviceGetPowerUsage:999", "nvmlDeviceGetMemoryInfo:4"],
            fail_field=["186:0:3"],
        )
        reading = backend.read()[0]
        assert reading.power_w is None and reading.power_instant_w is None and reading.mem_used_bytes is None
        assert set(reading.read_errors) == {
            ("power", "UNKNOWN"),
            ("power_instant", "NOT_SUPPORTED"),
            ("memory_info", "NO_PERMISSION"),
        }
        assert reading.temperature_c is not None and reading.power_limit_w == 700.0
    finally:
        backend.close()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "wrapped"])
def test_nvmls_not_available_value_is_no_reading(
    nvml_profile: Any, tmp_path: pathlib.Path, direct: bool
) -> None:
    """0xFFFFFFFF is NVML_VALUE_NOT_AVAILABLE: read as a power it was 4294967.295 W (and an SM clock of
    4.3e15 Hz), published on /metrics and in the stream as the GPU's (a sweep). It is null with OUT_OF_RANGE,
    as a utilisation over 100 % is, and the other fields are read."""
    control = tmp_path / "control"
    nvml_profile("gb10", control)
    backend = NvmlBackend(direct=direct)
    backend.open(128 * 10**9)
    try:
        write_control(control, util=50, power_mw=0xFFFFFFFF, clock_events=0, sm_clock_mhz=0xFFFFFFFF)
        (reading,) = backend.read()
        write_control(control, util=50, power_mw=70_000)
        (again,) = backend.read()
    finally:
        backend.close()
    assert reading.power_w is None and reading.power_instant_w is None and reading.sm_clock_hz is None
    assert {
        ("power", "OUT_OF_RANGE"),
        ("power_instant", "OUT_OF_RANGE"),
        ("sm_clock", "OUT_OF_RANGE"),
    } <= set(reading.read_errors)
    assert reading.util_ratio == 0.5 and reading.temperature_c is not None
    assert again.power_w == 70.0 and again.read_errors == ()


def test_a_capture_decodes_later_to_what_was_read_then(nvml_profile: Any, tmp_path: pathlib.Path) -> None:
    """Captures hold the bytes of their own calls: decoding them later (after newer captures, and even
    after the backend was closed and reopened) gives the values of the moment they were taken."""
    control = tmp_path / "control"
    nvml_profile("discrete", control)
    backend = NvmlBackend()
    backend.open(HOST_TOTAL)
    try:
        write_control(control, util=20)
        at_20 = backend.capture()
        write_control(control, util=80, fail=["nvmlDeviceGetTemperature:999"])
        at_80 = backend.capture()
        backend.close()
        backend.open(HOST_TOTAL)
        write_control(control, util=50)
        now = backend.read()
        first, later = backend.decode(at_20), backend.decode(at_80)
    finally:
        backend.close()
    assert [r.util_ratio for r in first] == [0.2, 0.2] and [r.util_ratio for r in later] == [0.8, 0.8]
    assert [r.power_w for r in first] == [70.0 + 6.3 * 20] * 2 and now[0].util_ratio == 0.5
    assert first[0].read_errors == () and later[0].read_errors == (("temperature", "UNKNOWN"),)
    assert first[1].process_mem_bytes == 20 * 2**30 and first[1].mem_used_bytes == 21 * 2**30


def test_a_device_level_code_in_a_field_entry_raises_at_capture(
    nvml_profile: Any, tmp_path: pathlib.Path
) -> None:
    control = tmp_path / "control"
    nvml_profile("gb10", control)
    backend = NvmlBackend()
    backend.open(HOST_TOTAL)
    try:
        write_control(control, fail_field=["186:0:15"])  # the call succeeds, the entry says GPU_IS_LOST
        with pytest.raises(DeviceError) as err:
            backend.capture()
        assert err.value.reason == "GPU_IS_LOST" and "power_instant" in str(err.value)
        write_control(control)
        assert backend.read()[0].power_instant_w == 5.0
    finally:
        backend.close()


def test_direct_process_reader_grows_its_buffer(nvml_profile: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    nvml_profile("gb10")
    monkeypatch.setattr(nvml_direct, "PROCESS_SLOTS", 0)  # NVML answers INSUFFICIENT_SIZE first
    backend = NvmlBackend()
    backend.open(HOST_TOTAL)
    try:
        assert [backend.read()[0].process_mem_bytes for _ in range(3)] == [9663676416] * 3
    finally:
        backend.close()


def test_a_binding_without_a_borrowed_struct_keeps_that_fields_wrapper(nvml_profile: Any) -> None:
    nvml_profile("discrete")
    names = [n for n in dir(pynvml) if not n.startswith("__") and n != "c_nvmlMemory_t"]
    partial = types.SimpleNamespace(**{n: getattr(pynvml, n) for n in names})
    backend = NvmlBackend(lib=partial)
    backend.open(HOST_TOTAL)
    try:
        assert backend.wrapped_fields == {0: ("memory_info",), 1: ("memory_info",)}
        assert backend.read()[1].mem_used_bytes == 21 * 2**30
    finally:
        backend.close()


def test_a_binding_whose_value_union_lacks_a_member_keeps_power_instants_wrapper(nvml_profile: Any) -> None:
    """A KeyError for the missing member escaped the direct path's build (it caught AttributeError and
    ValueError only), and so the backend's open: no GPU was read at all."""
    nvml_profile("gb10")

    class Value(ctypes.Union):
        _fields_ = [(n, t) for n, t in pynvml.c_nvmlValue_t._fields_ if n != "sllVal"]

    names = [n for n in dir(pynvml) if not n.startswith("__") and n != "c_nvmlValue_t"]
    partial = types.SimpleNamespace(**{n: getattr(pynvml, n) for n in names}, c_nvmlValue_t=Value)
    backend = NvmlBackend(lib=partial)
    backend.open(HOST_TOTAL)
    try:
        assert backend.wrapped_fields == {0: ("power_instant",)}
        assert backend.read()[0].power_instant_w is not None
    finally:
        backend.close()


# ---- real agent processes ---------------------------------------------------------------------------
def _env(fake_nvml_dir: pathlib.Path, profile: str, control: pathlib.Path | None = None) -> dict[str, str]:
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": profile}
    if control is not None:
        env["FAKE_NVML_CONTROL"] = str(control)
    return env


PROFILES = {
    # profile: (memory model, unsupported fields with reasons, series that must be absent, series present)
    "gb10": (
        "unified",
        {
            "memory_info": "NOT_SUPPORTED",
            "power_limit": "NOT_SUPPORTED",
            "memory_utilization": "BOGUS_ON_UNIFIED_MEMORY",
        },
        [
            "sparkwatch_gpu_memory_used_bytes{",
            "sparkwatch_gpu_power_limit_watts{",
            "sparkwatch_gpu_memory_utilization_ratio{",
        ],
        ["sparkwatch_gpu_energy_joules_total{", "sparkwatch_gpu_power_instant_watts{"],
    ),
    "gb10-noenergy": (
        "unified",
        {
            "memory_info": "NOT_SUPPORTED",
            "power_limit": "NOT_SUPPORTED",
            "energy": "NOT_SUPPORTED",
            "memory_utilization": "BOGUS_ON_UNIFIED_MEMORY",
        },
        ["sparkwatch_gpu_energy_joules_total{", "sparkwatch_gpu_memory_used_bytes{"],
        ["sparkwatch_gpu_power_watts{"],
    ),
    "discrete": (
        "discrete",
        {},
        [],
        [
            'sparkwatch_gpu_memory_used_bytes{gpu="1"',
            'sparkwatch_gpu_power_limit_watts{gpu="0"',
            "sparkwatch_gpu_memory_utilization_ratio{",
        ],
    ),
}


async def first_sample(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/v1/stream?after=0") as ws:
        frames: list[dict[str, Any]] = []
        while len(frames) < 2:
            msg = await ws.receive(timeout=5)
            frames.extend(json.loads(line) for line in msg.data.split("\n"))
        return frames[0], frames[1]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_agent_process_per_profile(agent_factory: Any, fake_nvml_dir: pathlib.Path, profile: str) -> None:
    model, unsupported, absent, present = PROFILES[profile]
    agent = agent_factory("--node", "n1", "--interval", "0.05", env=_env(fake_nvml_dir, profile))
    status, health = get(f"{agent.url}/healthz")
    assert status == 200 and health["status"] == "ok" and health["backend"] == "nvml"
    _, text = get(f"{agent.url}/metrics")
    assert f'memory_model="{model}"' in text
    for series in absent:
        assert series not in text, series  # unknown: absent, not 0
    for series in present:
        assert series in text, series
    _, caps = get(f"{agent.url}/v1/capabilities")
    for gpu in caps["gpus"]:
        got = {f: c.get("reason") for f, c in gpu["fields"].items() if not c["supported"]}
        assert got == unsupported
        for field in unsupported:
            assert f'sparkwatch_field_supported{{field="{field}",gpu="{gpu["index"]}",node="n1"}} 0.0' in text
    hello, sample = asyncio.run(first_sample(agent.url))
    assert hello["type"] == "hello" and hello["memory_model"] == model
    assert sample["type"] == "sample" and sample["seq"] == 1 and sample["gpu_error"] is None
    gpu0 = sample["gpus"][0]
    assert gpu0["power_w"] == (5.0 if model == "unified" else 70.0)
    assert (gpu0["energy_j"] is None) == ("energy" in unsupported)
    assert (gpu0["mem_used_bytes"] is None) == (model == "unified")
    assert (
        sample["memory"]["used_bytes"]
        == sample["memory"]["total_bytes"] - sample["memory"]["available_bytes"]
    )


def test_agent_process_gpu_lost_then_back(
    agent_factory: Any, fake_nvml_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    control = tmp_path / "control"
    write_control(control, util=50)
    agent = agent_factory("--node", "spark-2", "--interval", "0.05", env=_env(fake_nvml_dir, "gb10", control))
    write_control(control, lost=1)
    # (an agent just started may answer 503 "no sample yet" first: wait for the loss itself)
    _, health = wait_for(
        lambda: (r := get(f"{agent.url}/healthz"))[0] == 503 and "LOST" in r[1]["reason"] and r
    )
    assert health["status"] == "degraded" and "GPU_IS_LOST" in health["reason"]
    _, text = get(f"{agent.url}/metrics")
    assert "sparkwatch_gpu_power_watts{" not in text  # GPU series gone, never a stale value
    assert 'sparkwatch_agent_gpu_up{node="spark-2"} 0.0' in text
    assert 'sparkwatch_memory_used_bytes{node="spark-2"}' in text  # host sampling continues
    write_control(control, util=50)
    wait_for(lambda: get(f"{agent.url}/healthz")[0] == 200, timeout_s=15)
    _, text = get(f"{agent.url}/metrics")
    assert 'sparkwatch_gpu_utilization_ratio{gpu="0",node="spark-2"' in text and "} 0.5" in text


def test_agent_process_without_nvml_library_keeps_running(agent_factory: Any) -> None:
    agent = agent_factory("--node", "nogpu", "--interval", "0.05", env={"LD_LIBRARY_PATH": "/nonexistent"})
    status, health = get(f"{agent.url}/healthz")
    assert status == 503 and "LIBRARY_NOT_FOUND" in health["reason"]
    _, text = get(f"{agent.url}/metrics")
    assert 'sparkwatch_memory_total_bytes{node="nogpu"}' in text and "sparkwatch_gpu_power_watts{" not in text


@pytest.mark.parametrize("refusals", [1, 99], ids=["sporadic", "for-good"])
def test_a_key_field_refused_at_the_probe_is_asked_again_and_a_refusal_for_good_is_said(
    nvml_profile: Any, caplog: pytest.LogCaptureFixture, refusals: int
) -> None:
    """One NOT_SUPPORTED for power at the probe turned power off for the agent's life, and the log said
    only that the backend was open (a sweep; agent.md: NOT_SUPPORTED may come sporadically)."""
    nvml_profile("gb10")
    asked = []

    def power_usage(handle: Any) -> int:
        asked.append(handle)
        if len(asked) <= refusals:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(pynvml.nvmlDeviceGetPowerUsage(handle))

    names = [n for n in dir(pynvml) if not n.startswith("__")]
    lib = types.SimpleNamespace(**{n: getattr(pynvml, n) for n in names})
    lib.nvmlDeviceGetPowerUsage = power_usage
    backend = NvmlBackend(lib=lib)
    with caplog.at_level(logging.WARNING, logger="sparkwatch_agent.hardware.nvml.backend"):
        inventory, _ = backend.open(128 * 10**9)
    backend.close()
    power = inventory.gpus[0].capabilities["power"]
    said = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    if refusals == 1:
        assert power.state == "supported" and said == []
    else:
        assert (power.state, power.reason, len(asked)) == ("unsupported", "NOT_SUPPORTED", 3)
        assert said == [
            f"GPU 0 ({inventory.gpus[0].uuid}): power (NOT_SUPPORTED) cannot be read (NVML asked up to 3"
            " times at the probe): not read until the agent starts again"
        ]
