"""The serving engine's /metrics: recorded vLLM and SGLang pages parsed by the mapping tables, scraped by
the poller from a loopback server with values scripted per scrape into a real store, and the core's engine
blocks and token cross-check over those scrapes."""

from __future__ import annotations

import math
import pathlib
import re
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from helpers.engine_replay import SGLANG, VLLM, EngineReplay, add_series, capture, with_values
from helpers.loopback import served
from sparkwatch.core.engine import (
    COUNTERS,
    FAILED_GAUGE,
    GAUGES,
    NO_SCRAPE,
    NO_SERIES,
    NO_SPEC,
    EngineSamples,
    attach_engine,
    engine_export,
)
from sparkwatch.core.failures import Failures, Reason
from sparkwatch.engines.families import FAMILIES
from sparkwatch.engines.poller import EnginePoller
from sparkwatch.engines.scrape import ScrapeError, read_page
from sparkwatch.engines.spec import EngineSpec, engine_from_url
from sparkwatch.links.nodes_file import NodesFileError, parse_nodes_file
from sparkwatch.store import Store

S = 1_000_000_000
T0 = 1_800_000_000 * S


def test_the_recorded_vllm_page_maps_to_our_fields_and_ignores_created_series() -> None:
    page = with_values(capture(VLLM), {"vllm:prompt_tokens_total": 120.0, "vllm:num_requests_running": 3.0})
    scrape = read_page(page)
    assert scrape.family == "vllm" and scrape.unknown == ()
    # the _created sibling (1.77e9, a Unix time) is never taken for the counter
    assert scrape.values["prompt_tokens"] == 120.0 and scrape.values["generation_tokens"] == 0.0
    assert scrape.values["running_requests"] == 3.0
    assert scrape.sources["kv_cache_usage_ratio"] == "vllm:kv_cache_usage_perc"
    assert scrape.sources["prefix_cache_hits"] == "vllm:prefix_cache_hits_total"
    assert not any(k.startswith("spec_") for k in scrape.values)  # no speculative config on this server


def test_vllm_data_parallel_ranks_are_summed_and_the_kv_cache_is_the_fullest_rank() -> None:
    page = with_values(
        capture(VLLM),
        {
            "vllm:generation_tokens_total": 1000.0,
            "vllm:num_requests_waiting": 2.0,
            "vllm:kv_cache_usage_perc": 0.4,
        },
    )
    rank1 = {"engine": "1", "model_name": "llama-vllm-single"}
    page = add_series(page, "vllm:generation_tokens_total", rank1, 500.0)
    page = add_series(page, "vllm:num_requests_waiting", rank1, 5.0)
    page = add_series(page, "vllm:kv_cache_usage_perc", rank1, 0.9)
    values = read_page(page).values
    assert values["generation_tokens"] == 1500.0
    assert values["waiting_requests"] == 7.0
    assert values["kv_cache_usage_ratio"] == 0.9


def test_an_older_vllm_with_only_the_deprecated_cache_gauge_is_read_through_it() -> None:
    page = capture(VLLM).replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    scrape = read_page(with_values(page, {"vllm:gpu_cache_usage_perc": 0.55}))
    assert scrape.values["kv_cache_usage_ratio"] == 0.55
    assert scrape.sources["kv_cache_usage_ratio"] == "vllm:gpu_cache_usage_perc"


def test_the_recorded_sglang_page_maps_to_our_fields() -> None:
    scrape = read_page(capture(SGLANG))
    assert scrape.family == "sglang"
    assert scrape.values["running_requests"] == 162.0 and scrape.values["waiting_requests"] == 2826.0
    assert scrape.values["kv_cache_usage_ratio"] == 0.28
    assert scrape.values["generation_tokens"] == 7.557572e06 and scrape.values["prompt_tokens"] == 8.128902e06
    assert scrape.values["prefix_cache_hit_ratio"] == pytest.approx(0.007507552643049313)
    assert scrape.values["generation_tokens_per_s"] == pytest.approx(86.50814177726902)
    assert "prefix_cache_hits" not in scrape.values  # this version has no cached_tokens_total


def test_sglang_tensor_ranks_repeat_rank_0_and_a_zero_spec_length_means_no_spec_decoding() -> None:
    """Of one group's tensor ranks only the leader is read, and each data-parallel group has its own:
    with DP attention, dp rank 1's leader is tp rank 2 (srt/managers/data_parallel_controller.py), which
    reading tp rank 0 only left out. A queue gauge's per-priority parts (priority="1") beside its total
    (priority="") are not added to it (srt/observability/metrics_collector.py)."""
    labels = {"model_name": "m", "engine_type": "unified", "pp_rank": "0", "moe_ep_rank": "0", "priority": ""}
    page = capture(SGLANG)
    for tp, dp, value in (("0", "0", 20.0), ("1", "0", 99.0), ("2", "1", 10.0)):  # tp 1: not its leader
        ep = "0" if dp == "0" else tp
        page = add_series(
            page,
            "sglang:num_running_reqs",
            {**labels, "tp_rank": tp, "dp_rank": dp, "moe_ep_rank": ep},
            value,
        )
    page = add_series(
        page, "sglang:num_running_reqs", {**labels, "tp_rank": "0", "dp_rank": "0", "priority": "1"}, 15.0
    )
    page = add_series(page, "sglang:spec_accept_length", {**labels, "tp_rank": "0"}, 0.0)
    scrape = read_page(page)
    assert scrape.values["running_requests"] == 162.0 + 20.0 + 10.0  # each group's leader, no priority part
    assert "spec_accept_length" not in scrape.values
    with_spec = read_page(add_series(capture(SGLANG), "sglang:spec_accept_length", {"model_name": "m"}, 2.7))
    assert with_spec.values["spec_accept_length"] == 2.7


def test_an_engine_without_a_table_keeps_its_series_names_and_garbage_is_an_error() -> None:
    scrape = read_page("# TYPE tgi_queue_size gauge\ntgi_queue_size 3\ntgi_batch_current_size 8\n")
    assert scrape.family is None and scrape.values == {}
    assert scrape.unknown == ("tgi_batch_current_size", "tgi_queue_size")
    with pytest.raises(ScrapeError, match="not Prometheus text format"):
        read_page("<html>vllm:num_requests_running</html>\n{ not metrics")


def test_every_mapped_field_is_one_the_core_reads_with_the_same_kind() -> None:
    for family in FAMILIES:
        for series in family.series:
            assert series.field in (GAUGES if series.kind == "gauge" else COUNTERS), (family.name, series)
            assert all(n.startswith(family.prefix) for n in series.names)
            assert all(n.endswith("_total") == (series.kind == "counter") for n in series.names)


def test_the_engine_table_of_nodes_toml_has_defaults_and_errors_name_the_key() -> None:
    node = '[nodes.a]\nurl = "ws://127.0.0.1:9464"\n'
    parsed = parse_nodes_file(node + '[engine]\nurl = "http://127.0.0.1:8000"\n')
    assert parsed.engine == EngineSpec("http://127.0.0.1:8000/metrics", 1.0, None)
    assert parse_nodes_file(node).engine is None
    bad = {
        'url = "ftp://x"': "engine.url: must be http(s)",
        'url = "http://x"\ninterval_s = 0.01': "engine.interval_s: must be within",
        'url = "http://x"\ninterval_s = "1"': "engine.interval_s: must be a number",
        'url = "http://x"\nevery = 1': "engine.every: unknown key",
        'url = "http://u:p@x"': "engine.url: must not hold a user or password",
    }
    for table, words in bad.items():
        with pytest.raises(NodesFileError, match=re.escape(f"nodes.toml: {words}")):
            parse_nodes_file(node + "[engine]\n" + table + "\n", "nodes.toml")
    short = parse_nodes_file('engine_metrics = "http://127.0.0.1:8000"\n' + node)  # the shorthand
    assert short.engine == parsed.engine
    with pytest.raises(NodesFileError, match=re.escape("nodes.toml: engine_metrics: must be http(s)")):
        parse_nodes_file('engine_metrics = "ftp://x"\n' + node, "nodes.toml")
    both = 'engine_metrics = "http://x"\n' + node + '[engine]\nurl = "http://x"\n'
    with pytest.raises(NodesFileError, match="not both"):
        parse_nodes_file(both, "nodes.toml")


def _vllm_script(replay: EngineReplay, generated_per_scrape: float) -> Callable[[float], str]:
    """Scrape k (k = 0, 1, …): counters grow linearly, gauges cycle, scrape 6 restarts the engine."""

    def page(_: float) -> str:
        k = len(replay.served)
        restarted = k >= 6
        base = k - 6 if restarted else k
        return with_values(
            capture(VLLM),
            {
                "vllm:generation_tokens_total": generated_per_scrape * base,
                "vllm:prompt_tokens_total": 40.0 * base,
                "vllm:prefix_cache_queries_total": 40.0 * base,
                "vllm:prefix_cache_hits_total": 10.0 * base,
                "vllm:num_preemptions_total": float(base // 2),
                "vllm:num_requests_running": float(k % 4),
                "vllm:num_requests_waiting": float(k % 2),
                "vllm:kv_cache_usage_perc": 0.1 * k,
                "vllm:spec_decode_num_drafts_total": 10.0 * base,
                "vllm:spec_decode_num_draft_tokens_total": 30.0 * base,
                "vllm:spec_decode_num_accepted_tokens_total": 15.0 * base,
            },
        )

    return page


async def _scraped(tmp_path: pathlib.Path, replay: EngineReplay, scrapes: int) -> Store:
    """``scrapes`` scrapes one second apart on the coordinator's clock, stored in a real store."""
    store = Store(tmp_path / "engine.db")
    clock = [T0]  # the coordinator's clock stands still during a scrape: it is stamped at T0 + k s
    async for url in served(replay.app(), "/metrics"):
        poller = EnginePoller(EngineSpec(url), store, now_ns=lambda: clock[0])
        async with aiohttp.ClientSession() as session:
            for _ in range(scrapes):
                await poller.scrape_once(session)
                clock[0] += S
        assert poller.state.scrapes == scrapes and poller.state.family == "vllm"
    return store


def _samples(store: Store, t_from: int, t_to: int) -> EngineSamples:
    rows = store.engine_rows(t_from - 100 * S, t_to + 100 * S)
    failed = store.engine_failure_times(t_from - 100 * S, t_to + 100 * S)
    inside = sum(t_from <= t <= t_to for t in failed)
    failures = Failures.of(store.engine_reasons(t_from, t_to), inside)
    return EngineSamples.from_rows(rows, failures, (t_from, t_to), failed_ns=failed)


async def test_scripted_scrapes_give_each_window_its_gauges_counter_rates_and_spec_acceptance(
    tmp_path: pathlib.Path,
) -> None:
    replay = EngineReplay(lambda _: "")
    replay.script = _vllm_script(replay, generated_per_scrape=100.0)
    store = await _scraped(tmp_path, replay, 6)  # scrapes at T0 + 0 … 5 s
    rows = store.engine_rows(T0, T0 + 10 * S)
    assert [r.t_ns for r in rows] == [T0 + k * S for k in range(6)]
    samples = _samples(store, T0, T0 + 5 * S)
    starts = np.array([T0 + S // 2, T0 + 4 * S + S // 4], np.int64)
    ends = np.array([T0 + 3 * S + S // 2, T0 + 4 * S + S // 2], np.int64)
    _, (first, short) = engine_export(samples, starts[:1], ends[:1], starts, ends)
    # 0.5 → 3.5 s: scrapes 1, 2, 3 inside and scrape 0 held at the start
    assert first["scrapes"] == 3
    assert first["running_requests"] == {"mean": 1.5, "max": 3.0}  # k % 4 over k = 0…3
    assert first["waiting_requests"] == {"mean": 0.5, "max": 1.0}
    assert first["kv_cache_usage_ratio_max"] == pytest.approx(0.3)
    assert first["generation_tokens"] == pytest.approx(300.0) and first["generation_tokens_per_s"] == 100.0
    assert first["prompt_tokens_per_s"] == 40.0 and first["prefix_cache_hit_ratio"] == 0.25
    assert first["preemptions"] == pytest.approx(1.5)  # 0 at 0.5 s (interpolated), 1.5 at 3.5 s
    assert first["spec_decode_acceptance_ratio"] == 0.5 and first["spec_decode_mean_acceptance_length"] == 2.5
    assert first["sources"]["generation_tokens"] == "vllm:generation_tokens_total"
    assert first["sources"]["spec_decode_acceptance_ratio"] == "vllm:spec_decode_num_accepted_tokens_total"
    assert first["null_reasons"] == {}
    # a quarter second with no scrape inside: the gauge held from 4 s, counters interpolated
    assert short["scrapes"] == 0 and short["running_requests"] == {"mean": 0.0, "max": 0.0}
    assert short["generation_tokens_per_s"] == pytest.approx(100.0)
    store.close()


async def test_a_counter_that_went_down_and_a_failed_scrape_leave_unknowns(
    tmp_path: pathlib.Path,
) -> None:
    replay = EngineReplay(lambda _: "")
    replay.script = _vllm_script(replay, generated_per_scrape=100.0)
    store = Store(tmp_path / "engine.db")
    clock = [T0]
    async for url in served(replay.app(), "/metrics"):
        poller = EnginePoller(EngineSpec(url, interval_s=1.0), store, now_ns=lambda: clock[0])
        async with aiohttp.ClientSession() as session:
            for k in range(14):
                replay.status = 503 if 9 <= k <= 12 else 200  # 9…12 s: the engine does not answer
                await poller.scrape_once(session)
                clock[0] += S
        assert poller.state.failures == 4 and poller.state.error is None  # answering again at 13 s
    assert store.engine_reasons(T0, T0 + 20 * S) == [
        Reason(T0 + 9 * S, T0 + 12 * S, 4, "the engine answered HTTP 503 Service Unavailable")
    ]
    samples = _samples(store, T0, T0 + 13 * S)
    # across the restart at 6 s; after it; 3.5 s after the last answer; 1.2 s after it, the scrapes failing
    # … and one between the failed scrapes at 9 and 10 s: none inside it, the one before it failed
    starts = np.array(
        [T0 + 4 * S, T0 + 6 * S, T0 + 11 * S + S // 2, T0 + 9 * S + S // 5, T0 + 9 * S + S // 4], np.int64
    )
    ends = np.array(
        [T0 + 8 * S, T0 + 8 * S, T0 + 12 * S + S // 2, T0 + 10 * S + S // 2, T0 + 9 * S + S // 2], np.int64
    )
    _, (across, after, gap, down, between) = engine_export(samples, starts, ends, starts, ends)
    # 400, 500 | 0, 100, 200: the summed counter went down, so whether one rank of several restarted (its
    # new count is not the sum) cannot be told: unknown, never the others' lifetime totals counted again
    assert across["generation_tokens"] is None and "went down" in across["null_reasons"]["generation_tokens"]
    assert after["generation_tokens"] == pytest.approx(200.0)
    assert gap["generation_tokens"] is None and gap["running_requests"]["mean"] is None
    assert "edges" in gap["null_reasons"]["generation_tokens"]
    assert gap["null_reasons"]["running_requests"] == FAILED_GAUGE
    # within the gap limit of the answer at 8 s, but every scrape since failed: before, its gauges were
    # 8 s's, carried over the outage; now none, and the reason says the scrapes failed
    assert down["scrapes"] == 0 and down["running_requests"] == {"mean": None, "max": None}
    assert down["null_reasons"]["running_requests"] == FAILED_GAUGE
    assert between["running_requests"]["mean"] is None
    assert between["null_reasons"]["running_requests"] == FAILED_GAUGE  # not "no scrape just before it"
    store.close()


def test_an_engine_with_no_table_says_its_page_has_no_such_series_even_after_a_failed_scrape() -> None:
    """Its fields are never present: one failed scrape made every reason "no scrape succeeded"."""
    rows = [(T0 + k * S, None, 1.0, {}, {}, ("tgi_queue_size",)) for k in range(5)]
    samples = EngineSamples.from_rows(
        rows,
        Failures((Reason(T0 + 5 * S, T0 + 5 * S, 1, "timed out"),)),
        (T0, T0 + 5 * S),
        failed_ns=[T0 + 5 * S],
    )
    starts, ends = np.array([T0 + S], np.int64), np.array([T0 + 3 * S], np.int64)
    scope, (window,) = engine_export(samples, starts, ends, starts, ends)
    assert scope["unknown_series"] == ["tgi_queue_size"]
    assert window["null_reasons"]["running_requests"] == NO_SERIES
    assert window["null_reasons"]["spec_decode_acceptance_ratio"] == NO_SPEC


def test_an_engine_no_scrape_of_which_succeeded_says_so_in_every_window() -> None:
    """Before, each window's reasons said the page had no series for the field, and no speculative
    decoding: the engine was never read at all."""
    failed = [T0 + k * S for k in range(5)]
    samples = EngineSamples.from_rows(
        [],
        Failures((Reason(failed[0], failed[-1], 5, "cannot connect"),)),
        (T0, T0 + 4 * S),
        failed_ns=failed,
    )
    starts, ends = np.array([T0 + S], np.int64), np.array([T0 + 3 * S], np.int64)
    scope, (window,) = engine_export(samples, starts, ends, starts, ends)
    assert scope["reason"] == "no engine scrape succeeded in the run's span"
    reasons = window["null_reasons"]
    assert reasons["generation_tokens"] == reasons["spec_decode_acceptance_ratio"] == NO_SCRAPE, reasons
    assert reasons["running_requests"] == NO_SCRAPE


def _run_export(
    samples: EngineSamples | None, completion_tokens: int | None, scope: str = "request"
) -> dict[str, Any]:
    """The parts of an export the engine hook reads and writes, for one window of 0.5 → 3.5 s."""
    export: dict[str, Any] = {
        "run": {"id": "r"},
        "method": {"scope": scope},
        "windows": [{"id": "w"}],
        "totals": {"completion_tokens": completion_tokens},
    }
    span = (np.array([T0 + S // 2], np.int64), np.array([T0 + 3 * S + S // 2], np.int64))
    (export["windows"][0]["engine"],) = attach_engine(export, samples, span, span)
    return export


async def test_the_token_cross_check_notes_a_disagreement_beyond_two_percent(tmp_path: pathlib.Path) -> None:
    replay = EngineReplay(lambda _: "")
    replay.script = _vllm_script(replay, generated_per_scrape=100.0)
    store = await _scraped(tmp_path, replay, 6)
    samples = _samples(store, T0, T0 + 5 * S)
    agrees = _run_export(samples, 295)  # the engine counted 300: 1.7 % more
    assert agrees["engine"]["token_cross_check"]["agrees"] is True and "notes" not in agrees["run"]
    assert agrees["windows"][0]["engine"]["generation_tokens"] == pytest.approx(300.0)
    # the window (0.5 → 3.5 s) holds the scrapes at 1, 2 and 3 s and lies between those at 0 and 4 s: the
    # engine's counter allows 200 to 400 tokens in it, whatever happened in the half seconds at its edges
    assert _run_export(samples, 250)["engine"]["token_cross_check"]["agrees"] is True
    differs = _run_export(samples, 150)  # fewer than the 200 counted between the scrapes inside it
    check = differs["engine"]["token_cross_check"]
    assert check == {
        "engine_generation_tokens": 300.0,
        "engine_generation_tokens_range": [200.0, 400.0],
        "window_completion_tokens": 150,
        "difference_ratio": 1.0,
        "agrees": False,
    }
    (note,) = differs["run"]["notes"]
    assert "engine token cross-check" in note and "200–400" in note and "150" in note and "+100.0 %" in note
    assert _run_export(samples, 450)["engine"]["token_cross_check"]["agrees"] is False  # more than 400
    no_span = {"run": {"id": "r"}, "method": {"scope": "request"}, "windows": [{"id": "failed"}]}
    no_span["totals"] = {"completion_tokens": None}
    at = np.array([T0 + S], np.int64)
    entries = attach_engine(no_span, samples, (at, at + S), (at, at))  # a window without a span reads nothing
    assert entries == [None] and no_span["engine"] is not None
    run_scope = _run_export(samples, 150, scope="run")["engine"]["token_cross_check"]
    assert run_scope["agrees"] is None  # the run scope holds unmeasured requests' tokens too
    assert _run_export(None, 250)["engine"] is None
    assert _run_export(None, 250)["windows"][0]["engine"] is None
    store.close()


def test_an_unknown_engine_lists_its_series_with_a_reason() -> None:
    rows = [(T0 + k * S, None, 1.0, {}, {}, ("tgi_queue_size",)) for k in range(4)]
    samples = EngineSamples.from_rows(rows, Failures(), (T0, T0 + 3 * S))
    scope, (window,) = engine_export(
        samples,
        *(np.array([t], np.int64) for t in (T0, T0 + 3 * S)),
        *(np.array([t], np.int64) for t in (T0, T0 + S)),
    )
    assert scope["family"] is None and scope["unknown_series"] == ["tgi_queue_size"]
    assert "no mapping table" in scope["reason"] and "token_cross_check" not in scope
    assert window["generation_tokens"] is None
    assert window["null_reasons"]["generation_tokens"] == "the engine's /metrics has no series for it"
    assert math.isclose(window["scrapes"], 1)


async def test_a_bearer_token_is_sent_from_its_file_and_a_refusal_is_a_stored_reason(
    tmp_path: pathlib.Path,
) -> None:
    replay = EngineReplay(lambda _: capture(VLLM), token="vllm-api-key-1")
    (tmp_path / "key").write_text("vllm-api-key-1\n")
    store = Store(tmp_path / "engine.db")
    async for url in served(replay.app(), "/metrics"):
        async with aiohttp.ClientSession() as session:
            with_key = EnginePoller(EngineSpec(url, 1.0, tmp_path / "key"), store, now_ns=lambda: T0)
            await with_key.scrape_once(session)
            without = EnginePoller(engine_from_url(url), store, now_ns=lambda: T0 + S)
            await without.scrape_once(session)
    assert [r.family for r in store.engine_rows(T0, T0 + S)] == ["vllm"]
    assert store.engine_reasons(T0, T0 + S) == [
        Reason(T0 + S, T0 + S, 1, "the engine answered HTTP 401 Unauthorized")
    ]
    assert without.state.to_json()["error"] == "the engine answered HTTP 401 Unauthorized"
    assert "vllm-api-key-1" not in str(store.engine_reasons(T0, T0 + S))
    store.close()


async def test_a_redirect_to_another_host_is_not_followed_and_one_on_the_engines_own_host_is(
    tmp_path: pathlib.Path,
) -> None:
    """aiohttp followed any redirect: the token dropped on another host, but that host's page was stored as
    this node's engine. Now that is a failed scrape with its reason; a move on the same host is followed,
    token and all."""
    replay = EngineReplay(lambda _: capture(VLLM), token="vllm-api-key-1")
    (tmp_path / "key").write_text("vllm-api-key-1\n")
    store = Store(tmp_path / "engine.db")
    async for engine in served(replay.app(), "/metrics"):
        away = engine.replace("127.0.0.1", "localhost")  # the same server under another host name

        async def moved(request: web.Request, away: str = away) -> web.Response:
            raise web.HTTPFound(away if request.path == "/away" else "/metrics")

        replay_app = replay.app()
        replay_app.router.add_get("/away", moved)
        replay_app.router.add_get("/old", moved)
        async for base in served(replay_app):
            async with aiohttp.ClientSession() as session:
                elsewhere = EnginePoller(
                    EngineSpec(f"{base}/away", 1.0, tmp_path / "key"), store, now_ns=lambda: T0
                )
                await elsewhere.scrape_once(session)
                here = EnginePoller(
                    EngineSpec(f"{base}/old", 1.0, tmp_path / "key"), store, now_ns=lambda: T0 + S
                )
                await here.scrape_once(session)
    assert len(replay.served) == 1 and [r.t_ns for r in store.engine_rows(T0 - S, T0 + 2 * S)] == [T0 + S]
    (error,) = store.engine_reasons(T0 - S, T0 + 2 * S)
    assert (error.first_ns, error.error) == (
        T0,
        f"the engine answered HTTP 302 for /away, pointing to {away}: not followed (another host:"
        " credentials go to the configured url only)",
    )
    store.close()
