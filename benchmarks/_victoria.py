"""VictoriaMetrics' on-disk size for a set of agent samples (store_size.py's second baseline).

A real single-node VictoriaMetrics (Debian's ``victoria-metrics``) on a loopback port is sent the samples
as Prometheus text exposition with explicit millisecond timestamps on ``/api/v1/import/prometheus`` (its
docs: "How to import data in Prometheus exposition format"; a line is ``<metric>{labels} <value>
<timestamp ms>``), one series per field the sparkwatch store keeps, named and labelled as the agent's
/metrics names them (unknown = no point). Then ``/internal/force_flush`` (in-memory buffers to disk) and
``/internal/force_merge?partition_prefix=YYYY_MM`` per month touched (a background merge: its docs say
the call returns at once), a wait until ``vm_active_merges`` is 0 and the directory's size holds still,
and ``du -sb`` of ``-storageDataPath``.
"""

from __future__ import annotations

import datetime
import pathlib
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator

from _common import free_port
from sparkwatch.wire import SampleFrame

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
SETTLE_S = 3.0  # the size must hold this long, merges idle, before it is read
SETTLE_TIMEOUT_S = 300.0


class BenchError(RuntimeError):
    """Something outside the benchmark failed (VictoriaMetrics would not start, refused samples)."""


def exposition(frames: Iterable[SampleFrame], node: str) -> Iterator[str]:
    """One line per known field value of each sample (11 for a GB10 frame with the sim's channels)."""
    for f in frames:
        ts = f.t_wall_ns // 1_000_000
        if f.mem_used_bytes is not None:
            yield f'sparkwatch_memory_used_bytes{{node="{node}"}} {f.mem_used_bytes} {ts}'
        for g in f.gpus:
            labels = f'node="{node}",gpu="{g.gpu_index}",uuid="{g.uuid}"'
            for name, value in (
                ("sparkwatch_gpu_power_watts", g.power_w),
                ("sparkwatch_gpu_energy_joules_total", g.energy_j),
                ("sparkwatch_gpu_utilization_ratio", g.util_ratio),
                ("sparkwatch_gpu_sm_clock_hertz", g.sm_clock_hz),
                ("sparkwatch_gpu_temperature_celsius", g.temperature_c),
                # the store keeps the reasons bitmask; the agent exposes it bit by bit (one series per
                # reason): one series of the mask is the like-for-like count
                ("sparkwatch_gpu_clock_event_reasons", g.clock_event_reasons),
            ):
                if value is not None:
                    yield f"{name}{{{labels}}} {value!r} {ts}"
        for s in f.sensors:
            labels = f'node="{node}",sensor="{s.sensor}",kind="{s.kind}"'
            if s.power_w is not None:
                yield f"sparkwatch_sensor_power_watts{{{labels}}} {s.power_w!r} {ts}"
            if s.energy_j is not None:
                yield f"sparkwatch_sensor_energy_joules_total{{{labels}}} {s.energy_j!r} {ts}"


class Victoria:
    """One VictoriaMetrics process over its own data directory, for the length of a ``with`` block."""

    def __init__(self, data: pathlib.Path) -> None:
        self.data = data
        self.url = ""
        self.sent = 0
        self.months: set[str] = set()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = data.with_suffix(".log")

    def __enter__(self) -> Victoria:
        if not pathlib.Path(VICTORIA).exists():
            raise BenchError(f"no {VICTORIA}: install the Debian package victoria-metrics")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(
                [VICTORIA, f"-storageDataPath={self.data}", f"-httpListenAddr=127.0.0.1:{port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait_ready()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise BenchError(f"victoria-metrics exited: {self._log.read_text()[-500:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise BenchError("victoria-metrics did not answer /health in 30 s")

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=120) as r:
            return bytes(r.read())

    def push(self, lines: list[str]) -> None:
        """One import request; the months its timestamps fall in are remembered for the merge."""
        if not lines:
            return
        body = ("\n".join(lines) + "\n").encode()
        request = urllib.request.Request(f"{self.url}/api/v1/import/prometheus", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=120) as r:
            if r.status != 204:
                raise BenchError(f"import answered HTTP {r.status}")
        self.sent += len(lines)
        for line in (lines[0], lines[-1]):
            ms = int(line.rsplit(" ", 1)[1])
            self.months.add(datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y_%m"))

    def metric(self, name: str) -> dict[str, float]:
        """The values of one of its own /metrics families by label set."""
        out = {}
        for line in self._get("/metrics").decode().splitlines():
            m = re.match(rf"^{name}(\{{[^}}]*\}})? (\S+)$", line)
            if m:
                out[m.group(1) or ""] = float(m.group(2))
        return out

    def du_bytes(self) -> int:
        return int(
            subprocess.run(["du", "-sb", str(self.data)], capture_output=True, text=True).stdout.split()[0]
        )

    def settled_size(self) -> int:
        """Flush, merge every month touched, wait for the merges and the size to settle; ``du -sb``."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:  # an import is answered before its rows reach the storage
            self._get("/internal/force_flush")
            added = sum(self.metric("vm_rows_added_to_storage_total").values())
            if added == self.sent:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"victoria-metrics stored {added:.0f} of {self.sent} points sent")
            time.sleep(0.5)
        for month in sorted(self.months):
            self._get(f"/internal/force_merge?partition_prefix={month}")
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        size, still_since = self.du_bytes(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            busy = sum(self.metric("vm_active_merges").values())
            now = self.du_bytes()
            if busy or now != size:
                size, still_since = now, time.monotonic()
            elif time.monotonic() - still_since >= SETTLE_S:
                return size
        raise BenchError(f"victoria-metrics' size did not settle in {SETTLE_TIMEOUT_S:.0f} s")
