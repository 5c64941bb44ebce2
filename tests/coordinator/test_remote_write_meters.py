"""A wall meter's readings through remote write: a real poller with a scripted meter, its sink the store's
and the writer's, the writer sending to a receiver on loopback that decodes the protobuf. What is stored is
sent on the store's stamps; what the meter did not say is not sent."""

from __future__ import annotations

import math
import pathlib
import struct
from collections.abc import Iterator
from typing import Any

import aiohttp

from helpers.frames import T0, sample_frame
from helpers.meter_sink import Sink
from helpers.write_receiver import HELLO, Receiver, receiver, until, writer
from sparkwatch.coordinator.remote_write.batch import Entry, group
from sparkwatch.coordinator.remote_write.meters import WrittenMeter
from sparkwatch.coordinator.remote_write.series import STALE_NAN
from sparkwatch.meters.poller import MeterError, MeterPoller, Reading
from sparkwatch.meters.spec import MeterSpec
from sparkwatch.store import Store
from sparkwatch.store.meters import MeterReading

__all__ = ["receiver"]  # the fixture, used by name

MS = 1_000_000


class Scripted:
    """A meter that answers each read with the next scripted reading or error."""

    def __init__(self, script: list[Reading | Exception]) -> None:
        self._script: Iterator[Reading | Exception] = iter(script)

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        step = next(self._script)
        if isinstance(step, Exception):
            raise step
        return step

    def waiting_for(self) -> str | None:
        return None

    async def close(self, session: aiohttp.ClientSession) -> None:
        pass


def clock(stamps_ns: list[int]) -> Any:
    """now_ns answering each poll's start and end in turn (the reading is stamped at their middle)."""
    it = iter(stamps_ns)
    return lambda: next(it)


STALE = "stale"  # Prometheus' staleness marker (a NaN of its own bits), shown as this word


def series_of(rx: Receiver) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float | str]]]:
    out: dict[tuple[tuple[str, str], ...], list[tuple[int, float | str]]] = {}
    for _, request in rx.requests:
        for ts in request.timeseries:
            labels = tuple((label.name, label.value) for label in ts.labels)
            out.setdefault(labels, []).extend((s.timestamp, _shown(s.value)) for s in ts.samples)
    return out


def _shown(value: float) -> float | str:
    if math.isnan(value):
        assert struct.pack("<d", value) == struct.pack("<d", STALE_NAN)
        return STALE
    return value


async def test_stored_readings_go_out_on_the_stores_stamps_and_a_failed_poll_marks_them_stale(
    receiver: Receiver,
) -> None:
    """A failed poll sends no value; the meter's series are marked stale 1 ms after its last reading (else
    the engine answers that reading for its 5 min lookback while the meter says nothing). A value a reading
    lacks that the last one had is marked stale at that reading, as a node's frames are."""
    w = writer(receiver.url)
    w.start()
    store = Sink()
    agent_names: dict[str, str] = {}  # Coordinator.agent_name's answers
    sink = WrittenMeter(store, w, lambda node: agent_names.get(node, node))
    script: list[Reading | Exception] = [
        Reading(61.0, 3600.0),
        MeterError("HTTP 500"),
        Reading(None, 3700.0),  # the meter gave its counter but no power
        Reading(88.0),
        Reading(89.0),
    ]
    # poll k starts at k s and takes 10 ms; the last one is stamped in the same ms as the one before
    stamps = [T0, T0 + 10 * MS, T0 + 1000 * MS, T0 + 3000 * MS, T0 + 3010 * MS]
    stamps += [T0 + 4000 * MS, T0 + 4010 * MS, T0 + 4000 * MS, T0 + 4010 * MS]
    spec = MeterSpec("shelly", "http://127.0.0.1:9", domain="wall")
    poller = MeterPoller("coord-name", spec, Scripted(script), sink, now_ns=clock(stamps))
    async with aiohttp.ClientSession() as session:
        await poller.poll_once(session)  # no agent name known yet: the coordinator's name
        await poller.poll_once(session)
        agent_names["coord-name"] = "spark-a"  # its agent's hello said so
        for _ in range(3):
            await poller.poll_once(session)
    await until(lambda: w.stats.sent == 4)
    await w.stop()

    assert [r.power_w for r in store.readings] == [61.0, None, 88.0, 89.0]  # stored as before
    assert [e[2] for e in store.errors] == ["HTTP 500"]

    def named(metric: str, node: str) -> tuple[tuple[str, str], ...]:
        return (("__name__", metric), ("domain", "wall"), ("node", node), ("source", "meter:shelly"))

    power, energy = "sparkwatch_meter_power_watts", "sparkwatch_meter_energy_joules_total"
    interval = "sparkwatch_meter_interval_seconds"  # the poll interval (MeterSpec's default 1 s)
    failed = "sparkwatch_meter_failed_polls_total"  # with each reading: an export breaks where it rose
    t0_ms = T0 // MS
    # the last reading's stamp is its meter's last: sent 1 ms after it
    later = [(t0_ms + 3005, 1.0), (t0_ms + 4005, 1.0), (t0_ms + 4006, 1.0)]
    assert series_of(receiver) == {
        named(power, "coord-name"): [(t0_ms + 5, 61.0), (t0_ms + 6, STALE)],
        named(energy, "coord-name"): [(t0_ms + 5, 3600.0), (t0_ms + 6, STALE)],
        named(interval, "coord-name"): [(t0_ms + 5, 1.0), (t0_ms + 6, STALE)],
        named(failed, "coord-name"): [(t0_ms + 5, 0.0), (t0_ms + 6, STALE)],
        named(energy, "spark-a"): [(t0_ms + 3005, 3700.0), (t0_ms + 4005, STALE)],
        named(power, "spark-a"): [(t0_ms + 4005, 88.0), (t0_ms + 4006, 89.0)],
        named(interval, "spark-a"): later,
        named(failed, "spark-a"): [(t, 1.0) for t, _ in later],  # the failed poll before them
    }
    assert w.stats.dropped == {}


async def test_a_full_queue_drops_a_reading_and_counts_it(receiver: Receiver) -> None:
    receiver.after = 503
    w = writer(receiver.url, capacity=2)
    w.start()
    for k in range(5):
        w.offer_meter("n1", MeterReading("wall", "meter:redfish", 1.0, T0 + k * 10**9, 500.0, None, 0))
    assert w.stats.pending == 2 and w.stats.dropped == {"queue_full": 3}
    await w.stop(timeout_s=0.2)
    assert w.stats.dropped == {"queue_full": 3, "stopped": 2}
    w.offer_meter("n1", MeterReading("wall", "meter:redfish", 1.0, T0, 500.0, None, 0))
    assert w.stats.dropped["stopped"] == 3


def test_a_meters_stamps_rise_apart_from_its_nodes_samples() -> None:
    """A reading stamped before the node's last agent sample is sent as stamped (each meter keeps its own
    stamps rising, not the node's), and the node's next sample is not moved by the reading either."""
    reading = MeterReading("wall", "meter:redfish", 0.5, T0 + 50 * MS, 480.0, None, 0)
    entries = [
        Entry("spark-a", HELLO, [sample_frame(1, {"power_w": 40.0})]),  # at T0 + 100 ms
        Entry("spark-a", None, (), meter=reading),
        Entry("spark-a", HELLO, [sample_frame(2, {"power_w": 41.0})]),  # at T0 + 200 ms
    ]
    grouped, unreadable = group(entries, {})
    assert unreadable == 0
    by_name = {dict(k)["__name__"]: v for k, v in grouped.items() if dict(k)["__name__"].endswith("_watts")}
    assert by_name["sparkwatch_meter_power_watts"] == ([T0 // MS + 50], [480.0])
    assert by_name["sparkwatch_gpu_power_watts"] == ([T0 // MS + 100, T0 // MS + 200], [40.0, 41.0])


def test_a_reading_the_store_ignored_is_not_offered(tmp_path: pathlib.Path) -> None:
    """Two polls stamped in the same ns: the store keeps the first (one row per meter domain and time), and
    only what it kept goes to the engine, so the engine holds what SQLite does."""

    class Offers:
        def __init__(self) -> None:
            self.offered: list[tuple[str, MeterReading]] = []

        def offer_meter(self, node: str, reading: MeterReading, failed_polls: int = 0) -> None:
            self.offered.append((node, reading))

    store, offers = Store(tmp_path / "sw.db"), Offers()
    sink = WrittenMeter(store, offers, lambda node: f"agent-{node}")
    first = MeterReading("wall", "meter:shelly", 1.0, T0, 100.0, None, 0)
    again = MeterReading("wall", "meter:shelly", 1.0, T0, 101.0, None, 0)
    assert sink.add_meter_reading("n1", first) is True
    assert sink.add_meter_reading("n1", again) is False
    assert offers.offered == [("agent-n1", first)]
    assert store.meter_rows("n1", T0 - 1, T0 + 1).power_w.tolist() == [100.0]
    store.close()
