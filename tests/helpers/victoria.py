"""A real VictoriaMetrics (Debian's `victoria-metrics`, installed by .ci/run) on a loopback port, taking
remote writes at ``/api/v1/write`` (or scraping targets itself, with a ``-promscrape.config``) into its own
data directory; read back raw with ``/api/v1/export``."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Any

from helpers.processes import free_port

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


class Victoria:
    def __init__(
        self, data: pathlib.Path, log: pathlib.Path, scrape_config: pathlib.Path | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.write_url = f"{self.url}/api/v1/write"
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            [
                VICTORIA,
                f"-storageDataPath={data}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                *([f"-promscrape.config={scrape_config}"] if scrape_config else []),
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

    def settle(self, match: str, quiet_s: float = 2.0, timeout_s: float = 30.0) -> int:
        """Until the samples ``match`` selects stop changing for ``quiet_s``; returns their number. Rows just
        written become searchable a few seconds later (buffered, then merged in the background): neither
        ``/internal/force_flush`` nor ``vm_pending_rows`` reaching 0 says they are all there."""
        deadline = time.monotonic() + timeout_s
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            count = sum(len(s["timestamps"]) for s in self.export(match))
            if count != last:
                last, since = count, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return count
            time.sleep(0.25)
        raise AssertionError(f"victoria-metrics kept changing what {match} selects")

    def export(self, match: str) -> list[dict[str, Any]]:
        """Every raw sample of the series ``match`` selects, one JSON object per series (metric, values,
        timestamps in ms); :meth:`settle` first for rows just written."""
        urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=10).read()
        query = urllib.parse.urlencode({"match[]": match, "start": "0"})
        with urllib.request.urlopen(f"{self.url}/api/v1/export?{query}", timeout=30) as r:
            return [json.loads(line) for line in r.read().splitlines() if line.strip()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()
