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
from sparkwatch.engines.scrape import read_page, samples_by_name
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.engine_series import engine_samples
from sparkwatch.sources.prometheus.raw import RawSeries

S = 1_000_000_000
T0 = 1_800_000_000 * S
INTERVAL_S = 1.0
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
                    key = tuple(sorted({**labels, **target, "__name__": name}.items()))
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


def pages(make: Callable[[int], str], count: int) -> dict[int, str]:
    return {T0 + k * S: make(k) for k in range(count)}


def stored(pages_at: dict[int, str], span: tuple[int, int]) -> EngineSamples:
    """What the coordinator keeps of the same pages scraped at the same times."""
    rows = []
    for t, page in sorted(pages_at.items()):
        scrape = read_page(page)
        rows.append((t, scrape.family, INTERVAL_S, scrape.values, scrape.sources, scrape.unknown))
    return EngineSamples.from_rows(rows, [], span)


def assert_same(got: EngineSamples | None, want: EngineSamples) -> None:
    assert got is not None
    assert got.family == want.family and got.sources == want.sources and got.present == want.present
    assert got.gap_ns == want.gap_ns and np.array_equal(got.t_ns, want.t_ns)
    for name, column in want.values.items():
        np.testing.assert_array_equal(got.values[name], column, err_msg=name)


def vllm_page(k: int) -> str:
    """Two engine ranks; the KV-cache gauge under its pre-0.9 name for the first 5 scrapes."""
    kv = "vllm:gpu_cache_usage_perc" if k < 5 else "vllm:kv_cache_usage_perc"
    page = with_values(
        capture(VLLM),
        {
            "vllm:generation_tokens_total": 1000.0 * k,
            "vllm:prompt_tokens_total": 400.0 * k,
            "vllm:num_requests_running": float(k % 4),
            "vllm:num_requests_waiting": float(k % 3),
        },
    )
    if k < 5:
        page = "\n".join(line for line in page.splitlines() if "vllm:kv_cache_usage_perc" not in line) + "\n"
    page = add_series(page, kv, {"engine": "0", "model_name": "m"}, 0.1 * (k % 5))
    page = add_series(page, kv, {"engine": "1", "model_name": "m"}, 0.05 * (k % 7))
    page = add_series(page, "vllm:generation_tokens_total", {"engine": "1", "model_name": "m"}, 500.0 * k)
    return add_series(page, "vllm:num_requests_running", {"engine": "1", "model_name": "m"}, 2.0)


def sglang_page(k: int) -> str:
    """Rank 0 and a tensor-parallel rank 1 that repeats its view; no speculative decoding (zeros)."""
    page = with_values(
        capture(SGLANG),
        {
            "sglang:generation_tokens_total": 7.5e6 + 900.0 * k,
            "sglang:num_running_reqs": float(100 + k),
            "sglang:spec_accept_length": 0.0,
        },
    )
    page = add_series(page, "sglang:generation_tokens_total", {"tp_rank": "1"}, 7.5e6 + 900.0 * k)
    return add_series(page, "sglang:num_running_reqs", {"tp_rank": "1"}, float(100 + k))


@pytest.mark.parametrize("make", [vllm_page, sglang_page], ids=["vllm", "sglang"])
def test_a_tsdbs_series_give_what_the_coordinators_scrapes_of_the_same_pages_give(
    make: Callable[[int], str],
) -> None:
    scraped = pages(make, 12)
    span = (T0 + 2 * S, T0 + 9 * S)
    tsdb = Paged(scraped, {"job": "vllm", "instance": "10.0.0.5:8000"})
    got = engine_samples(tsdb, 'job="vllm"', *span, MARGIN_NS)
    assert_same(got, stored(scraped, span))
    assert got is not None and got.gap_ns == 3 * S  # three 1 s scrapes
    if make is vllm_page:
        assert got.values["generation_tokens"][4] == 1500.0 * 4  # both ranks
        assert got.values["running_requests"][3] == 3.0 + 2.0
        assert got.values["kv_cache_usage_ratio"][3] == pytest.approx(max(0.3, 0.15))
        assert got.sources["kv_cache_usage_ratio"] == "vllm:kv_cache_usage_perc"  # the latest scrape's
    else:
        assert got.values["generation_tokens"][4] == 7.5e6 + 900.0 * 4  # rank 0 only
        assert "spec_accept_length" not in got.present  # zero means not in use


def test_one_target_only_and_a_selector_that_selects_nothing_is_one_line() -> None:
    scraped = pages(vllm_page, 6)
    first = Paged(scraped, {"job": "vllm", "instance": "a:8000"})
    second = Paged(scraped, {"job": "vllm", "instance": "b:8000"})
    both = Paged({}, {})
    both.series = {**first.series, **second.series}
    span = (T0 + S, T0 + 4 * S)
    with pytest.raises(SourceError) as two:
        engine_samples(both, 'job="vllm"', *span, MARGIN_NS)
    assert str(two.value) == (
        '{job="vllm"} selects the series of 2 scrape targets ({job="vllm",instance="a:8000"},'
        ' {job="vllm",instance="b:8000"}): --engine-metrics must name the one engine that served the'
        " benchmark"
    )
    assert_same(engine_samples(both, 'instance="b:8000"', *span, MARGIN_NS), stored(scraped, span))
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
