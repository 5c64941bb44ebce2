"""The two remote-write receivers the engine tests write to: a real Prometheus with its receiver on (it
scrapes nothing) and a real VictoriaMetrics, each in its own folder under ``tmp``, started, not yet ready."""

from __future__ import annotations

import os
import pathlib

import pytest

from helpers.prometheus import PROMETHEUS, Prometheus
from helpers.victoria import VICTORIA, Victoria


def start_receivers(tmp: pathlib.Path) -> tuple[Prometheus, Victoria]:
    for binary, package in ((PROMETHEUS, "prometheus"), (VICTORIA, "victoria-metrics")):
        if not os.access(binary, os.X_OK):
            pytest.fail(f"{package} missing: install the Debian package {package} (.ci/run does)")
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")  # it scrapes nothing: it only receives
    prometheus = Prometheus(config, tmp / "prom", tmp / "prometheus.log", remote_write_receiver=True)
    return prometheus, Victoria(tmp / "vm", tmp / "victoria.log")
