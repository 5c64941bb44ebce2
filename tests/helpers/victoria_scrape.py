"""A real VictoriaMetrics (Debian's `victoria-metrics`) on a loopback port, scraping targets itself
(``-promscrape.config``) into its own data directory."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import time
import urllib.request

from helpers.processes import free_port

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


class VictoriaScraper:
    def __init__(self, config: pathlib.Path, data: pathlib.Path, log: pathlib.Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            [
                VICTORIA,
                f"-storageDataPath={data}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-promscrape.config={config}",
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"victoria-metrics exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"victoria-metrics not ready: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
