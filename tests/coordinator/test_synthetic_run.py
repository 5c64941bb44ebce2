"""The synthetic run the report's tests and benchmark use: a valid export with what was asked for in it."""

from __future__ import annotations

from collections import Counter

import jsonschema
import pytest

from helpers.synthetic_run import GIB, IDLE_W, MEMORY_TOTAL_BYTES, synthetic_export
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.window_rows import plain


@pytest.fixture(scope="module")
def small() -> dict:
    return synthetic_export(hours=0.1, windows=40, series_buckets=400)


def test_the_small_run_is_a_valid_export_with_the_windows_and_nodes_asked_for(small: dict) -> None:
    jsonschema.validate(plain(small), run_schema())
    assert [n["node"] for n in small["nodes"]] == ["spark-1", "spark-2", "spark-3", "spark-4"]
    phases = Counter(w["phase"] for w in small["windows"])
    assert phases == {"warmup": 2, "timed": 38}
    assert [w["in_scope"] for w in small["windows"]] == [False] * 2 + [True] * 38
    assert small["method"]["interval_s"] == pytest.approx(0.1)
    # the demo's shape: a sys_total domain on every node but the last
    assert [n["system"] is not None for n in small["nodes"]] == [True, True, True, False]


def test_the_small_run_carries_its_trouble(small: dict) -> None:
    nodes = {n["node"]: n for n in small["nodes"]}
    for node in nodes.values():
        assert node["idle_power_w"] == pytest.approx(IDLE_W, abs=1.0)
        assert node["excluded_s"] > 0  # util dips under the gate at each request's edges
        assert 18 * GIB < node["memory_used_bytes"]["baseline"] < 26 * GIB
        assert 95 * GIB < node["memory_used_bytes"]["peak"] < MEMORY_TOTAL_BYTES
    coverage = {
        name: [w["nodes"][i]["coverage_ratio"] for w in small["windows"]] for i, name in enumerate(nodes)
    }
    assert coverage["spark-3"].count(0.0) >= 2  # the 30 s hole swallows whole requests
    assert sum(c < 0.95 for c in coverage["spark-2"]) == 1  # the restart's 2 s pause, inside one request
    assert min(coverage["spark-1"] + coverage["spark-4"]) == 1.0
    flagged = {r.split(":", 1)[0] for w in small["windows"] for r in w["reasons"] if "throttled:" in r}
    assert flagged == {"spark-1"}
    verdicts = Counter(w["verdict"] for w in small["windows"] if w["in_scope"])
    assert verdicts["ok"] > 0 and verdicts["low_confidence"] > 0 and verdicts["incomplete"] > 0


def test_the_same_seed_gives_the_same_run_and_sizes_follow_the_arguments() -> None:
    a = synthetic_export(hours=0.05, nodes=2, windows=12, seed=3)
    assert a == synthetic_export(hours=0.05, nodes=2, windows=12, seed=3)
    assert len(a["nodes"]) == 2 and len(a["windows"]) == 12
    other = synthetic_export(hours=0.05, nodes=2, windows=12, seed=4)
    energy = a["nodes"][0]["energy_j"]
    assert energy is not None and energy != other["nodes"][0]["energy_j"]


def test_the_series_block_shows_the_trouble(small: dict) -> None:
    series = small["series"]
    assert series["buckets"] == 400
    nodes = {n["node"]: n for n in series["nodes"]}
    assert list(nodes) == ["spark-1", "spark-2", "spark-3", "spark-4"]
    # one slowdown, on spark-1 only, two minutes long; idle low clocks say gpu_idle and are no throttle
    (episode,) = nodes["spark-1"]["throttle"]
    assert episode["t_s"][1] - episode["t_s"][0] == pytest.approx(120, abs=0.5)
    assert "sw_thermal" in episode["reasons"]
    assert all(not nodes[n]["throttle"] for n in ("spark-2", "spark-3", "spark-4"))
    # the hole and the restart break spark-3's and spark-2's lines; the others are unbroken
    power = {name: next(ln for ln in n["lines"] if ln["kind"] == "gpu_power_w") for name, n in nodes.items()}
    assert [name for name, ln in power.items() if None in ln["v"]] == ["spark-2", "spark-3"]
    assert all(n["gated_out"] for n in nodes.values())  # util under the gate at request edges
    assert synthetic_export(hours=0.05, nodes=1, windows=5, series_buckets=None).get("series") is None
