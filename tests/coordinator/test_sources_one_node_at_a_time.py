"""A source is read one node at a time, even a TSDB's without a nominal interval: the core finds the longest
interval the samples show as it measures, so a fleet's export never holds every node's samples at once."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from typing import Any

from test_core_export import RUN, T0, WINDOWS, S, node

from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.run_spec import NodeInput
from sparkwatch.core.windows import Window
from sparkwatch.sources import export_from


class CountingSource:
    """Nodes sampled every 0.1 s; says how many earlier nodes' GPU samples were still alive at each ask."""

    def __init__(self) -> None:
        self.earlier: list[weakref.ref[Any]] = []
        self.alive_at_ask: list[int] = []
        self.read: list[str] = []

    def describe(self) -> dict[str, Any]:
        return {"kind": "test", "metrics": "sparkwatch", "nodes_read": list(self.read)}

    def node_input(self, name: str, t_from_ns: int, t_to_ns: int) -> NodeInput:
        gc.collect()
        self.alive_at_ask.append(sum(ref() is not None for ref in self.earlier))
        made = node(name, 10.0, 60.0, [(20, 30)], 8.0)
        self.earlier.append(weakref.ref(made.gpus[0].power_w))
        self.read.append(name)
        return made

    def engine_input(self, t_from_ns: int, t_to_ns: int) -> EngineSamples | None:
        return None


def test_without_a_nominal_interval_nodes_are_still_read_one_at_a_time() -> None:
    source = CountingSource()
    short = Window("short", "timed", T0 + 21 * S, T0 + 21 * S + S // 20)  # 50 ms: under two intervals
    spec = dataclasses.replace(RUN, interval_s=0.0)
    export = export_from(source, spec, ["a", "b", "c"], [*WINDOWS, short], "0.1.0")
    assert source.alive_at_ask == [0, 0, 0]
    assert export["method"]["interval_s"] == 0.1  # the samples' own, found node by node
    assert export["source"]["nodes_read"] == ["a", "b", "c"]  # described after every node was read
    (judged,) = [w for w in export["windows"] if w["id"] == "short"]
    assert judged["verdict"] == "low_confidence" and "sampling intervals" in judged["reasons"][0]
    with_series = export_from(CountingSource(), spec, ["a", "b"], WINDOWS, "0.1.0", series_buckets=50)
    assert with_series["method"]["interval_s"] == 0.1 and with_series["series"]["buckets"] == 50
