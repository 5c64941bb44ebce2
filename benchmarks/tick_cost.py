"""CPU time per sample: the agent's read path vs. bare nvidia-ml-py calls for the same fields.

Both run in this process against the same fake libnvidia-ml.so.1 (GB10 profile, no control file), so the
ctypes cost is identical and the ratio is our overhead. Repeated in interleaved rounds; medians reported.
Warm figures (back-to-back calls); what a tick costs cold, after a sleep, is in agent_overhead.py. The
capture line is the part of a tick that runs on its deadline; the sampler decodes later, in batches.

    python benchmarks/tick_cost.py [--samples 2000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from _common import load_fake_nvml_gb10, median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    load_fake_nvml_gb10()
    import pynvml

    from sparkwatch_agent.hardware.meminfo import MeminfoReader
    from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
    from sparkwatch_agent.sampling.leases import IntervalLeases
    from sparkwatch_agent.sampling.ring import SampleRing
    from sparkwatch_agent.sampling.sampler import Sampler

    backend = NvmlBackend()
    backend.open(None)
    meminfo = MeminfoReader()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    wanted = (
        b"\nMemTotal:",
        b"\nMemFree:",
        b"\nMemAvailable:",
        b"\nCached:",
        b"\nSReclaimable:",
        b"\nSwapTotal:",
        b"\nSwapFree:",
    )

    def bare() -> None:
        # The floor: the GB10's polled fields read directly and their values taken out (power, instant
        # power, energy, utilisation, temperature, SM clock, process memory), plus one /proc/meminfo read
        # picking the same keys the cheapest way we know (a find per key).
        pynvml.nvmlDeviceGetPowerUsage(handle)
        fv = pynvml.nvmlDeviceGetFieldValues(handle, [(186, 0)])[0]
        _ = fv.nvmlReturn, fv.value.uiVal
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
        _ = rates.gpu
        pynvml.nvmlDeviceGetTemperature(handle, 0)
        pynvml.nvmlDeviceGetClockInfo(handle, 1)
        sum(p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        with open("/proc/meminfo", "rb") as f:
            text = b"\n" + f.read()
        for key in wanted:
            i = text.find(key) + len(key)
            int(text[i : text.find(b"\n", i)].split()[0])

    def read_path() -> None:
        backend.read()
        meminfo.read()

    def capture_path() -> None:
        backend.capture()
        meminfo.capture()

    sampler = Sampler(
        node="bench",
        boot_id="b",
        gpu=NvmlBackend(),
        memory=meminfo,
        sensors=None,
        leases=IntervalLeases(1.0),
        ring=SampleRing(args.samples * args.rounds * 2 + 10),
    )
    sampler.tick()

    def full_tick() -> None:
        sampler.tick()

    def per_sample_us(fn: Callable[[], None]) -> float:
        t0 = time.process_time()
        for _ in range(args.samples):
            fn()
        return (time.process_time() - t0) / args.samples * 1e6

    paths = {"bare": bare, "read": read_path, "capture": capture_path, "tick": full_tick}
    results: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(args.rounds):  # interleaved so machine noise hits every path alike
        for name, fn in paths.items():
            results[name].append(per_sample_us(fn))

    def ratio(name: str) -> float:
        return median([x / y for x, y in zip(results[name], results["bare"], strict=True)])

    labels = {
        "bare": "baseline  bare pynvml calls + /proc/meminfo",
        "read": "agent     read path (backend.read + meminfo.read)",
        "capture": "agent     capture only (what runs on a deadline)",
        "tick": "agent     full tick (+ decode, sample, JSON, ring)",
    }
    print(f"samples/round={args.samples} rounds={args.rounds} (CPU time per sample, medians)")
    for name, label in labels.items():
        tail = f"   ratio {ratio(name):.2f}x" if name != "bare" else ""
        print(f"{label:52s}: {median(results[name]):8.1f} us{tail}")
    backend.close()
    sampler.stop()


if __name__ == "__main__":
    main()
