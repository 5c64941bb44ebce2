"""Tests of the fake NVML library itself (tests/doubles/fake_nvml), through the real pynvml.

Each check runs a short snippet in a subprocess so that every case gets a fresh
dlopen() and its own environment; the snippet prints one JSON object.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from doubles.fake_nvml import LIBRARY_NAME, build_fake_nvml, write_control

TESTS_DIR = pathlib.Path(__file__).resolve().parents[1]

# Prepended to every snippet: pynvml, the helpers, and a call wrapper that
# turns NVMLError into {"error": code, "exc": class name}.
PRELUDE = textwrap.dedent(
    f"""
    import ctypes, json, os, pathlib, sys, time
    sys.path.insert(0, {str(TESTS_DIR)!r})
    import pynvml
    from doubles.fake_nvml import write_control

    def call(fn, *args):
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            return {{"error": e.value, "exc": type(e).__name__}}

    def out(**kw):
        print(json.dumps(kw))
    """
)


@pytest.fixture(scope="module")
def lib_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    so = build_fake_nvml(tmp_path_factory.mktemp("fake_nvml"))
    assert so.name == LIBRARY_NAME
    return so.parent


def run_snippet(
    code: str,
    lib_dir: pathlib.Path | None,
    profile: str | None = None,
    control: pathlib.Path | None = None,
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    env.pop("LD_LIBRARY_PATH", None)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    if profile is not None:
        env["FAKE_NVML_PROFILE"] = profile
    if control is not None:
        env["FAKE_NVML_CONTROL"] = str(control)
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


SURVEY = """
pynvml.nvmlInit()
n = pynvml.nvmlDeviceGetCount()
devs = []
for i in range(n):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    fv = pynvml.nvmlDeviceGetFieldValues(h, [(186, 0), (185, 0), (186, 1), 999])
    procs = call(pynvml.nvmlDeviceGetComputeRunningProcesses_v3, h)
    if isinstance(procs, list):
        procs = [[p.pid, p.usedGpuMemory] for p in procs]
    def mem(*a):
        m = call(pynvml.nvmlDeviceGetMemoryInfo, h, *a)
        return m if isinstance(m, dict) else {k: getattr(m, k) for k, _ in m._fields_}
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    devs.append(dict(
        name=pynvml.nvmlDeviceGetName(h),
        uuid=pynvml.nvmlDeviceGetUUID(h),
        index=pynvml.nvmlDeviceGetIndex(h),
        power=pynvml.nvmlDeviceGetPowerUsage(h),
        fields=[[v.fieldId, v.scopeId, v.nvmlReturn, v.valueType, v.value.uiVal, v.timestamp]
                for v in fv],
        energy=call(pynvml.nvmlDeviceGetTotalEnergyConsumption, h),
        util=[util.gpu, util.memory],
        temp=pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        sm=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        memclk=call(pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
        mem=mem(),
        mem2=mem(pynvml.nvmlMemory_v2),
        limit=call(pynvml.nvmlDeviceGetPowerManagementLimit, h),
        enforced=call(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
        default=call(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h),
        constraints=call(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h),
        procs=procs,
        pcie=[pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h),
              pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)],
        fan=call(pynvml.nvmlDeviceGetFanSpeed, h),
    ))
out(
    count=n,
    driver=pynvml.nvmlSystemGetDriverVersion(),
    cuda=pynvml.nvmlSystemGetCudaDriverVersion(),
    cuda2=pynvml.nvmlSystemGetCudaDriverVersion_v2(),
    bad_index=call(pynvml.nvmlDeviceGetHandleByIndex, n),
    now_us=int(time.time() * 1e6),
    devs=devs,
)
"""

NOT_SUPPORTED = {"error": 3, "exc": "NVMLError_NotSupported"}
GIB = 1024**3


def check_common(r: dict[str, Any]) -> None:
    assert r["driver"] == "580.95.05"
    assert r["cuda"] == r["cuda2"] == 13000
    assert r["bad_index"] == {"error": 2, "exc": "NVMLError_InvalidArgument"}
    assert r["devs"][0]["fan"]["exc"] == "NVMLError_FunctionNotFound"


@pytest.mark.parametrize("profile", [None, "gb10", "gb10-noenergy"])
def test_gb10_profiles(lib_dir: pathlib.Path, profile: str | None) -> None:
    r = run_snippet(SURVEY, lib_dir, profile=profile)
    check_common(r)
    assert r["count"] == 1
    (d,) = r["devs"]
    assert d["name"] == "NVIDIA GB10"
    assert d["uuid"] == "GPU-5a1e0000-0000-4000-8000-000000000b10"
    assert d["index"] == 0
    assert d["power"] == 5000
    uint = 1  # NVML_VALUE_TYPE_UNSIGNED_INT
    assert [f[:5] for f in d["fields"]] == [
        [186, 0, 0, uint, 5000],
        [185, 0, 0, uint, 5000],
        [186, 1, 3, 0, 0],
        [999, 0, 3, 0, 0],
    ]
    assert abs(d["fields"][0][5] - r["now_us"]) < 10_000_000
    if profile == "gb10-noenergy":
        assert d["energy"] == NOT_SUPPORTED
    else:
        assert 1234567890 <= d["energy"] < 1234567890 + 5000  # < 1 s at 5 W
    assert d["util"] == [0, 0]
    assert d["temp"] == 40
    assert d["sm"] == 208
    assert d["memclk"] == NOT_SUPPORTED
    assert d["mem"] == d["mem2"] == NOT_SUPPORTED
    assert d["limit"] == d["enforced"] == d["default"] == d["constraints"] == NOT_SUPPORTED
    assert d["procs"] == [[4242, 9 * GIB]]
    assert d["pcie"] == [1, 1]


def test_discrete_profile(lib_dir: pathlib.Path) -> None:
    r = run_snippet(SURVEY, lib_dir, profile="discrete")
    check_common(r)
    assert r["count"] == 2
    assert len({d["uuid"] for d in r["devs"]}) == 2
    total, used = 85520809984, 1 * GIB + 20 * GIB
    for i, d in enumerate(r["devs"]):
        assert d["name"] == "NVIDIA H100 80GB HBM3"
        assert d["uuid"].startswith("GPU-")
        assert d["index"] == i
        assert d["power"] == 70000
        assert [f[2] for f in d["fields"]] == [0, 0, 3, 3]
        assert d["fields"][0][4] == d["fields"][1][4] == 70000
        assert isinstance(d["energy"], int) and d["energy"] >= 1234567890
        assert d["util"] == [0, 0]
        assert d["temp"] == 35
        assert d["sm"] == 345
        assert d["mem"] == {"total": total, "free": total - used, "used": used}
        reserved = 512 * 1024**2
        assert d["mem2"] == {
            "version": 0x02000028,
            "total": total,
            "reserved": reserved,
            "free": total - used,
            "used": used - reserved,
        }
        assert d["limit"] == d["enforced"] == d["default"] == 700000
        assert d["constraints"] == [200000, 700000]
        assert len(d["procs"]) == 1 and d["procs"][0][1] == 20 * GIB
        assert d["pcie"] == [5, 16]
    assert r["devs"][0]["procs"][0][0] != r["devs"][1]["procs"][0][0]


def test_util_changes_power_and_energy(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    write_control(control, util=0)
    code = f"""
    ctl = pathlib.Path({str(control)!r})
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    p0 = pynvml.nvmlDeviceGetPowerUsage(h)
    t0 = time.monotonic(); e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    time.sleep(0.2)
    e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h); t1 = time.monotonic()
    write_control(ctl, util=80)
    p1 = pynvml.nvmlDeviceGetPowerUsage(h)
    fv = pynvml.nvmlDeviceGetFieldValues(h, [186])[0].value.uiVal
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    t2 = time.monotonic(); e2 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    time.sleep(0.2)
    e3 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h); t3 = time.monotonic()
    temp = pynvml.nvmlDeviceGetTemperature(h, 0)
    sm = pynvml.nvmlDeviceGetClockInfo(h, 1)
    write_control(ctl, util=80, power_mw=12345)
    p2 = pynvml.nvmlDeviceGetPowerUsage(h)
    ctl.unlink()
    p3 = pynvml.nvmlDeviceGetPowerUsage(h)
    pynvml.nvmlInit()  # re-init resets the energy counter
    e4 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    out(p=[p0, p1, fv, p2, p3], util=[u.gpu, u.memory], temp=temp, sm=sm,
        rate0=[e1 - e0, t1 - t0], rate1=[e3 - e2, t3 - t2], e4=e4)
    """
    r = run_snippet(code, lib_dir, profile="gb10", control=control)
    assert r["p"] == [5000, 5000 + 450 * 80, 5000 + 450 * 80, 12345, 5000]
    assert r["util"] == [80, 0]  # GB10: memory utilisation always 0
    assert r["temp"] == 40 + 80 // 4
    assert r["sm"] == 208 + 22 * 80
    for (de, dt), mw in ((r["rate0"], 5000), (r["rate1"], 41000)):
        assert mw * 0.2 - 1 <= de <= mw * dt + 1
    assert 1234567890 <= r["e4"] < 1234567890 + 41000


def test_discrete_memory_util_and_energy_per_device(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    write_control(control, util=100)
    code = """
    pynvml.nvmlInit()
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(hs[0])
    time.sleep(0.1)
    e1 = [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in hs]
    u = pynvml.nvmlDeviceGetUtilizationRates(hs[1])
    out(p=pynvml.nvmlDeviceGetPowerUsage(hs[1]), util=[u.gpu, u.memory],
        temp=pynvml.nvmlDeviceGetTemperature(hs[0], 0), d0=e1[0] - e0, d1=e1[1] - e0)
    """
    r = run_snippet(code, lib_dir, profile="discrete", control=control)
    assert r["p"] == 700000
    assert r["util"] == [100, 50]
    assert r["temp"] == 35 + 100 // 3
    assert r["d0"] >= 70000 - 1  # 0.1 s at 700 W
    assert r["d1"] > r["d0"]  # device 1 was read later: separate accumulator


def test_lost_gpu(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    write_control(control)
    code = f"""
    ctl = pathlib.Path({str(control)!r})
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    write_control(ctl, lost=1)
    lost = [call(pynvml.nvmlDeviceGetPowerUsage, h), call(pynvml.nvmlDeviceGetName, h),
            call(pynvml.nvmlDeviceGetFieldValues, h, [186])]
    count = pynvml.nvmlDeviceGetCount()
    handle = call(pynvml.nvmlDeviceGetHandleByIndex, 0)
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        raised = None
    except pynvml.NVMLError_GpuIsLost:  # pynvml's name for NVML_ERROR_GPU_IS_LOST
        raised = "GpuIsLost"
    write_control(ctl, lost=0)
    out(lost=lost, count=count, handle=handle, raised=raised,
        back=pynvml.nvmlDeviceGetPowerUsage(h))
    """
    r = run_snippet(code, lib_dir, control=control)
    lost = {"error": 15, "exc": "NVMLError_GpuIsLost"}
    assert r["lost"] == [lost, lost, lost]
    assert r["handle"] == lost
    assert r["raised"] == "GpuIsLost"
    assert r["count"] == 1
    assert r["back"] == 5000


def test_init_error(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    write_control(control, init_error=9)
    code = f"""
    try:
        pynvml.nvmlInit()
        first = None
    except pynvml.NVMLError_DriverNotLoaded as e:
        first = str(e)
    after = call(pynvml.nvmlDeviceGetCount)
    write_control(pathlib.Path({str(control)!r}))
    pynvml.nvmlInit()
    out(first=first, after=after, count=pynvml.nvmlDeviceGetCount())
    """
    r = run_snippet(code, lib_dir, control=control)
    assert r["first"] == "Driver Not Loaded"
    assert r["after"]["error"] == 1  # UNINITIALIZED
    assert r["count"] == 1


def test_injected_failures(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "control"
    write_control(
        control,
        fail=["nvmlDeviceGetPowerUsage:999", "nvmlDeviceGetUUID:4"],
        fail_field="185:0:15",
    )
    code = """
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    fv = pynvml.nvmlDeviceGetFieldValues(h, [186, 185])
    out(power=call(pynvml.nvmlDeviceGetPowerUsage, h),
        uuid=call(pynvml.nvmlDeviceGetUUID, h),
        name=pynvml.nvmlDeviceGetName(h),
        fields=[[v.nvmlReturn, v.value.uiVal] for v in fv])
    """
    r = run_snippet(code, lib_dir, control=control)
    assert r["power"] == {"error": 999, "exc": "NVMLError_Unknown"}
    assert r["uuid"] == {"error": 4, "exc": "NVMLError_NoPermission"}
    assert r["name"] == "NVIDIA GB10"
    assert r["fields"] == [[0, 5000], [15, 0]]


def test_unknown_profile_and_missing_control_file(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    r = run_snippet("out(init=call(pynvml.nvmlInit))", lib_dir, profile="tpu")
    assert r["init"] == {"error": 999, "exc": "NVMLError_Unknown"}
    code = """
    pynvml.nvmlInit()
    out(power=pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0)))
    """
    r = run_snippet(code, lib_dir, control=tmp_path / "does-not-exist")
    assert r["power"] == 5000


def test_raw_abi(lib_dir: pathlib.Path) -> None:
    """Return codes pynvml hides: uninitialised calls, sizing protocol, bad handles."""
    code = f"""
    lib = ctypes.CDLL({str(lib_dir / LIBRARY_NAME)!r})
    n = ctypes.c_uint(0)
    before = lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
    init = lib.nvmlInitWithFlags(0)
    h = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    size_q = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None)
    null_handle = lib.nvmlDeviceGetPowerUsage(None, ctypes.byref(n))
    bogus_handle = lib.nvmlDeviceGetPowerUsage(ctypes.c_void_p(16), ctypes.byref(n))
    null_out = lib.nvmlDeviceGetPowerUsage(h, None)
    small = ctypes.create_string_buffer(4)
    short_buf = lib.nvmlDeviceGetName(h, small, 4)
    lib.nvmlErrorString.restype = ctypes.c_char_p
    strings = {{c: lib.nvmlErrorString(c).decode() for c in (0, 1, 2, 3, 4, 7, 9, 12, 13, 15, 999)}}
    shut = [lib.nvmlShutdown(), lib.nvmlShutdown()]
    out(before=before, init=init, size_q=size_q, count=n.value, null_handle=null_handle,
        bogus_handle=bogus_handle, null_out=null_out, short_buf=short_buf, strings=strings,
        shut=shut)
    """
    r = run_snippet(code, lib_dir=None)
    assert r["before"] == 1
    assert r["init"] == 0
    assert r["size_q"] == 7
    assert r["null_handle"] == r["bogus_handle"] == r["null_out"] == 2
    assert r["short_buf"] == 7
    assert r["strings"]["0"] == "Success"
    assert r["strings"]["15"] == "GPU is lost"
    assert r["strings"]["999"] == "Unknown Error"
    assert len(set(r["strings"].values())) == 11
    assert r["shut"] == [0, 1]


def test_in_process_load_by_soname(lib_dir: pathlib.Path) -> None:
    """Pre-loading by absolute path lets pynvml's CDLL("libnvidia-ml.so.1") find it."""
    code = f"""
    assert "LD_LIBRARY_PATH" not in os.environ
    ctypes.CDLL({str((lib_dir / LIBRARY_NAME).resolve())!r}, mode=ctypes.RTLD_GLOBAL)
    os.environ["FAKE_NVML_PROFILE"] = "discrete"  # putenv: seen by the C getenv()
    pynvml.nvmlInit()
    out(count=pynvml.nvmlDeviceGetCount(),
        name=pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
    """
    r = run_snippet(code, lib_dir=None)
    assert r == {"count": 2, "name": "NVIDIA H100 80GB HBM3"}


def test_concurrent_callers(lib_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Sampling threads and a control-file writer can run at once."""
    control = tmp_path / "control"
    write_control(control)
    code = f"""
    import threading
    ctl = pathlib.Path({str(control)!r})
    pynvml.nvmlInit()
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    errors, reads = [], []
    def sample(h):
        last = 0
        try:
            for _ in range(300):
                e = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
                assert e >= last
                last = e
                assert pynvml.nvmlDeviceGetPowerUsage(h) in (70000, 70000 + 6300 * 50)
        except Exception as exc:
            errors.append(repr(exc))
        reads.append(last)
    ts = [threading.Thread(target=sample, args=(hs[i % 2],)) for i in range(4)]
    for t in ts: t.start()
    for i in range(20):
        write_control(ctl, util=50 * (i % 2))
    for t in ts: t.join()
    out(errors=errors, reads=len(reads))
    """
    r = run_snippet(code, lib_dir, profile="discrete", control=control)
    assert r == {"errors": [], "reads": 4}
