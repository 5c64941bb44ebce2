"""A real VictoriaMetrics (Debian's `victoria-metrics`, installed by .ci/run) on a loopback port, taking
remote writes at ``/api/v1/write`` (or scraping targets itself, with a ``-promscrape.config``) into its own
data directory; read back raw with ``/api/v1/export``."""

from __future__ import annotations

import json
import pathlib
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from helpers.engine_process import EngineProcess

VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


class Victoria(EngineProcess):
    name = "victoria-metrics"
    ready_path = "/health"

    def __init__(
        self,
        data: pathlib.Path,
        log: pathlib.Path,
        scrape_config: pathlib.Path | None = None,
        flags: Sequence[str] = (),
    ) -> None:
        super().__init__(log)
        self._start(
            [
                VICTORIA,
                f"-storageDataPath={data}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                *([f"-promscrape.config={scrape_config}"] if scrape_config else []),
                *flags,
            ]
        )

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
