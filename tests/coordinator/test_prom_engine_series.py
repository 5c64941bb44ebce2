"""The serving engine's series read from a TSDB (sources/prometheus/engine_series.py) hold what the
coordinator's own scrapes of the same pages hold: recorded vLLM and SGLang pages (tests/fixtures/engines)
with scripted values and extra ranks, stored as the coordinator stores a scrape (engines/scrape.py, then
EngineSamples.from_rows) and, series by series, as a TSDB would answer them; and the refusals."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from helpers.engine_replay import SGLANG, VLLM, add_series, capture, with_values
from sparkwatch.core.engine import EngineSamples
from sparkwatch.core.failures import Failures
from sparkwatch.engines.scrape import read_page, samples_by_name
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.engine_series import engine_samples
from sparkwatch.sources.prometheus.raw import RawSeries

S = 1_000_000_000
T0 = 1_800_000_000 * S
MARGIN_NS = 10 * S


class Paged:
    """A TSDB that scraped ``pages`` (time → page text) with these target labels: it answers a selector
    ``{__name__=~"a|b",k="v",…}`` with each selected series' samples in the time range."""

    api = "paged"

    def __init__(self, pages: dict[int, str], target: dict[str, str]) -> None:
        self.series: dict[tuple[tuple[str, str], ...], tuple[list[int], list[float]]] = {}
        for t, page in sorted(pages.items()):
            for name, samples in samples_by_name(page).items():
                for labels, value in samples:
                    merged = {**labels, **target, "__name__": name}
                    key = tuple(sorted((k, v) for k, v in merged.items() if v))  # Prometheus drops "" labels
                    stamps, values = self.series.setdefault(key, ([], []))
                    stamps.append(t)
                    values.append(value)
        self.selectors: list[str] = []

    def read(self, selector: str, t_from_ns: int, t_to_ns: int) -> list[RawSeries]:
        self.selectors.append(selector)
        names = set(re.search(r'__name__=~"([^"]*)"', selector)[1].split("|"))  # type: ignore[index]
        wanted = dict(re.findall(r'(\w+)="([^"]*)"', selector.split(",", 1)[1]))
        out = []
        for key, (stamps, values) in self.series.items():
            labels = dict(key)
            if labels["__name__"] in names and all(labels.get(k) == v for k, v in wanted.items()):
                t = np.array(stamps, dtype=np.int64)
                keep = (t >= t_from_ns) & (t <= t_to_ns)
                out.append(RawSeries(labels, t[keep], np.array(values, dtype=np.float64)[keep]))
        return out


def pages(make: Callable[[int], str], count: int, interval_s: float = 1.0) -> dict[int, str]:
    return {T0 + round(k * interval_s * S): make(k) for k in range(count)}


def stored(pages_at: dict[int, str], span: tuple[int, int], interval_s: float = 1.0) -> EngineSamples:
    """What the coordinator's export reads of the same pages scraped at the same times, every
    ``interval_s`` (sources/store.py: the span and the margin either side)."""
    rows = []
    for t, page in sorted(pages_at.items()):
        if not span[0] - MARGIN_NS <= t <= span[1] + MARGIN_NS:
            continue
        scrape = read_page(page)
        rows.append((t, scrape.family, interval_s, scrape.values, scrape.sources, scrape.unknown))
    return EngineSamples.from_rows(rows, Failures(), span)


def assert_same(got: EngineSamples | None, want: EngineSamples) -> None:
    assert got is not None
    assert got.family == want.family and got.sources == want.sources and got.present == want.present
    assert got.gap_ns == want.gap_ns and np.array_equal(got.t_ns, want.t_ns)
    for name, column in want.values.items():
        np.testing.assert_array_equal(got.values[name], column, err_msg=name)


MODEL = {"model_name": "llama-vllm-single"}  # the recorded vLLM page's


def vllm_page(k: int) -> str:
    """Two engine ranks; the KV-cache gauge under its pre-0.9 name for the first 5 scrapes, under both names
    (different values: the current one is read) for the next 3, then under the current name only."""
    page = with_values(
        capture(VLLM),
        {
            "vllm:generation_tokens_total": 1000.0 * k,
            "vllm:prompt_tokens_total": 400.0 * k,
            "vllm:num_requests_running": float(k % 4),
            "vllm:num_requests_waiting": float(k % 3),
        },
    )
    page = (
        "\n".join(line for line in page.splitlines() if not line.startswith("vllm:kv_cache_usage_perc"))
        + "\n"
    )
    names = ["vllm:gpu_cache_usage_perc"] if k < 5 else ["vllm:kv_cache_usage_perc"]
    if 5 <= k < 8:
        names.append("vllm:gpu_cache_usage_perc")
    for n, kv in enumerate(names):
        page = add_series(page, kv, {"engine": "0", **MODEL}, 0.1 * (k % 5) + 0.5 * n)
        page = add_series(page, kv, {"engine": "1", **MODEL}, 0.05 * (k % 7) + 0.5 * n)
    page = add_series(page, "vllm:generation_tokens_total", {"engine": "1", **MODEL}, 500.0 * k)
    return add_series(page, "vllm:num_requests_running", {"engine": "1", **MODEL}, 2.0)


#: The model label of every series of the recorded SGLang page.
SGLANG_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def sglang_page(k: int) -> str:
    """Two data-parallel ranks (their counters summed, their hit rates averaged), a tensor-parallel rank 1
    that repeats rank 0's view (left out); no speculative decoding (zeros)."""
    page = with_values(
        capture(SGLANG),
        {
            "sglang:generation_tokens_total": 7.5e6 + 900.0 * k,
            "sglang:num_running_reqs": float(100 + k),
            "sglang:cache_hit_rate": 0.2,
            "sglang:spec_accept_length": 0.0,
        },
    )
    tp_1 = {"model_name": SGLANG_MODEL, "tp_rank": "1"}  # the recorded series' labels, another tensor rank
    page = add_series(page, "sglang:generation_tokens_total", tp_1, 7.5e6 + 900.0 * k)
    page = add_series(page, "sglang:num_running_reqs", tp_1, float(100 + k))
    page = add_series(page, "sglang:generation_tokens_total", {"dp_rank": "1"}, 100.0 * k)
    return add_series(page, "sglang:cache_hit_rate", {"dp_rank": "1"}, 0.4 + 0.01 * k)


@pytest.mark.parametrize("interval_s", [1.0, 2.0])
@pytest.mark.parametrize("make", [vllm_page, sglang_page], ids=["vllm", "sglang"])
def test_a_tsdbs_series_give_what_the_coordinators_scrapes_of_the_same_pages_give(
    make: Callable[[int], str], interval_s: float
) -> None:
    scraped = pages(make, 12, interval_s)
    span = (T0 + 2 * S, T0 + 9 * S)
    tsdb = Paged(scraped, {"job": "vllm", "instance": "10.0.0.5:8000"})
    got = engine_samples(tsdb, 'job="vllm"', *span, MARGIN_NS)
    assert_same(got, stored(scraped, span, interval_s))
    assert got is not None and got.gap_ns == round(3 * interval_s * S)  # three scrapes
    if make is vllm_page:
        assert got.values["generation_tokens"][4] == 1500.0 * 4  # both ranks
        assert got.values["running_requests"][3] == 3.0 + 2.0
        assert got.values["kv_cache_usage_ratio"][3] == pytest.approx(max(0.3, 0.15))  # the fullest rank
        assert got.values["kv_cache_usage_ratio"][6] == pytest.approx(max(0.1, 0.3))  # the current name's
        assert got.sources["kv_cache_usage_ratio"] == "vllm:kv_cache_usage_perc"  # the latest scrape's
    else:
        assert got.values["generation_tokens"][4] == 7.5e6 + 900.0 * 4 + 400.0  # dp ranks, not tp rank 1
        assert got.values["prefix_cache_hit_ratio"][4] == pytest.approx((0.2 + 0.44) / 2)
        assert "spec_accept_length" not in got.present  # zero means not in use


def test_values_no_engine_can_mean_are_left_out_of_a_tsdbs_series_as_of_a_scrape() -> None:
    """A negative gauge, a ratio of 7 and ranks whose counters add up past 2**53 are left out at their
    scrapes by the coordinator's scrape (engines/scrape.py); read from a TSDB they were taken as they were
    (1e308 tokens, -50 running requests), and the window's figures with them."""

    def page(k: int) -> str:
        out = vllm_page(k)
        if k == 3:
            out = with_values(out, {"vllm:num_requests_running": -50.0})
        if k == 4:
            out = add_series(out, "vllm:generation_tokens_total", {"engine": "2", **MODEL}, 1e308)
        if k == 6:
            out = with_values(out, {"vllm:kv_cache_usage_perc": 7.0})
        return out

    scraped = pages(page, 10)
    span = (T0 + 2 * S, T0 + 8 * S)
    got = engine_samples(Paged(scraped, {"job": "vllm"}), 'job="vllm"', *span, MARGIN_NS)
    assert_same(got, stored(scraped, span))
    assert got is not None
    assert np.isnan(got.values["running_requests"][3]) and got.values["running_requests"][2] == 2.0 + 2.0
    assert np.isnan(got.values["generation_tokens"][4]) and got.values["generation_tokens"][5] == 1500.0 * 5
    assert got.values["kv_cache_usage_ratio"][6] == pytest.approx(max(0.6, 0.8))  # the older name, in bounds


def test_sglangs_per_priority_parts_are_left_out_in_a_tsdb_too() -> None:
    """With --enable-priority-scheduling the queue gauges hold their total under priority="" (stored by a
    TSDB without the label) beside a series per priority: before, the export from a TSDB refused the total
    and a part as two engines; the coordinator's own scrapes gave the total alone. (The recorded page's
    queue, without the label, stands for the total as a TSDB stores it.)"""

    def page(k: int) -> str:
        out = with_values(capture(SGLANG), {"sglang:num_queue_reqs": 10.0 + k})
        for priority, value in (("1", 4.0), ("2", 6.0 + k)):
            out = add_series(
                out, "sglang:num_queue_reqs", {"model_name": SGLANG_MODEL, "priority": priority}, value
            )
        return out

    scraped = pages(page, 8)
    span = (T0 + 2 * S, T0 + 5 * S)
    got = engine_samples(Paged(scraped, {"job": "sglang"}), 'job="sglang"', *span, MARGIN_NS)
    assert_same(got, stored(scraped, span))
    assert got is not None
    waiting = got.values["waiting_requests"]
    assert list(waiting[np.isfinite(waiting)]) == [10.0 + k for k in range(8)]  # the total, never the parts


def test_one_engine_only_and_matchers_that_select_nothing_are_one_line() -> None:
    """Two pods' series at once, or a vLLM and an SGLang engine, are refused; a pod restarted under another
    address is one engine, its series one after the other."""
    span = (T0 + S, T0 + 4 * S)
    first = Paged(pages(vllm_page, 6), {"job": "vllm", "instance": "a:8000"})
    second = Paged(pages(vllm_page, 6), {"job": "vllm", "instance": "b:8000"})
    both = Paged({}, {})
    both.series = {**first.series, **second.series}
    with pytest.raises(SourceError) as two:
        engine_samples(both, 'job="vllm"', *span, MARGIN_NS)
    assert str(two.value).startswith('{job="vllm"} selects two engines\' vllm:')
    assert str(two.value).endswith(
        ' at once ({instance="a:8000"} and {instance="b:8000"}): --engine-metrics must name the one engine'
        " that served the benchmark"
    )
    assert_same(
        engine_samples(both, 'instance="b:8000"', *span, MARGIN_NS), stored(pages(vllm_page, 6), span)
    )
    restarted = Paged({t: p for t, p in pages(vllm_page, 3).items()}, {"job": "vllm", "instance": "a:8000"})
    later = Paged(
        {t + 3 * S: p for t, p in pages(vllm_page, 3).items()}, {"job": "vllm", "instance": "c:8000"}
    )
    restarted.series |= later.series
    got = engine_samples(restarted, 'job="vllm"', *span, MARGIN_NS)
    assert got is not None and list(got.values["generation_tokens"]) == [0.0, 1500.0, 3000.0] * 2
    mixed = Paged({}, {})
    mixed.series = {**first.series, **Paged(pages(sglang_page, 6), {"job": "sglang"}).series}
    with pytest.raises(
        SourceError, match=r"^\{job=~\"vllm\|sglang\"\} selects both vLLM and SGLang series: "
    ):
        engine_samples(mixed, 'job=~"vllm|sglang"', *span, MARGIN_NS)
    with pytest.raises(SourceError, match=r'^no vLLM or SGLang series match \{job="sglang"\} from ') as none:
        engine_samples(first, 'job="sglang"', *span, MARGIN_NS)
    assert "\n" not in str(none.value)


def test_scrapes_only_around_the_span_give_no_engine_and_the_reads_name_only_the_tables_series() -> None:
    scraped = pages(vllm_page, 3)  # 0 s to 2 s
    tsdb = Paged(scraped, {"job": "vllm"})
    assert engine_samples(tsdb, 'job="vllm"', T0 + 5 * S, T0 + 8 * S, MARGIN_NS) is None
    vllm_names = re.search(r'__name__=~"([^"]*)"', tsdb.selectors[0])[1].split("|")  # type: ignore[index]
    assert "vllm:generation_tokens_total" in vllm_names and "vllm:gpu_cache_usage_perc" in vllm_names
    assert not any("bucket" in name for name in vllm_names)  # no histogram is read
