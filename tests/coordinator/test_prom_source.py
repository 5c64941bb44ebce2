"""The Prometheus-compatible source's pure parts: the mapping tables against what the exporters expose, the
time flags, the answers of the two raw-sample endpoints, URLs and credentials; and the `export` flags."""

from __future__ import annotations

import argparse
import http.server
import json
import math
import pathlib
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from typing import Any

import numpy as np
import pytest

from sparkwatch.cli_parser_runs import METRIC_FAMILIES
from sparkwatch.cli_types import epoch_ns
from sparkwatch.core.stamps import utc_stamp
from sparkwatch.importers import load_windows
from sparkwatch.importers.common import ClockAnchor
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus import client as prom_client
from sparkwatch.sources.prometheus.align import merged as merged_parts
from sparkwatch.sources.prometheus.client import Auth, Client, Unreachable, check_url, public_url
from sparkwatch.sources.prometheus.mappings import (
    DCGM,
    FAMILIES,
    NODE_MEM_AVAILABLE,
    NODE_MEM_TOTAL,
    NODE_PAGE_CACHE,
    NVIDIA_GPU_EXPORTER,
    SPARKWATCH,
)
from sparkwatch.sources.prometheus.raw import (
    ExportReader,
    QueryReader,
    RawSeries,
    detect,
    export_piece,
    matrix_pieces,
    merged,
)
from sparkwatch.sources.prometheus.signals import signal_track, top_hz
from sparkwatch_agent.serving import metrics as agent_metrics

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "dcgm" / "dcgm-exporter-a100.prom"
NVIDIA_FIXTURE = ROOT / "tests" / "fixtures" / "nvidia_gpu_exporter" / "h200-load.metrics"
NODE_EXPORTER_FIXTURE = ROOT / "tests" / "fixtures" / "node_exporter" / "e2e-output-meminfo.prom"
#: One line of VictoriaMetrics 1.79.5's /api/v1/export, as the real server answered it (it scraped itself).
VM_LINE = (
    '{"metric":{"__name__":"vm_app_version","job":"self","instance":"127.0.0.1:18428"},'
    '"values":[1,1,1,1,1,1],"timestamps":[1796389454477,1796389455477,1796389456477,1796389457477,'
    "1796389458477,1796389459477]}"
)
#: Prometheus 2.42's answer to a range selector (`vm_app_uptime_seconds[5s]`), same shape as recorded.
MATRIX = {
    "resultType": "matrix",
    "result": [
        {
            "metric": {"__name__": "up", "job": "self", "instance": "127.0.0.1:18428"},
            "values": [[1796389455.477, "1"], [1796389456.477, "1"], [1796389457.477, "NaN"]],
        }
    ],
}


def test_the_parser_names_every_family_and_no_other() -> None:
    assert tuple(FAMILIES) == METRIC_FAMILIES


def test_the_sparkwatch_table_names_series_the_agent_exposes() -> None:
    """Read from the agent's collector itself: gauges by their name, the energy counter with ``_total``."""
    source = pathlib.Path(agent_metrics.__file__).read_text()
    exposed = set(re.findall(r'"(sparkwatch_[a-z_]+)"', source))
    counters = {name for name, _, _, counter in agent_metrics._GPU_VALUES if counter}
    names = {SPARKWATCH.power.metric, SPARKWATCH.host_memory.metric, SPARKWATCH.info.metric}  # type: ignore[union-attr]
    names |= {s.metric for s in SPARKWATCH.host_page_cache}
    names |= {s.metric for s in SPARKWATCH.util} | {SPARKWATCH.gpu_memory.metric}  # type: ignore[union-attr]
    assert names <= exposed
    assert SPARKWATCH.energy is not None
    assert SPARKWATCH.energy.metric.removesuffix("_total") in counters
    assert SPARKWATCH.gpu_label in agent_metrics.GPU_LABELS
    assert SPARKWATCH.sensor_power is not None and SPARKWATCH.sensor_energy is not None
    assert SPARKWATCH.sensor_power.metric in exposed
    assert SPARKWATCH.sensor_energy.metric.removesuffix("_total") in exposed
    signals = SPARKWATCH.signals
    assert signals is not None and signals.reason_flags is not None and signals.max_sm_clock is not None
    assert {signals.sm_clock.metric, signals.reason_flags.metric, signals.max_sm_clock.metric} <= exposed
    assert signals.temperature is not None and signals.temperature.metric in exposed
    assert f'"{signals.reason_flags.label}"' in source  # the label naming the reason


def test_the_node_exporter_memory_series_are_named_as_node_exporter_names_them() -> None:
    """Its own end-to-end output (no MemAvailable in that fixture's meminfo: README.md there)."""
    text = NODE_EXPORTER_FIXTURE.read_text()
    for series in (NODE_MEM_TOTAL, *NODE_PAGE_CACHE):
        assert re.search(rf"^# TYPE {series.metric} gauge$", text, re.M), series.metric
        assert re.search(rf"^{series.metric} [0-9.e+]+$", text, re.M), series.metric
    assert NODE_MEM_AVAILABLE.metric == "node_memory_MemAvailable_bytes"  # meminfo_linux.go's field name


def test_the_nvidia_gpu_exporter_table_matches_its_recorded_page() -> None:
    text = NVIDIA_FIXTURE.read_text()
    f = NVIDIA_GPU_EXPORTER
    assert f.signals is not None and f.signals.temperature is not None and f.signals.max_sm_clock is not None
    found = (f.power, f.util[0], f.gpu_memory, f.info, f.signals.sm_clock, f.signals.temperature)
    for series in (*found, f.signals.max_sm_clock, f.signals.reason_masks[0]):
        assert series is not None
        assert re.search(rf'^{series.metric}\{{[^}}]*{f.gpu_label}="', text, re.M), series.metric
    assert f.energy is not None  # NVML backend only: no sample of it on this (nvidia-smi backend) page
    assert not re.search(rf"^{f.energy.metric}", text, re.M)
    assert re.search(rf'^{f.info.metric}\{{[^}}]*{f.name_label}="NVIDIA H200"', text, re.M)  # type: ignore[union-attr]


def test_the_dcgm_table_matches_the_recorded_exporter_text() -> None:
    text = FIXTURE.read_text()
    for series in (DCGM.power, DCGM.energy, DCGM.util[0], DCGM.gpu_memory):
        assert series is not None
        assert re.search(rf"^{series.metric}\{{", text, re.M), series.metric
    assert f'{DCGM.gpu_label}="GPU-' in text
    assert DCGM.energy is not None and DCGM.energy.scale == 1e-3  # mJ (TYPE counter, "in mJ")
    assert re.search(r"^# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter", text, re.M)
    assert DCGM.util[0].scale == 0.01  # "GPU utilization (in %)"
    assert DCGM.signals is not None and DCGM.signals.temperature is not None
    for series in (DCGM.signals.sm_clock, DCGM.signals.temperature):
        assert re.search(rf"^{series.metric}\{{", text, re.M), series.metric
    assert DCGM.signals.sm_clock.scale == 1e6  # "SM clock frequency (in MHz)"


def _raw(t_s: list[float], values: list[float], **labels: str) -> RawSeries:
    return RawSeries(labels, np.array([round(t * 1e9) for t in t_s], np.int64), np.array(values, float))


def test_reasons_from_per_reason_flags_are_a_mask_known_where_any_flag_was_scraped() -> None:
    """sparkwatch's clock_event_active{reason}: a bit per flag reading 1; unknown (-1) at a time no flag
    series has a sample (the SM clock was scraped then, the reasons were not)."""
    clock = _raw([1, 2, 3, 4], [2e9, 1e9, 1e9, 2e9])
    flags = {0x1: _raw([1, 2, 3], [0, 0, 1]), 0x20: _raw([1, 2, 3], [0, 1, 1])}
    track = signal_track("GPU-a", {"sm_clock": clock, "temperature": None, "reasons": None}, flags, 2e9)
    assert track is not None and track.uuid == "GPU-a" and track.max_sm_clock_hz == 2e9
    assert track.reasons.tolist() == [0, 0x20, 0x21, -1]
    assert track.sm_clock_hz.tolist() == [2e9, 1e9, 1e9, 2e9] and np.isnan(track.temperature_c).all()


def test_reasons_from_a_bitmask_series_and_what_is_unknown() -> None:
    """A bitmask (DCGM's, nvidia-smi's) read as an integer; NaN, negative or beyond 63 bits is unknown;
    times are the union of every signal series' scrapes."""
    mask = _raw([1, 2, 3, 4], [0x48, math.nan, -1, 2.0**64])
    temperature = _raw([2, 5], [61.0, 70.0])
    track = signal_track("g", {"sm_clock": None, "temperature": temperature, "reasons": mask}, {}, None)
    assert track is not None and track.t_ns.tolist() == [round(t * 1e9) for t in (1, 2, 3, 4, 5)]
    assert track.reasons.tolist() == [0x48, -1, -1, -1, -1]
    assert np.isnan(track.temperature_c[[0, 2, 3]]).all() and track.temperature_c[[1, 4]].tolist() == [61, 70]
    assert signal_track("g", {"sm_clock": None, "temperature": None, "reasons": None}, {}, None) is None


def test_the_maximum_sm_clock_is_the_largest_positive_reading() -> None:
    assert top_hz(None) is None
    assert top_hz(_raw([1, 2], [0.0, math.nan])) is None  # no ratio from nothing known
    assert top_hz(_raw([1, 2, 3], [1.98e9, math.nan, 2.0e9])) == 2.0e9


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1764850000", 1_764_850_000_000_000_000),
        ("1764850000.25", 1_764_850_000_250_000_000),
        ("2025-12-04T12:06:40Z", 1_764_850_000_000_000_000),
        ("2025-12-04T13:06:40.5+01:00", 1_764_850_000_500_000_000),
        ("2025-12-04 12:06:40 UTC", 1_764_850_000_000_000_000),  # as `runs show` printed it before
        ("2025-12-04t12:06:40.5z", 1_764_850_000_500_000_000),  # RFC 3339 § 5.6 allows lower case
        (utc_stamp(1_764_850_000_123_999_999), 1_764_850_000_123_000_000),  # as `runs show` does
        ("2025-12-04T12:06:40.123456789Z", 1_764_850_000_123_456_789),  # to the ns (it kept microseconds)
        ("1.76485e9", 1_764_850_000_000_000_000),
        ("2025-12-04T12:06:40.1234567890Z", 1_764_850_000_123_456_789),  # zeros past the ns: exact still
    ],
)
def test_a_time_is_unix_seconds_or_rfc3339(text: str, ns: int) -> None:
    assert epoch_ns(text) == ns


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "2025-12-04T12:06:40",
        "2025-12-04 12:06:40 CET",
        "-5",
        "nan",
        "1000",
        "1796436500740",
        "1e30",
        "2100-01-01T00:00:00Z",
        # what datetime.fromisoformat and Decimal took, which are neither
        "1_764_850_000",
        "\uff11\uff17\uff16\uff14\uff18\uff15\uff10\uff10\uff10\uff10",  # full-width digits
        "2025-12-04T13:06:40+01:00:30",
        "2025-12-04T13:06:40+0100",
        "2025-W49-4T12:06:40Z",
        "20251204T120640Z",
        "2025-12-04T12Z",
        "2025-12-04T12:06:40.1234567891Z",
        "1764850000.0000000001",  # finer than a nanosecond: refused as the RFC 3339 form is (it was cut)
        "2016-12-31T23:59:60Z",  # a leap second: Unix time has none
        "2025-02-30T12:06:40Z",
        "2025-12-04T12:06:40+24:00",
    ],
)
def test_a_time_that_is_neither_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        epoch_ns(text)


def test_a_range_selector_answer_gives_raw_samples_and_nan_is_no_sample() -> None:
    (series,) = merged(matrix_pieces(MATRIX))
    assert series.t_ns.tolist() == [1796389455477000000, 1796389456477000000]
    assert series.values.tolist() == [1.0, 1.0]
    with pytest.raises(SourceError, match="must be a matrix"):
        matrix_pieces({"resultType": "vector", "result": []})
    with pytest.raises(SourceError, match=r"\[time, \"value\"\]"):
        matrix_pieces({"resultType": "matrix", "result": [{"metric": {}, "values": [["x"]]}]})


@pytest.mark.parametrize(
    ("reader", "body", "said"),
    [
        (QueryReader, b'{"status":"success","data":{"resultType":"vector","result":[]}}', "must be a matrix"),
        (ExportReader, b'{"metric":{},"timestamps":[1],"values":[]}\n', "1 timestamps for 0 values"),
    ],
)
def test_an_answer_of_the_wrong_shape_names_the_url_that_gave_it(reader: Any, body: bytes, said: str) -> None:
    class Odd(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    engine = _serve(Odd)
    url = f"http://127.0.0.1:{engine.server_port}"
    try:
        with pytest.raises(SourceError) as caught:
            reader(Client(url)).read("up", 1_796_389_455 * 10**9, 1_796_389_465 * 10**9)
    finally:
        engine.shutdown()
    assert str(caught.value).startswith(f"{url}/api/v1/") and said in str(caught.value), caught.value


@pytest.mark.parametrize("reader", [QueryReader, ExportReader])
def test_nodes_are_counted_by_the_engine_a_chunk_at_a_time(reader: Any) -> None:
    """Listing a fleet's nodes brought every node's samples to read their labels: the engine now counts them
    per nodes-label value over each chunk (one instant query each), and answers a number per node."""
    asked: list[dict[str, list[str]]] = []
    answers = iter(
        [
            {"resultType": "vector", "result": [{"metric": {"node": "b"}, "value": [1, "3"]}]},
            {"resultType": "vector", "result": [{"metric": {"node": "a"}, "value": [1, "9"]}]},
            {"resultType": "vector", "result": [{"metric": {}, "value": [1, "2"]}]},  # no label: no node
            {"resultType": "matrix", "result": []},
        ]
    )

    class Counting(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))
            body = json.dumps({"status": "success", "data": next(answers)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    engine = _serve(Counting)
    url = f"http://127.0.0.1:{engine.server_port}"
    t0 = 1_796_389_455 * 10**9
    selector = 'sparkwatch_gpu_power_watts{node!=""}'
    try:
        source = reader(Client(url))
        assert source.label_values(selector, "node", t0, t0 + 70 * 60 * 10**9) == {"a", "b"}
        with pytest.raises(SourceError) as caught:
            source.label_values(selector, "node", t0, t0 + 10**9)
    finally:
        engine.shutdown()
    assert str(caught.value) == f"{url}/api/v1/query: a count's answer must be a vector, not 'matrix'"
    lengths = [1_800_000, 1_800_000, 600_001]  # 30 min, 30 min, the rest and the ms before the start
    assert [q["query"] for q in asked[:3]] == [
        [f"count by (node) (count_over_time({selector}[{n}ms]))"] for n in lengths
    ]
    ends_ms = [t0 // 10**6 - 1 + sum(lengths[: k + 1]) for k in range(3)]
    assert [q["time"] for q in asked[:3]] == [[f"{t / 1000:.3f}"] for t in ends_ms]


def test_export_lines_split_and_out_of_order_merge_into_one_series_by_label_set() -> None:
    """VictoriaMetrics may split a series over lines, in any order, with labels in any order."""
    line = json.loads(VM_LINE)
    first = {**line, "values": line["values"][3:], "timestamps": line["timestamps"][3:]}
    labels = dict(reversed(list(line["metric"].items())))
    second = {"metric": labels, "values": line["values"][:4], "timestamps": line["timestamps"][:4]}
    (series,) = merged([export_piece(first), export_piece(second)])
    assert series.t_ns.tolist() == [t * 1_000_000 for t in line["timestamps"]]  # sorted, the overlap once
    assert np.all(series.values == 1.0)
    # a staleness marker: VictoriaMetrics exports a remote-written stale NaN as null (as the real one here
    # answered: "values":[1,2,null,3]); a NaN read as such too; neither is a sample
    (stale,) = merged([export_piece({**line, "values": [1, None, 1, math.nan, 1, 1]})])
    assert len(stale.t_ns) == 4
    with pytest.raises(SourceError, match="6 timestamps for 5 values"):
        export_piece({**line, "values": line["values"][1:]})
    with pytest.raises(SourceError, match="labels"):
        export_piece({**line, "metric": {"a": 1}})


@pytest.mark.parametrize(
    ("values", "stamps", "expected"),
    [
        ([1, 2.5, 3], [1, 2, 3], ([1, 2, 3], [1.0, 2.5, 3.0])),  # numbers: numpy takes them at once
        (["1.5", 2], [1, 2], ([1, 2], [1.5, 2.0])),  # a number as text: item by item, as float() reads it
        ([True, 2.0], [1.9, 2], ([1, 2], [1.0, 2.0])),  # a bool is 1; a float stamp is cut to whole ms
    ],
)
def test_an_export_line_is_read_as_float_and_int_read_each_item(
    values: list[object], stamps: list[object], expected: tuple[list[int], list[float]]
) -> None:
    line = {"metric": {"__name__": "m"}, "values": values, "timestamps": stamps}
    _, t_ms, got = export_piece(line)
    assert (np.asarray(t_ms).tolist(), np.asarray(got).tolist()) == expected
    for bad in ([{"v": 1}, 1], ["one", 1], [[1], 1]):  # null is a staleness marker: above
        with pytest.raises(SourceError, match="not a number"):
            export_piece({**line, "values": bad, "timestamps": [1, 2]})
    for stamps_bad in ([None, 2], [2**63, 2], [2**64 + 1, 2]):  # beyond int64: refused, never wrapped
        with pytest.raises(SourceError, match="not a number"):
            export_piece({**line, "values": [1, 2], "timestamps": stamps_bad})


def test_export_lines_with_bare_nan_or_infinity_are_read(tmp_path: pathlib.Path) -> None:
    """JSON lines as an engine writes them: most plain JSON (the fast parser), some with ±Inf as Go writes it
    (VictoriaMetrics 1.79.5's answer for samples imported as +Inf and -Inf, recorded) or NaN as a bare word
    (the lenient one); a line that is neither is one error naming its number."""
    body = b'{"a": [1, 2]}\n\n{"metric":{"__name__":"m_inf","node":"a"},"values":[+Inf,-Inf,1],'
    body += b'"timestamps":[1796409589000,1796409589001,1796409589002]}\n{"c": NaN}\n'

    class Lines(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            payload = body if "good" in self.path else body + b"{not json\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Lines)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_address[1]}")
        a, b, c = client.get_lines("/good", {})
        assert a == {"a": [1, 2]} and math.isnan(c["c"])
        assert b["values"] == [math.inf, -math.inf, 1] and b["metric"]["node"] == "a"
        with pytest.raises(SourceError, match="line 5 is not JSON"):
            list(client.get_lines("/bad", {}))
    finally:
        server.shutdown()
        server.server_close()


def test_urls_are_checked_and_never_carry_credentials_out() -> None:
    assert check_url("https://prom.example:9090/prometheus/") == "https://prom.example:9090/prometheus"
    assert public_url("https://u:secret@prom.example/x?token=1") == "https://prom.example/x"
    for bad in ("ftp://prom.example", "prom.example:9090", "http://:9090"):
        with pytest.raises(SourceError, match="http:// or https://"):
            check_url(bad)
    with pytest.raises(SourceError, match="credentials do not belong in the URL"):
        check_url("https://u:secret@prom.example")


def test_auth_headers_come_from_files_and_a_bad_file_is_one_line(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    password = tmp_path / "pw"
    password.write_text("s3cret\n")
    assert Auth(bearer_token_file=token).header() == "Bearer t0ken"
    assert Auth(user="grafana", password_file=password).header() == "Basic Z3JhZmFuYTpzM2NyZXQ="
    assert Auth().header() is None
    with pytest.raises(SourceError, match="cannot read") as caught:
        Auth(bearer_token_file=tmp_path / "missing").header()
    assert "\n" not in str(caught.value)


def test_an_answer_cut_short_is_one_line_naming_the_url() -> None:
    """An engine that promises 1000 bytes and closes after 15 (a traceback from http.client before, found by
    a bad-input sweep), and a JSON-lines answer whose last line stops mid-way (it read "line 2 is not
    JSON"): each says the answer was cut short, and where from."""

    class Short(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            lines = "/api/v1/export" in self.path
            payload = (
                b'{"metric":{},"values":[1],"timestamps":[1]}\n{"metric":{"__na'
                if lines
                else b'{"status":"succ'
            )
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload) if lines else 1000))
            self.end_headers()
            self.wfile.write(payload)
            self.close_connection = True

        def log_message(self, *_args: object) -> None:
            pass

    engine = _serve(Short)
    url = f"http://127.0.0.1:{engine.server_port}"
    try:
        with pytest.raises(SourceError) as json_cut:
            Client(url).get_json("/api/v1/query", {})
        with pytest.raises(SourceError) as lines_cut:
            list(Client(url).get_lines("/api/v1/export", {}))
    finally:
        engine.shutdown()
        engine.server_close()
    said = f"{url}/api/v1/query: the answer was cut short (15 of 1000 bytes)"
    assert str(json_cut.value) == said

    chunked = _serve(_chunked([b'28\r\n{"status":"succ']))  # a chunk of 40 bytes announced, 15 sent
    try:
        with pytest.raises(SourceError, match=r"the answer was cut short \(a chunk of it ended early\)$"):
            Client(f"http://127.0.0.1:{chunked.server_port}").get_json("/api/v1/query", {})
    finally:
        chunked.shutdown()
        chunked.server_close()
    assert str(json_cut.value) == said
    assert str(lines_cut.value) == f"{url}/api/v1/export: the answer was cut short (in line 2)"


def test_an_answer_larger_than_any_read_is_refused_before_it_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 450 MB answer (a wrong URL, a proxy's) was read and parsed whole: 6 GB and 78 s before its one-line
    refusal. The cap is made small here, as the answer is: the same code reads past it by one byte."""
    monkeypatch.setattr(prom_client, "MAX_ANSWER_BYTES", 1 << 20)

    piece = b"[1796389455.0," + b'"1",' * 16_000 + b'"1"],'
    head = b'{"status":"success","data":{"resultType":"matrix","result":[{"values":['
    parts = [head, *[piece] * 64, b'[0,"1"]]}]}}']  # valid JSON, 4 MiB of it: no length to refuse by
    engine = _serve(_chunked([*(b"%x\r\n%s\r\n" % (len(part), part) for part in parts), b"0\r\n\r\n"]))
    url = f"http://127.0.0.1:{engine.server_port}"
    try:
        with pytest.raises(SourceError) as refused:
            Client(url).get_json("/api/v1/query", {})
    finally:
        engine.shutdown()
        engine.server_close()
    assert str(refused.value).startswith(f"{url}/api/v1/query answered more than 1 MiB to one query")


def _chunked(raw: list[bytes]) -> type[http.server.BaseHTTPRequestHandler]:
    """An engine that answers every GET 200 with ``Transfer-Encoding: chunked`` and then ``raw`` as it is
    (whole chunks, or a broken one), and closes; a client that stops reading ends it."""

    class Chunked(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for piece in raw:
                    self.wfile.write(piece)
            except OSError:  # the client stopped reading
                pass
            self.close_connection = True

        def log_message(self, *_args: object) -> None:
            pass

    return Chunked


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_redirect_is_not_followed_and_the_credentials_go_nowhere_else(tmp_path: pathlib.Path) -> None:
    """An engine answering 302 to another host: urllib's default opener would follow it and send the
    Authorization header there. The client asks nothing of that host, and says where the redirect points."""
    seen: list[str | None] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status":"success","data":{}}')

        def log_message(self, *_args: object) -> None:
            pass

    other = _serve(Elsewhere)

    class Redirecting(Elsewhere):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{other.server_port}{self.path}")
            self.end_headers()

    engine = _serve(Redirecting)
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    client = Client(f"http://127.0.0.1:{engine.server_port}", Auth(bearer_token_file=token))
    try:
        with pytest.raises(SourceError) as caught:
            client.get_json("/api/v1/query", {"query": "up"})
    finally:
        engine.shutdown()
        other.shutdown()
    assert seen == []
    said = str(caught.value)
    assert "HTTP 302, a redirect to http://localhost:" in said and "not followed" in said, said
    assert "t0ken" not in said and "query=" not in said and "\n" not in said


def _self_signed(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A certificate for 127.0.0.1 signed by its own key (an engine behind a private CA), as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "engine")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "engine.pem", folder / "engine.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


class BuildInfo(http.server.BaseHTTPRequestHandler):
    """An engine that answers every GET with Prometheus's build information."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"success","data":{"version":"2.42.0"}}')

    def log_message(self, *_args: object) -> None:
        pass


def test_tls_is_verified_and_a_private_ca_is_added_with_ssl_cert_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTPS engine whose certificate no system CA signed: refused in one line that says how to add
    its CA; with SSL_CERT_FILE naming it, the same client reads the engine."""

    cert_file, key_file = _self_signed(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BuildInfo)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_port}"
    try:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(Unreachable) as caught:
            Client(url).get_json("/api/v1/status/buildinfo", {})
        said = str(caught.value)
        assert "CERTIFICATE_VERIFY_FAILED" in said and "point SSL_CERT_FILE at its certificate" in said, said
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
        assert Client(url).get_json("/api/v1/status/buildinfo", {}) == {"version": "2.42.0"}
    finally:
        server.shutdown()


def test_https_to_a_plain_http_engine_says_so() -> None:
    """`https://` typed for an engine that speaks plain HTTP: OpenSSL's `WRONG_VERSION_NUMBER` alone (what a
    new user read) does not say which way round it is; the line does."""

    server = _serve(BuildInfo)
    try:
        with pytest.raises(Unreachable) as caught:
            Client(f"https://127.0.0.1:{server.server_port}").get_json("/api/v1/status/buildinfo", {})
        said = str(caught.value)
        assert "does its URL start with http://, not https://?" in said, said  # OpenSSL's words vary
        assert Client(f"http://127.0.0.1:{server.server_port}").get_json("/api/v1/status/buildinfo", {})
    finally:
        server.shutdown()


def test_an_engine_that_cannot_be_reached_ends_the_detection_at_once() -> None:
    """Before, a buildinfo question that found nobody (or timed out, 60 s) was taken as "Prometheus", and
    the query API was asked next, for as long again; a refusal (404 from an engine without buildinfo)
    still is."""
    with pytest.raises(Unreachable, match=r"cannot reach http://127\.0\.0\.1:1/api/v1/status/buildinfo"):
        detect(Client("http://127.0.0.1:1"))

    class NoBuildinfo(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    engine = _serve(NoBuildinfo)
    try:
        assert detect(Client(f"http://127.0.0.1:{engine.server_port}")) == "prometheus"
    finally:
        engine.shutdown()


def test_an_engine_that_never_answers_is_said_with_the_wait() -> None:
    """A listener that takes the connection and says nothing: the line says how long it waited (it said
    "timed out", after a minute of silence)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        client = Client(f"http://127.0.0.1:{port}", timeout_s=0.3)
        with pytest.raises(Unreachable) as caught:
            client.get_json("/api/v1/status/buildinfo", {})
    assert str(caught.value) == (
        f"cannot reach http://127.0.0.1:{port}/api/v1/status/buildinfo: no answer in 0.3 s"
    )


def test_an_end_after_now_is_warned_about_before_the_engine_is_asked(tmp_path: pathlib.Path) -> None:
    """A date typed a day ahead, or an export asked for before the run ended: samples after now do not
    exist yet, and those windows would read as gaps (before, exit 0 and no word)."""
    at = (time.time_ns() // 10**9 + 3600) * 10**9
    windows = tmp_path / "w.json"
    windows.write_text(
        json.dumps({"windows": [{"id": "r", "phase": "timed", "t_start_ns": at, "t_end_ns": at + 10**9}]})
    )
    start, end = str(at // 10**9 - 5), str(at // 10**9 + 5)
    done = _cli(
        "--prometheus", "http://127.0.0.1:1", "--windows", str(windows), "--start", start, "--end", end
    )
    warning, failure = done.stderr.splitlines()
    assert warning.startswith("sparkwatch: warning: --end ") and "is after now" in warning, done.stderr
    assert "cannot reach http://127.0.0.1:1" in failure and done.returncode == 2


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sparkwatch", "export", *argv], capture_output=True, text=True, timeout=60
    )


def test_vllm_windows_take_a_clock_anchor() -> None:
    """`--windows-format vllm` said "pass a clock anchor", and export had no flag to pass it with (a
    bad-input sweep): with --clock-anchor the windows are read and the engine is asked next; the flag is
    refused for another format, and with --db."""
    vllm = ROOT / "tests" / "fixtures" / "harness" / "vllm" / "bench_serve_detailed.json"
    s = 10**9
    anchor = ClockAnchor(wall_ns=1_759_522_400 * s, mono_ns=8_100 * s, uncertainty_ns=2_000)
    windows = load_windows("vllm", vllm, clock_anchor=anchor)
    span = [str(min(w.t_start_ns for w in windows) // s - 5), str(max(w.t_end_ns for w in windows) // s + 5)]
    given = ["--prometheus", "http://127.0.0.1:1", "--windows", str(vllm), "--windows-format", "vllm"]
    argv = [*given, "--start", span[0], "--end", span[1]]
    without = _cli(*argv)
    assert without.returncode == 2 and "pass a clock anchor" in without.stderr, without.stderr
    good = "1759522400000000000:8100000000000:2000"
    taken = _cli(*argv, "--clock-anchor", good)
    assert taken.returncode == 2 and "cannot reach http://127.0.0.1:1" in taken.stderr, taken.stderr
    plain = _cli(*given[:4], "--start", span[0], "--end", span[1], "--clock-anchor", good)
    assert plain.returncode == 2 and "--clock-anchor is for vllm files" in plain.stderr, plain.stderr
    run = _cli("--prometheus", "http://127.0.0.1:1", "r1", "--clock-anchor", good)  # its windows are placed
    assert run.returncode == 2 and "--clock-anchor goes with --windows FILE of vllm" in run.stderr
    db = _cli("--db", "x.db", "--clock-anchor", good)
    assert db.returncode == 2 and "--clock-anchor goes with --prometheus, not --db" in db.stderr


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--prometheus", "http://127.0.0.1:1"], "--prometheus needs --windows, --start, --end"),
        (["--db", "x.db", "--start", "1764850000"], "--start goes with --prometheus, not --db"),
        (["--db", "x.db", "--prometheus", "http://a"], "not allowed with argument"),
        (
            ["--prometheus", "http://a", "--windows", "w", "--start", "1764850002", "--end", "1764850001"],
            "--end must be after",
        ),
        (
            ["--prometheus", "http://a", "--windows", "w", "--start", "x", "--end", "1764850001"],
            "argument --start",
        ),
        (
            [
                "--prometheus",
                "http://a",
                "--windows",
                "w",
                "--start",
                "1764850001",
                "--end",
                "1764850002",
                "r1",
            ],
            "RUN (a coordinator's run) or --windows FILE: the windows come from one of them",
        ),
        (["--prometheus", "http://a", "--metrics", "collectd"], "invalid choice"),
        (  # milliseconds given as seconds: refused before anything is read, not at the file's writing
            ["--prometheus", "http://a", "--windows", "w", "--start", "1796436500740", "--end", "1"],
            "argument --start: '1796436500740' is not a time between 2000 and 2100",
        ),
        (["--prometheus", "http://a", "--end", "1e30"], "argument --end: '1e30' is not a time between"),
        (["--prometheus", "http://a", "--end", "9999-01-01T00:00:00Z"], "argument --end: '9999-01-01"),
        (
            ["--prometheus", "http://a", "--nodes-label", "bad label"],
            "argument --nodes-label: 'bad label': a",
        ),
        (["--db", "x.db", "--nodes", "a"], "--nodes goes with --prometheus, not --db"),
        (  # each was taken with --db and did nothing (a bad-input sweep), a token file that is not there too
            ["--db", "x.db", "--metrics", "dcgm", "--engine", "auto", "--nodes-label", "node"],
            "--nodes-label, --metrics, --engine go with --prometheus, not --db",
        ),
        (
            ["--db", "x.db", "--windows-format", "guidellm", "--bearer-token-file", "/nope"],
            "--windows-format, --bearer-token-file go with --prometheus, not --db",
        ),
        (["--prometheus", "http://a", "--nodes", "a,,b"], "argument --nodes: 'a,,b': node names separated"),
        (
            ["--db", "x.db", "--engine-metrics", '{job="v"}'],
            "--engine-metrics goes with --prometheus, not --db",
        ),
        (
            ["--prometheus", "http://a", "--engine-metrics", "job=v"],
            "argument --engine-metrics: 'job=v': label",
        ),
        (["--prometheus", "http://a", "--engine-metrics", "{ }"], "argument --engine-metrics: '{ }': label"),
        (
            ["--db", "x.db", "--series-matchers", '{job=""}'],
            "--series-matchers goes with --prometheus, not --db",
        ),
        (
            ["--prometheus", "http://a", "--series-matchers", 'job=""'],
            "argument --series-matchers: 'job=\"\"': label",
        ),
    ],
)
def test_export_flags_are_refused_in_one_line(argv: list[str], said: str) -> None:
    done = _cli(*argv)
    assert done.returncode == 2
    assert said in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://127.0.0.1:99999", "not a URL with a valid host and port (Port out of range"),
        ("http://u:secret@[::1", "not a URL with a valid host and port"),
        ("http://127.0.0.1:9/api/v1/write", "the engine's API root, without /api/v1/"),
        ("ftp://127.0.0.1:9", "must be an http:// or https:// URL with a host, not 'ftp://127.0.0.1:9'"),
        ("https://u:secret@127.0.0.1:9", "credentials do not belong in the URL; use --bearer-token-file"),
    ],
)
def test_an_engine_url_that_is_not_an_api_root_is_one_line(
    tmp_path: pathlib.Path, url: str, said: str
) -> None:
    windows = tmp_path / "w.json"
    windows.write_text(
        json.dumps({"windows": [{"id": "a", "phase": "timed", "t_start_ns": 1, "t_end_ns": 2}]})
    )
    done = _cli(
        "--prometheus", url, "--windows", str(windows), "--start", "1764850000", "--end", "1764850100"
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # a flag's error as any other flag's (it was "sparkwatch: error: --prometheus …", after the parse)
    assert done.stderr.startswith(f"sparkwatch export: error: argument --prometheus: {said}"), done.stderr
    assert done.stderr.count("\n") == 1 and "secret" not in done.stderr


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2025-12-05T00:00:00Z", "2025-12-05T01:00:00Z"),  # a year early
        ("2026-12-05T05:00:00Z", "2026-12-05T06:00:00Z"),  # a time-zone slip: an hour late
        ("2026-12-05T04:00:00Z", "2026-12-05T04:08:24Z"),  # an end typed a few seconds early
    ],
)
def test_windows_outside_the_span_are_one_line_before_the_engine_is_asked(
    tmp_path: pathlib.Path, start: str, end: str
) -> None:
    """The coordinator's rule for windows imported into an ended run (give or take 2 s): a span typed wrong
    would otherwise measure a window against a run it is not in and exit 0. No engine listens here."""
    windows = tmp_path / "w.json"
    at = 1_796_443_700 * 10**9  # 2026-12-05T04:08:20Z
    rows = [{"id": f"r-{k}", "phase": "timed", "t_start_ns": at + k * 10**9, "t_end_ns": at + (k + 2) * 10**9}
            for k in range(6)]  # fmt: skip
    windows.write_text(json.dumps({"windows": rows}))
    done = _cli(
        "--prometheus", "http://127.0.0.1:1", "--engine", "prometheus", "--windows", str(windows),
        "--start", start, "--end", end,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"outside --start {start.replace(':00Z', ':00.000Z')}" in done.stderr, done.stderr
    assert "the windows run from 2026-12-05T04:08:20.000Z to 2026-12-05T04:08:27.000Z" in done.stderr
    assert "cannot reach" not in done.stderr
    late = "window 'r-5' lies" if end.endswith("04:08:24Z") else "'r-3', 'r-4' and 1 more lie"
    assert late in done.stderr, done.stderr


def test_windows_inside_the_span_give_or_take_two_seconds_are_taken(tmp_path: pathlib.Path) -> None:
    """An end typed to the whole second before the last window ended (lmx stamps whole seconds): no span
    refusal, so the engine is asked (none listens here)."""
    windows = tmp_path / "w.json"
    at = 1_796_443_700 * 10**9
    windows.write_text(
        json.dumps(
            {"windows": [{"id": "r", "phase": "timed", "t_start_ns": at, "t_end_ns": at + 2_500_000_000}]}
        )
    )
    done = _cli(
        "--prometheus", "http://127.0.0.1:1", "--engine", "prometheus", "--windows", str(windows),
        "--start", "2026-12-05T04:08:20Z", "--end", "2026-12-05T04:08:21Z",
    )  # fmt: skip
    assert done.returncode != 0 and "outside --start" not in done.stderr and "127.0.0.1:1" in done.stderr


def test_a_windows_file_that_cannot_be_read_is_one_line(tmp_path: pathlib.Path) -> None:
    """The engine is asked nothing before the windows are read: no engine is listening here."""
    windows = tmp_path / "w.csv"
    windows.write_text("id,phase,t_start_ns\n")
    done = _cli(
        "--prometheus",
        "http://127.0.0.1:1",
        "--engine",
        "prometheus",
        "--windows",
        str(windows),
        "--start",
        "1764850001",
        "--end",
        "1764850002",
    )
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "w.csv" in done.stderr


def test_a_series_in_several_label_sets_is_merged_first_known_value_first() -> None:
    """A signal whose labels changed during the span (a relabel rule, an exporter upgrade) is one series:
    at each time, the first part's known value, else the next's."""
    a = _raw([1, 2, 3], [10.0, math.nan, 30.0], uuid="g", version="1")
    b = _raw([2, 3, 4], [20.0, 99.0, 40.0], uuid="g", version="2")
    m = merged_parts([a, b])
    assert m.t_ns.tolist() == [round(t * 1e9) for t in (1, 2, 3, 4)] and m.values.tolist() == [10, 20, 30, 40]
    assert m.labels == a.labels and merged_parts([a]) is a


def test_a_long_error_body_keeps_its_start_and_its_end() -> None:
    """The engine's words may come last (VictoriaMetrics echoes the query first): a long body is kept as
    its start, an ellipsis and its end, on one line."""
    from sparkwatch.sources.prometheus.client import QUOTED_CHARS, QUOTED_TAIL_CHARS, _reason

    body = json.dumps({"status": "error", "error": "query=" + "x" * 900 + "\n: missing closing )"})
    said = _reason(body)
    assert said.startswith("query=xxx") and said.endswith("xx : missing closing )") and " … " in said
    assert len(said) == QUOTED_CHARS + len(" … ") + QUOTED_TAIL_CHARS and "\n" not in said
    assert _reason('{"error": "short"}') == "short" and _reason("") == "(empty answer)"
