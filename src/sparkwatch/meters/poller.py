"""Poll one node's meter on the coordinator's clock and store what it says, or why it said nothing.

A reading is stamped at the middle of its request; its uncertainty is half the round trip plus the meter's
own refresh period when known (a BMC that refreshes every 5 s may answer with a value 5 s old). A meter that
fails or does not answer within its timeout gives no reading, so the export sees a gap there and the stored
error says why; nothing is carried over from the last good reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from sparkwatch.http_reasons import failure_line, unreachable_reason
from sparkwatch.meters.readings import MeterError, Reading, refused
from sparkwatch.meters.spec import MeterSpec
from sparkwatch.store.meters import MeterReading
from sparkwatch.store.tx import stored_or_why
from sparkwatch_agent.shared.backoff import every
from sparkwatch_agent.shared.http import host_port

log = logging.getLogger(__name__)

#: A request slower than this many intervals (at least this many seconds) is a failed poll.
TIMEOUT_INTERVALS, MIN_TIMEOUT_S = 2.0, 2.0
#: How long the stop waits for a reader to let go of the meter (a Redfish logout).
CLOSE_TIMEOUT_S = 2.0


async def json_answer(response: aiohttp.ClientResponse, kind: str) -> Any:
    """The answer's JSON. A body that is not JSON (a web server's HTML error page, a login portal) names
    the HTTP status, not a decoder's position in it."""
    try:
        return await response.json(content_type=None)
    except ValueError:  # JSONDecodeError, or bytes that are not text
        raise MeterError(f"{kind} answered HTTP {response.status} with a body that is not JSON") from None
    except RecursionError:  # a RecursionError ended the poller's task for good, in silence
        raise MeterError(
            f"{kind} answered HTTP {response.status} with JSON nested too deep to read"
        ) from None


class MeterReader(Protocol):
    async def read(self, session: aiohttp.ClientSession) -> Reading: ...

    def waiting_for(self) -> str | None:
        """What a read cut short by the poll's timeout left going on (a Redfish login or search), if any."""
        ...

    async def close(self, session: aiohttp.ClientSession) -> None:
        """Let go of what the reader holds on the meter (a Redfish session) at the stop."""
        ...


class MeterSink(Protocol):
    def add_meter_reading(self, node: str, reading: MeterReading) -> bool:
        """Whether it was stored (a reading at a time already stored is not)."""
        ...

    def add_meter_error(self, node: str, domain: str, t_ns: int, error: str, source: str) -> None: ...


@dataclass(slots=True)
class MeterState:
    """What ``GET /v1/nodes`` and ``nodes check`` show of a node's meter."""

    kind: str
    domain: str
    url: str
    interval_s: float
    polls: int = 0
    failures: int = 0
    last_t_ns: int | None = None
    last_power_w: float | None = None
    last_energy_j: float | None = None  # the meter's own counter, when it has one
    error: str | None = None  # the latest failure, until a poll succeeds

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "domain": self.domain,
            "url": self.url,
            "interval_s": self.interval_s,
            "polls": self.polls,
            "failures": self.failures,
            "last_t_ns": self.last_t_ns,
            "last_power_w": self.last_power_w,
            "last_energy_j": self.last_energy_j,
            "error": self.error,
        }


class MeterPoller:
    def __init__(
        self,
        node: str,
        spec: MeterSpec,
        reader: MeterReader,
        sink: MeterSink,
        *,
        now_ns: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.spec = spec
        self._reader = reader
        self._sink = sink
        self._now_ns = now_ns
        self._monotonic = monotonic
        self.state = MeterState(spec.kind, spec.domain, spec.url, spec.interval_s)
        self._counter_said: str | None = None  # why the counter was last left out, warned of once

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Poll every ``interval_s`` on an absolute schedule (a slow poll skips, never bunches) until
        cancelled."""
        try:
            await every(self.spec.interval_s, self._monotonic, lambda: self.poll_once(session))
        finally:  # cancelled at the coordinator's stop, which waits a few seconds for its tasks
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self._reader.close(session)

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        spec = self.spec
        t0 = self._now_ns()
        try:
            async with asyncio.timeout(max(MIN_TIMEOUT_S, TIMEOUT_INTERVALS * spec.interval_s)):
                reading = await self._reader.read(session)
        except TimeoutError:
            going_on = self._reader.waiting_for()
            self._failed(t0, "no answer within the timeout" + (f": {going_on}" if going_on else ""))
            return
        except aiohttp.ClientConnectorError as exc:  # aiohttp's words say "ssl:default" of plain http too
            self._failed(t0, f"cannot connect to {host_port(exc.host, exc.port)}: {unreachable_reason(exc)}")
            return
        except (MeterError, aiohttp.ClientError, OSError, ValueError) as exc:
            self._failed(t0, f"{type(exc).__name__}: {exc}" if not isinstance(exc, MeterError) else str(exc))
            return
        # a reader's bug on an answer it did not expect: a failed poll, its trace logged once (while the
        # error stays the same), never the end of polling: nothing watches the task
        except Exception as exc:
            error = failure_line(f"{type(exc).__name__}: {exc}")
            if error != self.state.error:
                log.exception("node %s: %s meter at %s: reading failed", self.node, spec.kind, spec.url)
            self._failed(t0, error, logged=True)
            return
        if (why := refused(reading)) is not None:  # the readers' rule (readings.py), whoever read it
            self._failed(t0, f"{spec.kind} read {why}: not stored")
            return
        t1 = self._now_ns()
        refresh_ns = int((spec.refresh_s or 0.0) * 1e9)
        stamp = MeterReading(
            spec.domain,
            spec.source,
            spec.interval_s,
            (t0 + t1) // 2,
            reading.power_w,
            reading.energy_j,
            (t1 - t0) // 2 + refresh_ns,
        )
        if (why := stored_or_why(lambda: self._sink.add_meter_reading(self.node, stamp))) is not None:
            self._failed(t0, f"read, not stored: {why}")
            return
        if reading.counter_left_out not in (None, self._counter_said):
            log.warning(
                "node %s: %s meter at %s: energy counter left out, power stored: %s",
                *(self.node, spec.kind, spec.url, reading.counter_left_out),
            )
        self._counter_said = reading.counter_left_out
        if self.state.error is not None:
            log.info("node %s: %s meter answers again", self.node, spec.kind)
        self.state.polls += 1
        self.state.last_t_ns, self.state.last_power_w, self.state.error = stamp.t_ns, reading.power_w, None
        self.state.last_energy_j = reading.energy_j

    def _failed(self, t_ns: int, error: str, *, logged: bool = False) -> None:
        """A poll without a reading: counted, stored as the gap's reason, logged when it is new (unless
        ``logged`` already, with its trace)."""
        error = failure_line(error)
        if error != self.state.error and not logged:
            log.warning("node %s: %s meter at %s: %s", self.node, self.spec.kind, self.spec.url, error)
        self.state.polls += 1
        self.state.failures += 1
        self.state.error = error
        # a store that cannot take the failure either: the gap is there without its reason, and said above
        stored_or_why(
            lambda: self._sink.add_meter_error(self.node, self.spec.domain, t_ns, error, self.spec.source)
        )
