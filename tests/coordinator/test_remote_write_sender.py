"""The remote writer against an aiohttp receiver on loopback that answers as scripted: the body is a real
protobuf WriteRequest in snappy's block format with the remote-write headers; batches go out in order;
5xx, 429 and a dropped connection are retried with the injected backoff (and 429's Retry-After), other 4xx
are dropped and counted; a full queue drops and counts without ever blocking; a stop counts what it could
not send; and a resumed link's re-sent samples are not offered twice."""

from __future__ import annotations

import asyncio
import base64
import math
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

import cramjam
import pytest

from helpers.frames import T0, sample_frame
from helpers.processes import free_port
from helpers.write_receiver import HELLO, MESSAGES, Receiver, Sleeps, receiver, until, writer
from sparkwatch.coordinator.remote_write.answers import refusal_hint, shown_url
from sparkwatch.coordinator.remote_write.proto import HEADERS
from sparkwatch.coordinator.remote_write.sender import LOG_EVERY, LOG_FIRST, RemoteWriter
from sparkwatch.coordinator.remote_write.spec import RemoteWriteError, RemoteWriteSpec
from sparkwatch.core.clock import ClockOffset
from sparkwatch.links.state import LinkState
from sparkwatch.links.stream import StreamIngest
from sparkwatch.store import Store
from sparkwatch.wire import SampleFrame, decode_lines

__all__ = ["receiver"]  # the fixture, used by name


def frames(first: int, count: int) -> list[SampleFrame]:
    return [
        sample_frame(seq, {"power_w": 10.0 + seq, "util_ratio": 0.5}) for seq in range(first, first + count)
    ]


def test_the_body_is_a_snappy_block_of_a_write_request_that_protobuf_reads_back() -> None:
    series = {
        (("__name__", "sparkwatch_gpu_power_watts"), ("gpu", "0"), ("node", "n1"), ("uuid", "GPU-x")): (
            [1_800_000_000_000, 1_800_000_000_100],
            [31.5, 0.0],
        )
    }
    body = MESSAGES.encode(series)
    raw = bytes(cramjam.snappy.decompress_raw(body))  # the block format, not the framed one
    request = MESSAGES.write_request.FromString(raw)
    (ts,) = request.timeseries
    assert [(label.name, label.value) for label in ts.labels] == list(next(iter(series)))
    assert [(s.timestamp, s.value) for s in ts.samples] == [
        (1_800_000_000_000, 31.5),
        (1_800_000_000_100, 0.0),
    ]
    # field numbers as in prompb: WriteRequest.timeseries = 1, TimeSeries.labels = 1, samples = 2,
    # Label.name = 1, value = 2, Sample.value = 1 (double), timestamp = 2 (int64)
    assert raw[0] == (1 << 3 | 2) and raw.count(b"sparkwatch_gpu_power_watts") == 1
    sample = MESSAGES.sample(value=31.5, timestamp=1).SerializeToString()
    assert sample[0] == (1 << 3 | 1) and sample[9] == (2 << 3 | 0)


async def test_batches_go_out_in_order_with_the_remote_write_headers(receiver: Receiver) -> None:
    w = writer(receiver.url, batch_samples=4)
    w.start()
    w.offer("n1", HELLO, frames(1, 3))
    w.offer("n1", HELLO, frames(4, 3))
    await until(lambda: w.stats.sent == 6)
    await w.stop()
    headers = receiver.requests[0][0]
    assert {k: headers[k] for k in HEADERS} == HEADERS
    power = [
        p for i in range(len(receiver.requests)) for p in receiver.samples(i)["sparkwatch_gpu_power_watts"]
    ]
    assert power == [(T0 // 10**6 + seq * 100, 10.0 + seq) for seq in range(1, 7)]
    assert all(
        len(receiver.samples(i)["sparkwatch_gpu_power_watts"]) <= 4 for i in range(len(receiver.requests))
    )
    assert w.stats.pending == 0 and w.stats.dropped == {} and w.stats.retries == 0


@pytest.mark.parametrize("failure", [500, 503, 429, "drop"])
async def test_server_errors_throttling_and_lost_connections_are_retried_with_backoff(
    receiver: Receiver, failure: Any
) -> None:
    receiver.script = [failure, failure, failure]
    sleeps = Sleeps()
    w = writer(receiver.url, sleeps)
    w.start()
    w.offer("n1", HELLO, frames(1, 5))
    await until(lambda: w.stats.sent == 5)
    await w.stop()
    assert w.stats.retries == 3 and w.stats.dropped == {}
    assert sleeps.delays == [0.75, 1.5, 3.0]  # 1, 2, 4 s less the jitter's half (rand 0.5, jitter 0.5)
    bodies = [r[1].SerializeToString() for r in receiver.requests]
    assert len(bodies) == 4 and len(set(bodies)) == 1  # the same batch each time


async def test_a_receiver_that_does_not_answer_in_time_is_retried_and_the_log_says_so(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.script = ["slow"]
    w = writer(receiver.url, timeout_s=0.2)
    w.start()
    w.offer("n1", HELLO, frames(1, 2))
    await until(lambda: w.stats.sent == 2)
    await w.stop()
    assert w.stats.retries == 1
    (warning,) = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert warning == f"remote write to {receiver.url} failed (no answer within 0.2 s); retrying with backoff"


async def test_a_429_retry_after_is_honoured_up_to_the_longest_wait(receiver: Receiver) -> None:
    receiver.script = [(429, {"Retry-After": "5"}), (429, {"Retry-After": "3600"})]
    sleeps = Sleeps()
    w = writer(receiver.url, sleeps, retry_max_s=20.0)
    w.start()
    w.offer("n1", HELLO, frames(1, 1))
    await until(lambda: w.stats.sent == 1)
    await w.stop()
    assert sleeps.delays == [5.0, 20.0]


@pytest.mark.parametrize("status", [400, 401, 404, 413])
async def test_other_client_errors_drop_the_batch_counted_and_the_next_one_goes(
    receiver: Receiver, status: int
) -> None:
    receiver.script = [status]
    sleeps = Sleeps()
    w = writer(receiver.url, sleeps)
    w.start()
    w.offer("n1", HELLO, frames(1, 3))
    await until(lambda: w.stats.dropped.get("rejected") == 3)
    w.offer("n1", HELLO, frames(4, 2))
    await until(lambda: w.stats.sent == 2)
    await w.stop()
    assert len(receiver.requests) == 2 and sleeps.delays == [] and w.stats.retries == 0


async def test_refusals_are_logged_the_first_few_then_one_in_many_as_the_log_says(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong URL refuses every batch: the first LOG_FIRST are logged, the last of them saying that from
    there on one in LOG_EVERY is (a user read five lines in ten seconds, then silence, as the end of it)."""
    receiver.script = [405] * (LOG_FIRST + 2)
    w = writer(receiver.url, Sleeps())
    w.start()
    for k in range(LOG_FIRST + 2):
        w.offer("n1", HELLO, frames(1 + k, 1))
        await until(lambda k=k: w.stats.dropped.get("rejected") == k + 1)
    await w.stop()
    lines = [r.getMessage() for r in caplog.records if "samples refused" in r.getMessage()]
    assert len(lines) == LOG_FIRST, lines
    assert lines[-1].endswith(f"; from here on one refusal in {LOG_EVERY} is logged")
    assert not any("from here on" in line for line in lines[:-1])


def _nodes(receiver: Receiver, index: int) -> set[str]:
    """The node labels of request ``index``'s series."""
    request = receiver.requests[index][1]
    return {label.value for ts in request.timeseries for label in ts.labels if label.name == "node"}


async def test_a_bad_sample_of_one_node_does_not_drop_the_other_nodes_samples(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Prometheus refuses a whole request with 400 for one sample out of order (a second writer of one
    node's series): the batch goes again one node at a time and only that node's samples are dropped. Other
    refusals (auth, a wrong URL) are not about a node: one request, dropped whole."""
    receiver.script = [400, 204, (400, {})]
    w = writer(receiver.url, Sleeps())
    w.offer("n1", HELLO, frames(1, 3))
    w.offer("n2", {**HELLO, "node": "n2", "boot_id": "b2"}, frames(1, 2))
    w.start()
    await until(lambda: w.stats.pending == 0)
    assert (w.stats.sent, w.stats.dropped) == (3, {"rejected": 2})
    assert [_nodes(receiver, i) for i in range(3)] == [{"n1", "n2"}, {"n1"}, {"n2"}]
    assert "2 samples refused, not retried (node n2: HTTP 400: said 400)" in caplog.text
    receiver.script = [401]
    w.offer("n1", HELLO, frames(4, 1))
    w.offer("n2", {**HELLO, "node": "n2", "boot_id": "b2"}, frames(3, 1))
    await until(lambda: w.stats.dropped["rejected"] == 4)
    await w.stop()
    assert len(receiver.requests) == 4 and w.stats.sent == 3


async def test_a_stop_while_a_refused_batch_goes_node_by_node_counts_each_sample_once(
    receiver: Receiver,
) -> None:
    """n1's part sent, n2's still retried (503) when the stop comes: before, the whole batch was still
    pending, so n1's samples were counted sent and dropped both."""
    receiver.script, receiver.after = [400, 204], 503
    w = writer(receiver.url, Sleeps())
    w.offer("n1", HELLO, frames(1, 3))
    w.offer("n2", {**HELLO, "node": "n2", "boot_id": "b2"}, frames(1, 2))
    w.start()
    await until(lambda: w.stats.sent == 3 and w.stats.retries > 0)
    await w.stop(timeout_s=0.2)
    assert (w.stats.sent, w.stats.dropped, w.stats.pending) == (3, {"stopped": 2}, 0)


@pytest.mark.parametrize(
    ("status", "hint"),
    [
        (401, "(the receiver wants credentials: --remote-write-bearer-token-file, or"),
        (404, "(no remote-write receiver at this URL: Prometheus takes writes at /api/v1/write only with"),
        (405, "Mimir's is /api/v1/push, Thanos Receive's /api/v1/receive)"),
    ],
)
async def test_a_refusal_the_settings_explain_says_which_in_its_warning(
    receiver: Receiver, status: int, hint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver's refusal body is often empty (VictoriaMetrics' 401): the warning says what to check."""
    receiver.script = [status]
    w = writer(receiver.url, Sleeps())
    w.start()
    w.offer("n1", HELLO, frames(1, 1))
    await until(lambda: w.stats.dropped.get("rejected") == 1)
    await w.stop()
    (warning,) = [r.getMessage() for r in caplog.records if "not retried" in r.getMessage()]
    assert f"(HTTP {status}" in warning and hint in warning, warning


async def test_a_receiver_nothing_listens_at_is_said_in_the_systems_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """It logged aiohttp's ``ClientConnectorError: Cannot connect to host … ssl:default [Connect call
    failed …]``, where every other part of sparkwatch says ``Connection refused``."""
    sleeps = Sleeps()
    w = writer(f"http://127.0.0.1:{free_port()}/api/v1/write", sleeps)
    w.start()
    w.offer("n1", HELLO, frames(1, 1))
    await until(lambda: w.stats.retries >= 1)
    await w.stop()
    (failed,) = [r.getMessage() for r in caplog.records if "retrying with backoff" in r.getMessage()]
    assert failed.endswith("failed (Connection refused); retrying with backoff"), failed


async def test_a_sparkwatch_service_given_as_the_receiver_is_named(
    agent_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent's URL as --remote-write answered 404 with the generic hint; its Server header says what it
    is, as the CLI says it of a wrong --coordinator."""
    agent = agent_factory("--backend", "sim", "--node", "n1")
    w = writer(f"http://127.0.0.1:{agent.port}/api/v1/write", Sleeps())
    w.start()
    w.offer("n1", HELLO, frames(1, 1))
    await until(lambda: w.stats.dropped.get("rejected") == 1)
    await w.stop()
    (warning,) = [r.getMessage() for r in caplog.records if "not retried" in r.getMessage()]
    assert warning.endswith(
        "(that URL is a sparkwatch-agent, not a remote-write receiver: give the engine's write URL))"
    ), warning


def test_a_refusal_of_credentials_given_is_told_apart_from_none_given() -> None:
    assert refusal_hint(401, authorised=True) == " (the receiver refused the credentials given)"
    assert refusal_hint(403, authorised=True) == " (the credentials given may not write here)"
    assert refusal_hint(400, authorised=False) == refusal_hint(413, authorised=True) == ""


def test_a_redirect_is_said_with_where_it_leads() -> None:
    """Prometheus answers a write to `/api/v1/write/` with a 307: every batch was dropped with no hint."""
    said = refusal_hint(307, authorised=False, location="http://u:pw@prom:9090/api/v1/write?x=1")
    assert said == (
        " (the receiver redirects to http://prom:9090/api/v1/write: give --remote-write that URL, e.g."
        " without a trailing /)"
    )


async def test_a_full_queue_drops_and_counts_and_offer_never_waits(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.after = 503  # the receiver is down (however many times the unwaiting retries ask)
    w = writer(receiver.url, capacity=10, batch_samples=4)
    w.start()
    loop = asyncio.get_running_loop()
    started = loop.time()
    for first in range(1, 40, 3):
        w.offer("n1", HELLO, frames(first, 3))  # 39 samples into room for 10
    assert loop.time() - started < 0.5
    assert w.stats.pending == 10 and w.stats.dropped == {"queue_full": 29}
    full = [r.getMessage() for r in caplog.records if "queue is full" in r.getMessage()]
    assert full == [
        f"remote write to {receiver.url}: the queue is full (10 samples); new samples are dropped and"
        " counted until it has room (the SQLite file keeps them)"
    ]  # once for the whole episode, not once per dropped offer
    await until(lambda: w.stats.retries >= 2)
    await w.stop(timeout_s=0.2)  # still failing: what is held is given up and counted
    assert w.stats.dropped == {"queue_full": 29, "stopped": 10} and w.stats.pending == 0 and w.stats.sent == 0
    given_up = [r.getMessage() for r in caplog.records if "not sent" in r.getMessage()]
    assert given_up == [
        f"remote write to {receiver.url}: 10 samples were not sent in the 0.2 s the stop allows"
    ]


async def test_a_stop_sends_what_is_queued_before_it_ends(receiver: Receiver) -> None:
    w = writer(receiver.url, batch_wait_s=60.0)  # would wait a minute for a fuller batch
    w.start()
    w.offer("n1", HELLO, frames(1, 7))
    await asyncio.sleep(0.05)
    await w.stop(timeout_s=5.0)
    assert w.stats.sent == 7 and w.stats.pending == 0
    w.offer("n1", HELLO, frames(8, 2))  # after the stop
    assert w.stats.dropped == {"stopped": 2}


async def test_a_streams_end_alone_in_its_batch_is_posted(receiver: Receiver) -> None:
    """A link that ends with nothing else queued (one node, or every node cut at once): its staleness
    markers are a batch of no sample, and were built, then never posted (and could not be made again)."""
    w = writer(receiver.url)
    w.start()
    w.offer("n1", HELLO, frames(1, 2))
    await until(lambda: w.stats.sent == 2)
    w.offer_end("n1")
    await until(lambda: len(receiver.requests) == 2)
    w.offer_end("n1")  # a second end: nothing left to mark, nothing posted
    await asyncio.sleep(0.2)
    await w.stop()
    assert len(receiver.requests) == 2 and w.stats.sent == 2 and w.stats.pending == 0
    first, ended = receiver.requests[0][1], receiver.requests[1][1]
    values = [sample.value for series in ended.timeseries for sample in series.samples]
    assert values and all(math.isnan(v) for v in values)  # one stale marker per series frame 2 had
    assert len(values) == len(first.timeseries)


async def test_unreadable_frames_are_left_out_and_counted(receiver: Receiver) -> None:
    good = frames(1, 2)
    # the store's decoder skips a field it does not read, so a number no double holds there is stored
    (bad,), rejected = decode_lines(good[1].raw.replace('"sensors": []', '"sensors": [], "x": 1e400'))
    assert rejected == [] and isinstance(bad, SampleFrame)
    w = writer(receiver.url)
    w.start()
    w.offer("n1", HELLO, [good[0], bad])
    await until(lambda: w.stats.sent == 1)
    await w.stop()
    assert w.stats.dropped == {"unreadable": 1}


async def test_bearer_token_and_basic_auth_come_from_files(
    receiver: Receiver, tmp_path: pathlib.Path
) -> None:
    token, password = tmp_path / "token", tmp_path / "password"
    token.write_text("s3cret\n")
    password.write_text("pw\n")
    for spec, expected in (
        (RemoteWriteSpec(receiver.url, bearer_token_file=token), "Bearer s3cret"),
        (
            RemoteWriteSpec(receiver.url, basic_auth_user="u", basic_auth_password_file=password),
            "Basic " + base64.b64encode(b"u:pw").decode(),
        ),
    ):
        spec.check()
        w = RemoteWriter(spec, batch_wait_s=0.0)
        w.start()
        w.offer("n1", HELLO, frames(1, 1))
        await until(lambda w=w: w.stats.sent == 1)
        await w.stop()
        assert receiver.requests[-1][0]["Authorization"] == expected


def test_unusable_auth_settings_are_one_line_errors(tmp_path: pathlib.Path) -> None:
    url = "https://rx.example/api/v1/write"
    with pytest.raises(RemoteWriteError, match="cannot read the remote-write bearer token file"):
        RemoteWriteSpec(url, bearer_token_file=tmp_path / "missing").check()
    with pytest.raises(RemoteWriteError, match="not both"):
        RemoteWriteSpec(url, bearer_token_file=tmp_path / "t", basic_auth_user="u").check()
    with pytest.raises(RemoteWriteError, match="needs --remote-write-basic-auth-user"):
        RemoteWriteSpec(url, basic_auth_password_file=tmp_path / "p").check()
    assert (
        shown_url("https://u:p@rx.example:8443/api/v1/write?token=x")
        == "https://rx.example:8443/api/v1/write"
    )


def test_a_resumed_link_offers_only_the_samples_the_store_did_not_have(tmp_path: pathlib.Path) -> None:
    """... each batch with the link's clock estimate at the time, which stamps it (batch.py)."""
    store = Store(tmp_path / "c.db")
    offered: list[list[int]] = []
    offsets: list[ClockOffset | None] = []

    def sink(node: str, hello: Any, got: Sequence[SampleFrame], offset: ClockOffset | None) -> None:
        offered.append([f.seq for f in got])
        offsets.append(offset)

    estimates = (None, ClockOffset(5_000_000_000, 1000, 3, 4, mono_offset_ns=7), ClockOffset(-3, 1, 3, 4))
    try:
        for (first, count), offset in zip(((1, 5), (3, 6), (3, 3)), estimates, strict=True):
            # a link, then two resumes that re-send stored seqs
            state = LinkState(node="n1", transport="test", offset=offset, offset_boot="b1")
            ingest = StreamIngest(store, state, sink=sink)
            ingest.feed(
                '{"type":"hello","boot_id":"b1","node":"n1"}\n'
                + "\n".join(f.raw for f in frames(first, count))
            )
            ingest.flush()
    finally:
        store.close()
    assert offered == [[1, 2, 3, 4, 5], [6, 7, 8]]  # the third batch was all stored already: nothing
    assert offsets == list(estimates[:2])


def test_a_links_estimate_stamps_only_the_boot_it_was_measured_on() -> None:
    state = LinkState(node="n1", transport="test")
    assert state.offset_for("b1") is None
    estimate = ClockOffset(5, 1, 3, 4, mono_offset_ns=7)
    state.clocked("b1", estimate)
    assert state.offset is estimate and state.offset_for("b1") is estimate
    assert state.offset_for("b2") is None and state.offset_for(None) is None


def test_the_queue_keeps_a_frames_line_and_stamps_not_the_frame() -> None:
    """A full queue of decoded frames was 118 MiB for 50 000 samples, 2.3x their lines: a batch reads the
    line and the stamps alone, and the rest goes when the link lets its flush go."""
    w = RemoteWriter(RemoteWriteSpec("http://127.0.0.1:9/api/v1/write"))
    flush = frames(1, 3)
    gpus = flush[0].gpus  # the decoded values: referred to by this name and by the frame while it lives
    held_by_both = sys.getrefcount(gpus)
    w.offer("n1", HELLO, flush)
    del flush
    assert sys.getrefcount(gpus) == held_by_both - 1  # the frame is gone; the queue did not keep it
    assert w.stats.pending == 3
