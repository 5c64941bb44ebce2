"""A TSDB server the tests start (Prometheus, VictoriaMetrics): a loopback port, its own log, started from
the command a subclass gives, ready once its readiness endpoint answers 200, stopped politely, then firmly."""

from __future__ import annotations

import pathlib
import subprocess
import time
import urllib.request

from helpers.processes import free_port


class EngineProcess:
    #: What the engine is called in failures, and the path that answers 200 once it serves.
    name = "engine"
    ready_path = "/"

    def __init__(self, log: pathlib.Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = f"{self.url}/api/v1/write"  # both take remote writes here (Prometheus when asked)
        self.log = log
        self._log_file = log.open("wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}{self.ready_path}", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"{self.name} not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
