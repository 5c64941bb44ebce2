"""How true a 20 Hz interval's power is while the agent's other threads and the machine's other processes
compete: each interval's ΔE/Δt against the fake GPU's constant power, for the agent (its stamp right before
the energy counter read) and for the baseline, the read order before (a /proc/meminfo read and two NVML calls
between the stamp and the energy counter, each handing the GIL over), in interleaved rounds; medians reported.

The sampler reads the fake libnvidia-ml.so.1 through the real nvidia-ml-py and the real /proc/meminfo, as on
a node. A pure-Python thread stands in for a busy event loop (it keeps the GIL for the 5 ms switch interval
once it gets it) and ``--hogs`` processes spin on the cores, as a loaded machine's other work does. The
fake counts whole mJ: at its 7 W a 50 ms interval holds 350 mJ, so about 0.3 % is the counter's resolution.

    python benchmarks/stamp_skew.py [--rounds 5] [--seconds 6] [--hogs 2]
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import threading
from typing import Any

from _common import load_fake_nvml_gb10, median, percentile


def spin(stop: Any) -> None:
    while not stop.is_set():
        pass


class OldOrder:
    """The baseline's backend: the agent's, with what used to come between the stamp and the energy read
    (/proc/meminfo, then the power and instant-power calls) done first."""

    def __init__(self, backend: Any) -> None:
        import pynvml

        from sparkwatch_agent.hardware.meminfo import MeminfoReader

        self._backend, self._meminfo, self._nvml = backend, MeminfoReader(), pynvml
        self._handle: Any = None  # once the sampler has opened the backend (and NVML)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def capture(self) -> Any:
        if self._handle is None:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(0)
        self._meminfo.capture()  # one pread, as the sampler's own was
        self._nvml.nvmlDeviceGetPowerUsage(self._handle)
        self._nvml.nvmlDeviceGetFieldValues(self._handle, [(186, 0)])  # instant power
        return self._backend.capture()


def errors_of(samples: list[Any]) -> list[float]:
    """Each interval's |ΔE/Δt − P| / P, P the power the GPU reported (constant here)."""
    out = []
    for a, b in itertools.pairwise(samples):
        ga, gb = a.gpus[0], b.gpus[0]
        watts = (gb.energy_j - ga.energy_j) / ((b.t_mono_ns - a.t_mono_ns) / 1e9)
        out.append(abs(watts - gb.power_w) / gb.power_w)
    return out


def one_run(old_order: bool, seconds: float, interval_s: float) -> list[float]:
    from sparkwatch_agent.hardware.meminfo import MeminfoReader
    from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
    from sparkwatch_agent.sampling.leases import IntervalLeases
    from sparkwatch_agent.sampling.ring import SampleRing
    from sparkwatch_agent.sampling.sampler import Sampler

    samples: list[Any] = []
    backend = NvmlBackend()
    sampler = Sampler(
        node="n",
        boot_id="b",
        gpu=OldOrder(backend) if old_order else backend,
        memory=MeminfoReader(),
        sensors=None,
        leases=IntervalLeases(interval_s),
        ring=SampleRing(100_000),
        on_sample=samples.append,
    )
    stop = threading.Event()
    loop = threading.Thread(target=spin, args=(stop,))
    loop.start()
    sampler.start()
    stop.wait(seconds)
    sampler.stop()
    stop.set()
    loop.join()
    sampler.settle()
    return errors_of(samples[1:])  # the first capture opens the GPU: not a steady one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()

    load_fake_nvml_gb10()

    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=spin, args=(stop,)) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    figures: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    try:
        for _ in range(args.rounds):
            for old_order in (True, False):
                errors = one_run(old_order, args.seconds, args.interval)
                figures[old_order].append((percentile(errors, 50), percentile(errors, 95), max(errors)))
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
    print(
        f"interval {args.interval} s, {args.seconds} s x {args.rounds} rounds, {args.hogs} spinning "
        "processes, 1 GIL-holding thread (medians over rounds of each round's figure)"
    )
    print(f"{'':34} {'p50 error':>10} {'p95 error':>10} {'max error':>10}")
    for old_order, name in ((True, "baseline: the read order before"), (False, "agent: stamp, then energy")):
        cols = list(zip(*figures[old_order], strict=True))
        p50, p95, worst = (median(list(c)) for c in cols)
        print(f"{name:34} {p50:10.2%} {p95:10.2%} {worst:10.2%}")


if __name__ == "__main__":
    main()
