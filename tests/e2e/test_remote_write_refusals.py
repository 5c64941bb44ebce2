"""A real Prometheus (remote-write receiver on) refuses a whole request with 400 for one sample out of
order: a second writer of one node's series (two coordinators, a clock stepped back) made every node's
samples in the same batch go, for as long as the conflict lasted. The sender sends such a batch again one
node at a time: only the node whose samples conflict loses them."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

from helpers.frames import T0, sample_frame
from helpers.prometheus import PROMETHEUS, Prometheus
from helpers.write_receiver import HELLO, Sleeps, until, writer
from sparkwatch.wire import SampleFrame


def frames(first: int, count: int) -> list[SampleFrame]:
    return [
        sample_frame(seq, {"power_w": 10.0 + seq, "util_ratio": 0.5}) for seq in range(first, first + count)
    ]


@pytest.fixture
def prometheus(tmp_path: pathlib.Path) -> Iterator[Prometheus]:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail("prometheus missing: install the Debian package prometheus (.ci/run does)")
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")  # it scrapes nothing: it only receives
    prometheus = Prometheus(
        config, tmp_path / "prom", tmp_path / "prometheus.log", remote_write_receiver=True
    )
    try:
        prometheus.wait_ready()
        yield prometheus
    finally:
        prometheus.stop()


async def test_one_nodes_conflict_with_another_writer_drops_only_its_samples(prometheus: Prometheus) -> None:
    first = writer(prometheus.write_url, Sleeps())  # another coordinator, ahead on n1's series
    first.offer("n1", HELLO, frames(10, 3))
    first.start()
    await until(lambda: first.stats.sent == 3)
    await first.stop()

    second = writer(prometheus.write_url, Sleeps())
    second.offer("n1", HELLO, frames(1, 3))  # older than the n1 samples Prometheus holds: out of order
    second.offer("n2", {**HELLO, "node": "n2", "boot_id": "b2"}, frames(1, 2))
    second.start()
    await until(lambda: second.stats.pending == 0)
    await second.stop()
    assert (second.stats.sent, second.stats.dropped) == (2, {"rejected": 3})

    at = T0 / 1e9 + 60
    held = prometheus.values("count_over_time(sparkwatch_gpu_power_watts[5m])", at=at)
    assert held == {"n1": 3.0, "n2": 2.0}  # n1's from the first writer alone; n2's all
