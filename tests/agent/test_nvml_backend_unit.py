"""NvmlBackend against an injected pynvml-shaped fake: probing, gaps, device-level failures, bogus values."""

from __future__ import annotations

import pytest

from doubles.nvml_fake import (
    DRIVER_NOT_LOADED,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeNvml,
    gb10_fake,
)
from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
from sparkwatch_agent.hardware.nvml.direct import process_total
from sparkwatch_agent.hardware.readings import DeviceError

HOST_128G = 128 * 10**9


def test_gb10_probe_marks_unsupported_and_untrusted_fields() -> None:
    backend = NvmlBackend(lib=gb10_fake())
    inventory, model = backend.open(HOST_128G)
    assert model == "unified"
    caps = inventory.gpus[0].capabilities
    assert caps["memory_info"].state == "unsupported" and caps["memory_info"].reason == "NOT_SUPPORTED"
    assert caps["power_limit"].reason == "NOT_SUPPORTED"
    assert caps["memory_utilization"].state == "untrusted"
    assert caps["power_instant"].state == "supported" and caps["power_instant"].detail == "scope=gpu"
    assert inventory.gpus[0].pcie_link_trusted is False
    assert inventory.cuda_driver_version == "13.0"
    (reading,) = backend.read()
    assert reading.power_w == 7.0
    assert reading.power_instant_w == 7.1
    assert reading.energy_j == 5000.0
    assert reading.util_ratio == 0.4
    assert reading.mem_util_ratio is None  # bogus 0 is not reported
    assert reading.mem_used_bytes is None and reading.power_limit_w is None
    assert reading.sm_clock_hz == 1.5e9
    assert reading.process_mem_bytes == 1 << 30
    assert reading.read_errors == ()


def test_unsupported_fields_are_never_polled_again() -> None:
    lib = gb10_fake()
    backend = NvmlBackend(lib=lib)
    backend.open(HOST_128G)
    lib.calls.clear()
    backend.read()
    backend.read()
    assert "nvmlDeviceGetMemoryInfo" not in lib.calls
    assert "nvmlDeviceGetEnforcedPowerLimit" not in lib.calls
    assert lib.calls.count("nvmlDeviceGetUtilizationRates") == 2  # one call serves both ratios


def test_probe_reasons_function_not_found_and_no_permission() -> None:
    lib = FakeNvml([FakeGpu(mem_total=80 * 2**30, mem_used=2**30, limit_mw=700_000)])
    lib.errors["nvmlDeviceGetTotalEnergyConsumption"] = FUNCTION_NOT_FOUND
    lib.errors["nvmlDeviceGetComputeRunningProcesses"] = NO_PERMISSION
    inventory, model = NvmlBackend(lib=lib).open(HOST_128G)
    caps = inventory.gpus[0].capabilities
    assert model == "discrete"
    assert caps["energy"].reason == "FUNCTION_NOT_FOUND"
    assert caps["process_memory"].reason == "NO_PERMISSION"
    assert caps["memory_utilization"].state == "supported"
    assert caps["power_limit"].detail == "enforced"


def test_module_scope_used_when_gpu_scope_fails() -> None:
    lib = gb10_fake()
    lib.field_errors = {0: NOT_SUPPORTED}  # GPU scope refused, module scope answers
    inventory, _ = NvmlBackend(lib=lib).open(HOST_128G)
    assert inventory.gpus[0].capabilities["power_instant"].detail == "scope=module"


def test_failure_after_probe_is_a_gap_with_reason_not_zero_or_stale() -> None:
    lib = gb10_fake()
    backend = NvmlBackend(lib=lib)
    backend.open(HOST_128G)
    lib.errors["nvmlDeviceGetPowerUsage"] = UNKNOWN
    lib.errors["nvmlDeviceGetTotalEnergyConsumption"] = NOT_SUPPORTED  # sporadic, after a good probe
    (reading,) = backend.read()
    assert reading.power_w is None and reading.energy_j is None
    assert set(reading.read_errors) == {("power", "UNKNOWN"), ("energy", "NOT_SUPPORTED")}
    assert reading.util_ratio == 0.4  # the other fields are unaffected
    del lib.errors["nvmlDeviceGetPowerUsage"]
    (reading,) = backend.read()
    assert reading.power_w == 7.0  # not demoted: polled again
    assert reading.read_errors == (("energy", "NOT_SUPPORTED"),)


def test_out_of_range_utilisation_is_a_read_error() -> None:
    lib = gb10_fake()
    backend = NvmlBackend(lib=lib)
    backend.open(HOST_128G)
    lib.gpus[0].util = 255
    (reading,) = backend.read()
    assert reading.util_ratio is None
    assert ("utilization", "OUT_OF_RANGE") in reading.read_errors


def test_gpu_lost_during_read_is_a_device_error() -> None:
    lib = gb10_fake()
    backend = NvmlBackend(lib=lib)
    backend.open(HOST_128G)
    lib.errors["nvmlDeviceGetPowerUsage"] = GPU_IS_LOST
    with pytest.raises(DeviceError) as err:
        backend.read()
    assert err.value.reason == "GPU_IS_LOST"


def test_driver_not_loaded_at_init_is_a_device_error() -> None:
    lib = gb10_fake()
    lib.errors["nvmlInit"] = DRIVER_NOT_LOADED
    with pytest.raises(DeviceError) as err:
        NvmlBackend(lib=lib).open(HOST_128G)
    assert err.value.reason == "DRIVER_NOT_LOADED"


@pytest.mark.parametrize(
    ("gpu_total", "host_total", "expected"),
    [
        (0, HOST_128G, "unified"),
        (125 * 10**9, HOST_128G, "unified"),  # "succeeds with total = system RAM"
        (80 * 2**30, HOST_128G, "discrete"),
        (80 * 2**30, 24 * 2**30, "discrete"),  # a big card in a small host is still discrete
    ],
)
def test_memory_model_detection(gpu_total: int, host_total: int, expected: str) -> None:
    lib = FakeNvml([FakeGpu(mem_total=gpu_total)])
    inventory, model = NvmlBackend(lib=lib).open(host_total)
    assert model == expected
    # on unified memory NVML's memory figures are the host's (or nothing): never exported as GPU memory
    expected_state = "untrusted" if expected == "unified" else "supported"
    assert inventory.gpus[0].capabilities["memory_info"].state == expected_state


def test_process_memory_is_unknown_where_the_driver_hides_any_process_s() -> None:
    lib = FakeNvml([FakeGpu(mem_total=80 * 2**30, procs=[None, None])])
    backend = NvmlBackend(lib=lib)
    backend.open(HOST_128G)
    assert backend.read()[0].process_mem_bytes is None
    lib.gpus[0].procs = [None, 1 << 30, None]  # one known of three: 1 GiB is not the processes' total
    assert backend.read()[0].process_mem_bytes is None
    lib.gpus[0].procs = [1 << 30, 2 << 30]
    assert backend.read()[0].process_mem_bytes == 3 << 30
    lib.gpus[0].procs = []
    assert backend.read()[0].process_mem_bytes == 0  # no process at all is a true zero


def test_the_direct_readers_total_is_unknown_where_one_process_is() -> None:
    assert process_total([None, 1 << 30]) is None
    assert process_total([1 << 30, 2 << 30]) == 3 << 30 and process_total([]) == 0


def test_out_of_range_value_at_probe_is_a_gap_not_a_refusal() -> None:
    """Only NOT_SUPPORTED, FUNCTION_NOT_FOUND and NO_PERMISSION are for the agent's life (domain.md): a bad
    value at the probe leaves the field polled, each bad value a gap with its reason."""
    lib = gb10_fake()
    lib.gpus[0].util = 101
    backend = NvmlBackend(lib=lib)
    inventory, _ = backend.open(HOST_128G)  # must not raise: one bad field is not a device failure
    assert inventory.gpus[0].capabilities["utilization"].polled
    first = backend.read()[0]
    assert first.power_w == 7.0 and first.util_ratio is None
    assert ("utilization", "OUT_OF_RANGE") in first.read_errors
    lib.gpus[0].util = 80
    assert backend.read()[0].util_ratio == pytest.approx(0.8)


@pytest.mark.parametrize("code", [UNKNOWN, 10])  # UNKNOWN, TIMEOUT
def test_a_call_failing_for_now_at_the_probe_is_polled_all_the_same(code: int) -> None:
    """One TIMEOUT from the utilisation call at the agent's start switched the gate's only source on GB10
    off until a restart: every export's gated power was null."""
    lib = gb10_fake()
    lib.errors["nvmlDeviceGetUtilizationRates"] = code
    backend = NvmlBackend(lib=lib)
    inventory, _ = backend.open(HOST_128G)
    assert inventory.gpus[0].capabilities["utilization"].polled
    del lib.errors["nvmlDeviceGetUtilizationRates"]
    lib.gpus[0].util = 80
    assert backend.read()[0].util_ratio == pytest.approx(0.8)


def test_memory_info_failing_for_now_at_the_probe_leaves_a_discrete_gpu_discrete() -> None:
    """Polled all the same, but no total was read: that is no sign of unified memory (only NOT_SUPPORTED
    is); taken for unified, an 80 GiB card's memory figures would have been replaced by the host's."""
    lib = FakeNvml([FakeGpu(mem_total=80 * 2**30, mem_used=2**30)])
    lib.errors["nvmlDeviceGetMemoryInfo"] = 10  # TIMEOUT
    backend = NvmlBackend(lib=lib)
    inventory, model = backend.open(HOST_128G)
    assert model == "discrete" and inventory.gpus[0].capabilities["memory_info"].polled
    del lib.errors["nvmlDeviceGetMemoryInfo"]
    assert backend.read()[0].mem_used_bytes == 2**30


def test_a_binding_without_the_function_is_a_refusal_not_a_failure_for_now() -> None:
    """An nvidia-ml-py without ``…ClocksEventReasons``, on a GPU that refuses the older throttle call: the
    missing function read as an impossible value, polled every tick with a gap each time."""

    class OldBinding(FakeNvml):
        def __getattribute__(self, name: str) -> object:
            if name == "nvmlDeviceGetCurrentClocksEventReasons":
                raise AttributeError(name)
            return super().__getattribute__(name)

    lib = OldBinding([FakeGpu()])
    lib.errors["nvmlDeviceGetCurrentClocksThrottleReasons"] = NOT_SUPPORTED
    backend = NvmlBackend(lib=lib)
    inventory, _ = backend.open(HOST_128G)
    assert not inventory.gpus[0].capabilities["clock_events"].polled
    assert backend.read()[0].read_errors == ()


@pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND, NO_PERMISSION, 26])  # 26: DEPRECATED
def test_a_refusal_at_the_probe_is_for_the_agents_life(code: int) -> None:
    lib = gb10_fake()
    lib.errors["nvmlDeviceGetUtilizationRates"] = code
    inventory, _ = NvmlBackend(lib=lib).open(HOST_128G)
    assert inventory.gpus[0].capabilities["utilization"].state == "unsupported"


def test_unexpected_probe_exception_is_a_device_error_and_closes() -> None:
    lib = gb10_fake()

    def broken(_h: object) -> str:
        raise RuntimeError("binding bug")

    lib.nvmlDeviceGetName = broken  # type: ignore[method-assign]
    with pytest.raises(DeviceError):
        NvmlBackend(lib=lib).open(HOST_128G)
    assert lib.calls[-1] == "nvmlShutdown"


@pytest.mark.parametrize("order", [("unified", "discrete"), ("discrete", "unified")])
def test_each_gpu_keeps_its_own_memory_model_whatever_the_order(order: tuple[str, str]) -> None:
    """The probe once let the last GPU's memory model decide for every GPU of the node."""
    gpus = {
        "unified": FakeGpu(uuid="GPU-u"),  # memory info answers 0 bytes: unified
        "discrete": FakeGpu(uuid="GPU-d", mem_total=80 * 2**30, mem_used=2**30, mem_util=12),
    }
    inventory, model = NvmlBackend(lib=FakeNvml([gpus[kind] for kind in order])).open(HOST_128G)
    by_uuid = {gpu.uuid: gpu for gpu in inventory.gpus}
    assert model == "unified"  # host memory holds one GPU's allocations: the node figure is the host's
    discrete, unified = by_uuid["GPU-d"], by_uuid["GPU-u"]
    assert discrete.capabilities["memory_info"].polled and discrete.memory_total_bytes == 80 * 2**30
    assert discrete.capabilities["memory_utilization"].polled and discrete.pcie_link_trusted
    assert unified.capabilities["memory_info"].state == "untrusted" and unified.memory_total_bytes is None
    assert unified.capabilities["memory_utilization"].state == "untrusted" and not unified.pcie_link_trusted
