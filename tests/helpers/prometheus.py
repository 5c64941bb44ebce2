"""A real Prometheus server (Debian's `prometheus`, installed by .ci/run) on a loopback port."""

from __future__ import annotations

import json
import pathlib
import shutil
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from helpers.engine_process import EngineProcess

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


class PrometheusError(Exception):
    pass


class Prometheus(EngineProcess):
    """`/usr/bin/prometheus` on a loopback port with its own TSDB directory."""

    name = "prometheus"
    ready_path = "/-/ready"

    def __init__(
        self,
        config: pathlib.Path,
        data: pathlib.Path,
        log: pathlib.Path,
        *,
        remote_write_receiver: bool = False,
    ) -> None:
        """``remote_write_receiver``: also take remote writes at ``write_url``."""
        super().__init__(log)
        self._start(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *(["--web.enable-remote-write-receiver"] if remote_write_receiver else []),
            ]
        )

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as err:  # 400/422 carry the PromQL error
            body = json.loads(err.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(body.get("error", body))
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        return list(self.api("/api/v1/query", **params)["result"])

    def values(self, expr: str, label: str = "node", at: float | None = None) -> dict[str, float]:
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(expr, at)}
