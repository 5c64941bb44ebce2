"""Values no engine can mean (a negative count, a count above 2**53, a ratio above 1: defaults.py) are left
out of a scrape as if the page lacked them, the rest of it kept: recorded vLLM and SGLang pages with such
values, parsed and scraped from a loopback server by the poller into a real store, and the export's figures
over those scrapes. A page of 1e308s ended the scraping task for good (``fsum`` overflowed), and one stored
1e308 gauge made every later window's mean 0 (a difference of running sums)."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import time
from collections.abc import Callable, Mapping

import aiohttp
import numpy as np
import pytest

from helpers.engine_replay import SGLANG, VLLM, EngineReplay, add_series, capture, with_values
from helpers.loopback import served
from sparkwatch.core.engine import EngineSamples, engine_export
from sparkwatch.core.failures import Failures
from sparkwatch.engines.families import FAMILIES
from sparkwatch.engines.poller import EnginePoller
from sparkwatch.engines.scrape import read_page
from sparkwatch.engines.spec import EngineSpec
from sparkwatch.store import Store

S = 1_000_000_000
T0 = 1_800_000_000 * S
RANK1 = {"engine": "1", "model_name": "llama-vllm-single"}


def test_values_no_engine_can_mean_are_left_out_of_the_scrape_and_the_rest_is_kept() -> None:
    page = with_values(
        capture(VLLM),
        {
            "vllm:num_requests_running": -50.0,
            "vllm:prompt_tokens_total": 1e308,
            "vllm:generation_tokens_total": float(2**53 + 2),  # the next float above the bound
            "vllm:kv_cache_usage_perc": 1.5,
            "vllm:num_requests_waiting": 4.0,
            "vllm:num_preemptions_total": float(2**53),  # on the bound: kept
        },
    )
    scrape = read_page(page)
    left_out = {"running_requests", "prompt_tokens", "generation_tokens", "kv_cache_usage_ratio"}
    assert not left_out & set(scrape.values) and not left_out & set(scrape.sources)
    assert scrape.values["waiting_requests"] == 4.0 and scrape.values["preemptions"] == 2.0**53
    assert scrape.values["prefix_cache_queries"] == 0.0  # the page's other series, as they were
    assert scrape.refused == {
        "vllm:num_requests_running": -50.0,
        "vllm:prompt_tokens_total": 1e308,
        "vllm:generation_tokens_total": float(2**53 + 2),
        "vllm:kv_cache_usage_perc": 1.5,
    }


def test_ranks_too_large_to_add_are_refused_not_raised_and_a_refused_name_falls_back_to_the_next() -> None:
    """Two ranks of 1e308 overflowed ``math.fsum``; two within the bound whose sum is beyond it are left
    out too (the store would refuse the sum), never summed in part. A ratio a hair above 1 is rounding."""
    page = with_values(
        capture(VLLM),
        {
            "vllm:prompt_tokens_total": 1e308,
            "vllm:generation_tokens_total": float(2**52 + 2**51),
            "vllm:kv_cache_usage_perc": 2.0,
            "vllm:gpu_cache_usage_perc": 0.4,  # the deprecated name, read where the new one is refused
        },
    )
    page = add_series(page, "vllm:prompt_tokens_total", RANK1, 1e308)
    page = add_series(page, "vllm:generation_tokens_total", RANK1, float(2**52 + 2**51))
    scrape = read_page(page)
    assert "prompt_tokens" not in scrape.values and "generation_tokens" not in scrape.values
    assert scrape.refused["vllm:generation_tokens_total"] == float(2**53 + 2**52)  # the sum over ranks
    assert scrape.values["kv_cache_usage_ratio"] == 0.4
    assert scrape.sources["kv_cache_usage_ratio"] == "vllm:gpu_cache_usage_perc"
    tp1 = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "tp_rank": "1"}
    sglang = add_series(capture(SGLANG), "sglang:token_usage", tp1, -3.0)
    sglang = with_values(sglang, {"sglang:cache_hit_rate": 1.0000005})
    read = read_page(sglang)  # tp rank 1 repeats rank 0's view: never read, so never refused
    assert read.values["kv_cache_usage_ratio"] == 0.28 and read.refused == {}
    assert read.values["prefix_cache_hit_ratio"] == 1.0000005


def test_every_ratio_field_of_the_tables_is_bounded_as_a_ratio() -> None:
    """defaults.ENGINE_RATIO_FIELDS (the store may not import the tables) names the tables' ratio fields."""
    from sparkwatch.defaults import ENGINE_RATIO_FIELDS  # here: absent before the bounds

    fields = {s.field for f in FAMILIES for s in f.series}
    assert set(ENGINE_RATIO_FIELDS) == {f for f in fields if f.endswith("_ratio")}


def _script(
    replay: EngineReplay, bad: Callable[[int], Mapping[str, float]], ranks: int = 1
) -> Callable[[float], str]:
    """Scrape k: counters at 40 k prompt and 100 k generated tokens, k % 4 requests running; then ``bad(k)``
    over them (with ``ranks`` 2, a second rank of each of its counters with the same value)."""

    def page(_: float) -> str:
        k = len(replay.served)
        good = {
            "vllm:prompt_tokens_total": 40.0 * k,
            "vllm:generation_tokens_total": 100.0 * k,
            "vllm:num_requests_running": float(k % 4),
        }
        text = with_values(capture(VLLM), {**good, **bad(k)})
        for name, value in bad(k).items():
            if ranks == 2 and name.endswith("_total"):
                text = add_series(text, name, RANK1, value)
        return text

    return page


async def test_a_page_of_impossible_values_does_not_end_the_scraping_task_and_the_next_pages_are_stored(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "sparkwatch.engines.poller")
    replay = EngineReplay(lambda _: "")
    bad = {"vllm:prompt_tokens_total": 1e308, "vllm:num_requests_running": -50.0}
    replay.script = _script(replay, lambda k: bad if k < 2 else {}, ranks=2)  # fsum(1e308, 1e308) overflowed
    store = Store(tmp_path / "engine.db")
    async for url in served(replay.app(), "/metrics"):
        poller = EnginePoller(EngineSpec(url, interval_s=0.2), store)
        async with aiohttp.ClientSession() as session:
            task = asyncio.create_task(poller.run(session))  # as the coordinator runs it
            deadline = time.monotonic() + 10.0
            while len(store.engine_rows(0, 2**62)) < 4 and not task.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            alive = not task.done()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert alive, f"the scraping task ended: {task.exception()!r}"
    rows = store.engine_rows(0, 2**62)
    assert len(rows) >= 4 and poller.state.failures == 0 and poller.state.error is None
    for row in rows[:2]:  # the pages of 1e308s: those series left out, the others stored
        assert "prompt_tokens" not in row.fields and "running_requests" not in row.fields
        assert row.fields["generation_tokens"] == 100.0 * rows.index(row)
    assert rows[2].fields["prompt_tokens"] == 80.0 and rows[3].fields["running_requests"] == 3.0
    said = [r.getMessage() for r in caplog.records if r.name == "sparkwatch.engines.poller"]
    out_of_bounds = [m for m in said if "out of bounds" in m]
    assert out_of_bounds == [  # once for both bad pages, naming the series and the value
        f"engine metrics at {url}: values out of bounds left out:"
        " vllm:num_requests_running -50.0, vllm:prompt_tokens_total 1e+308"
    ]
    assert f"engine metrics at {url}: every value within bounds again" in said
    store.close()


async def _scraped(path: pathlib.Path, bad: Callable[[int], Mapping[str, float]]) -> EngineSamples:
    """Six scrapes one second apart on the coordinator's clock (T0 + k s) into a real store, read back."""
    replay = EngineReplay(lambda _: "")
    replay.script = _script(replay, bad)
    store = Store(path)
    clock = [T0]
    async for url in served(replay.app(), "/metrics"):
        poller = EnginePoller(EngineSpec(url), store, now_ns=lambda: clock[0])
        async with aiohttp.ClientSession() as session:
            for _ in range(6):
                await poller.scrape_once(session)
                clock[0] += S
    rows = store.engine_rows(T0 - 100 * S, T0 + 100 * S)
    store.close()
    return EngineSamples.from_rows(rows, Failures(), (T0, T0 + 5 * S))


def _window(samples: EngineSamples, start_ns: int, end_ns: int) -> dict[str, object]:
    starts, ends = np.array([start_ns], np.int64), np.array([end_ns], np.int64)
    _, (window,) = engine_export(samples, starts, ends, starts, ends)
    return window


async def test_an_impossible_value_in_one_scrape_leaves_the_other_windows_figures_right(
    tmp_path: pathlib.Path,
) -> None:
    """A running gauge of 1e308 at 0 s made the mean of a window from 1.5 s on 0 (its running sum swallowed
    every later value); a counter of 1e308 at 3 s made its windows unknown ("went down")."""
    samples = await _scraped(
        tmp_path / "g.db", lambda k: {0: {"vllm:num_requests_running": 1e308}}.get(k, {})
    )
    window = _window(samples, T0 + 3 * S // 2, T0 + 9 * S // 2)  # 2, 3, 4 s, and 1 s held: 1, 2, 3, 0
    assert window["running_requests"] == {"mean": 1.5, "max": 3.0}
    counter = await _scraped(tmp_path / "c.db", lambda k: {3: {"vllm:prompt_tokens_total": 1e308}}.get(k, {}))
    across = _window(counter, T0 + 5 * S // 2, T0 + 9 * S // 2)  # 3 s left out: 2 s to 4 s interpolated
    assert across["prompt_tokens_per_s"] == pytest.approx(40.0)


async def test_a_huge_gauge_within_the_bounds_does_not_move_another_windows_mean(
    tmp_path: pathlib.Path,
) -> None:
    """2**53 - 1 requests at 0 s is kept (within the bound), and a window without it reads its own values:
    they were a difference of running sums, where 2**53 - 1 + 1 + 2 + 3 loses the 1s."""
    huge = {"vllm:num_requests_running": 2.0**53 - 1}
    samples = await _scraped(tmp_path / "e.db", lambda k: huge if k == 0 else {})
    window = _window(samples, T0 + 3 * S // 2, T0 + 9 * S // 2)
    assert window["running_requests"] == {"mean": 1.5, "max": 3.0}
