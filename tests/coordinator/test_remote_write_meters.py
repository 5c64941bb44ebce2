"""A wall meter's readings through remote write: a real poller with a scripted meter, its sink the store's
and the writer's, the writer sending to a receiver on loopback that decodes the protobuf. What is stored is
sent on the store's stamps; what the meter did not say is not sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp

from helpers.meter_sink import Sink
from helpers.write_receiver import Receiver, receiver, until, writer
from sparkwatch.coordinator.remote_write.meters import WrittenMeter
from sparkwatch.meters.poller import MeterError, MeterPoller, Reading
from sparkwatch.meters.spec import MeterSpec
from sparkwatch.store.meters import MeterReading

__all__ = ["receiver"]  # the fixture, used by name

T0_NS = 1_800_000_000_000_000_000
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


def clock(stamps_ns: list[int]) -> Any:
    """now_ns answering each poll's start and end in turn (the reading is stamped at their middle)."""
    it = iter(stamps_ns)
    return lambda: next(it)


def series_of(rx: Receiver) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    out: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]] = {}
    for _, request in rx.requests:
        for ts in request.timeseries:
            labels = tuple((label.name, label.value) for label in ts.labels)
            out.setdefault(labels, []).extend((s.timestamp, s.value) for s in ts.samples)
    return out


async def test_stored_readings_go_out_on_the_stores_stamps_and_a_failed_poll_sends_nothing(
    receiver: Receiver,
) -> None:
    w = writer(receiver.url)
    w.start()
    store = Sink()
    hello: dict[str, Any] | None = None
    sink = WrittenMeter(store, w, lambda: hello)
    script: list[Reading | Exception] = [
        Reading(61.0, 3600.0),
        MeterError("HTTP 500"),
        Reading(None, 3700.0),  # the meter gave its counter but no power
        Reading(88.0),
        Reading(89.0),
    ]
    # poll k starts at k s and takes 10 ms; the last one is stamped in the same ms as the one before
    stamps = [T0_NS, T0_NS + 10 * MS, T0_NS + 1000 * MS, T0_NS + 3000 * MS, T0_NS + 3010 * MS]
    stamps += [T0_NS + 4000 * MS, T0_NS + 4010 * MS, T0_NS + 4000 * MS, T0_NS + 4010 * MS]
    spec = MeterSpec("shelly", "http://127.0.0.1:9", domain="wall")
    poller = MeterPoller("coord-name", spec, Scripted(script), sink, now_ns=clock(stamps))
    async with aiohttp.ClientSession() as session:
        await poller.poll_once(session)  # before the node's link had a hello: the coordinator's name
        await poller.poll_once(session)
        hello = {"type": "hello", "node": "spark-a"}
        for _ in range(3):
            await poller.poll_once(session)
    await until(lambda: w.stats.sent == 4)
    await w.stop()

    assert [r.power_w for r in store.readings] == [61.0, None, 88.0, 89.0]  # stored as before
    assert [e[2] for e in store.errors] == ["HTTP 500"]
    labels = (("domain", "wall"), ("source", "meter:shelly"))
    power, energy = "sparkwatch_meter_power_watts", "sparkwatch_meter_energy_joules_total"
    t0_ms = T0_NS // MS
    assert series_of(receiver) == {
        (("__name__", power), labels[0], ("node", "coord-name"), labels[1]): [(t0_ms + 5, 61.0)],
        (("__name__", energy), labels[0], ("node", "coord-name"), labels[1]): [(t0_ms + 5, 3600.0)],
        (("__name__", energy), labels[0], ("node", "spark-a"), labels[1]): [(t0_ms + 3005, 3700.0)],
        # the last reading's stamp is its node's meter's last: sent 1 ms after it
        (("__name__", power), labels[0], ("node", "spark-a"), labels[1]): [
            (t0_ms + 4005, 88.0),
            (t0_ms + 4006, 89.0),
        ],
    }
    assert w.stats.dropped == {}


async def test_a_full_queue_drops_a_reading_and_counts_it(receiver: Receiver) -> None:
    receiver.after = 503
    w = writer(receiver.url, capacity=2)
    w.start()
    for k in range(5):
        w.offer_meter("n1", MeterReading("wall", "meter:redfish", 1.0, T0_NS + k * 10**9, 500.0, None, 0))
    assert w.stats.pending == 2 and w.stats.dropped == {"queue_full": 3}
    await w.stop(timeout_s=0.2)
    assert w.stats.dropped == {"queue_full": 3, "stopped": 2}
    w.offer_meter("n1", MeterReading("wall", "meter:redfish", 1.0, T0_NS, 500.0, None, 0))
    assert w.stats.dropped["stopped"] == 3
