"""The WebSocket link: dial an agent, resume its stream after the last stored seq, probe its clock, hold
the run's interval lease — and keep dialling with backoff when anything breaks.

This is a thin shell: it moves frames into the store and probe results into ``core.clock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import aiohttp
from yarl import URL

from sparkwatch.core.clock import ClockOffset, TimeProbe, estimate_offset
from sparkwatch.http_reasons import unreachable_reason
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.reasons import no_agent, not_an_agent, session_failure, unauthorized_reason
from sparkwatch.links.state import LinkError, LinkState, LinkStatus, Misaddressed, Misconfigured, Unauthorized
from sparkwatch.links.stream import SampleSink, StreamIngest
from sparkwatch.store import Damaged, Store, Unavailable, corrupt_or_none
from sparkwatch.wire import MAX_MESSAGE_BYTES, HelloFrame, TimeFrame, time_reply
from sparkwatch_agent.shared.auth import TokenFileError, load_token
from sparkwatch_agent.shared.backoff import ExponentialBackoff
from sparkwatch_agent.shared.http import AGENT_SERVER, host_port, other_service
from sparkwatch_agent.shared.parse_errors import parser_problem
from sparkwatch_agent.shared.protocol import LEASE_TTL_S

log = logging.getLogger(__name__)

LEASE_RENEW_S = 120.0
#: Clock-probe rounds failing in a row that end a session as stalled (30 s at the 10 s default).
STALLED_PROBES = 3
#: How long one clock probe (a GET of /v1/time) may take.
PROBE_TIMEOUT_S = 5.0
#: Of it, what making the connection may take (a node switched off, a firewall that drops).
CONNECT_SHARE = 0.8
#: A refused token or another service at the address is a configuration error: ask again this seldom,
#: not on the backoff schedule.
MISCONFIGURED_RETRY_S = 60.0
#: While no run wants samples at once, a boot's clock estimate is stored at most this often (every round
#: still stamps remote write); an export reads the rounds within 11 minutes of its run, stored every round
#: while the run is open.
IDLE_OFFSET_EVERY_S = 60.0
#: The shortest wait for the next message while samples are held.
MIN_WAIT_S = 0.05


_STREAM_ENDS = frozenset(
    {aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR}
)


class WsLink:
    def __init__(
        self,
        spec: NodeSpec,
        store: Store,
        session: aiohttp.ClientSession,
        *,
        holder: str,
        desired_interval: Callable[[], float | None],
        now_ns: Callable[[], int] = time.time_ns,
        backoff: ExponentialBackoff | None = None,
        probe_every_s: float = 10.0,
        probes: int = 8,
        base_url: str | None = None,
        misconfigured_retry_s: float = MISCONFIGURED_RETRY_S,
        sample_sink: SampleSink | None = None,
        stream_end_sink: Callable[[str], None] | None = None,
        store_promptly: Callable[[], bool] | None = None,
        mono_s: Callable[[], float] = time.monotonic,
    ) -> None:
        """``sample_sink``: where the samples the store took go next (remote write), if anywhere;
        ``stream_end_sink``: told the node's name each time a session ends (its series go stale there);
        ``store_promptly``: whether a run wants samples stored as they come (else they are held a few
        seconds: stream.IDLE_HOLD_S); always, when not given."""
        self.spec = spec
        self.state = LinkState(node=spec.name, transport="ws")
        self._store = store
        self._session = session
        self._holder = holder
        self._desired = desired_interval
        self._now = now_ns
        self._backoff = backoff or ExponentialBackoff(initial_s=0.5, maximum_s=30.0, jitter=0.5)
        self._boot_damage = ""  # the damage of the boots' rows last warned of (once, not per session)
        self._probe_every_s = probe_every_s
        self._probes = probes
        self._base = (base_url or spec.http_base).rstrip("/")
        self._token = load_token(spec.token_file) if spec.token_file else None
        self._misconfigured_retry_s = misconfigured_retry_s
        self._sample_sink = sample_sink
        self._stream_end_sink = stream_end_sink
        self._promptly = store_promptly or (lambda: True)
        self._mono = mono_s
        self._offset_stored: dict[str, float] = {}  # boot → when its estimate was last stored (monotonic)
        self._lease_changed = asyncio.Event()

    @property
    def _headers(self) -> dict[str, str]:
        """The token file read again at every use, so a rotated token is picked up (a file that cannot be
        read now keeps the last token read: the agent's 401 then says which file to fix)."""
        if self.spec.token_file is not None:
            with contextlib.suppress(TokenFileError):
                self._token = load_token(self.spec.token_file)
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def interval_changed(self) -> None:
        """The desired run interval changed (a run opened or ended): update the lease now."""
        self._lease_changed.set()

    # ---- the loop --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Until cancelled: connect, stream, and on any failure wait and try again."""
        try:
            while True:
                status, error, delay = await self._one_session()
                if self._stream_end_sink is not None:
                    self._stream_end_sink(self.spec.name)
                self.state.reconnects += 1
                self.state.enter(status, error, retry_s=delay)
                await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.state.enter(LinkStatus.STOPPED)
            raise

    async def _one_session(self) -> tuple[LinkStatus, str, float]:
        """Stream until the session fails; returns what the link is now, why, and when to dial again."""
        corrupt = None
        try:
            await self._connected_session()
            raise LinkError("session ended")  # sessions end by raising; this keeps the loop honest
        except Misconfigured as exc:
            return exc.status, str(exc), self._misconfigured_retry_s
        except aiohttp.ClientConnectorError as exc:  # aiohttp's words say "ssl:default" of plain http too
            error = f"cannot connect to {host_port(exc.host, exc.port)}: {unreachable_reason(exc)}"
        except (
            aiohttp.ClientError,
            OSError,
            TimeoutError,
            LinkError,
            ValueError,
            Unavailable,
            Damaged,
        ) as exc:
            corrupt = corrupt_or_none(exc, self._store.path)
            error = str(corrupt or session_failure(exc))
        except Exception as exc:  # a bug or a store failure must not end collection for good
            if (corrupt := corrupt_or_none(exc, self._store.path)) is None:  # damage: one line
                log.exception("node %s: link failed", self.spec.name)
            error = f"{type(exc).__name__}: {exc}" if corrupt is None else str(corrupt)
        if corrupt is not None:
            self._store.saw_damage(str(corrupt))  # the coordinator's /healthz says so
        return LinkStatus.DOWN, error, self._backoff.next_delay_s()

    def _streaming(self) -> None:
        self.state.enter(LinkStatus.STREAMING)

    def _ingest(
        self, on_hello: Callable[[HelloFrame], None] | None = None, *, hold_s: float = 0.0, batch: int = 1
    ) -> StreamIngest:
        """The frame core for one session; the backoff restarts only once the store took something.
        ``hold_s``, ``batch``: the session's own pace of storing while a run wants samples (each message,
        by default)."""
        return StreamIngest(
            self._store,
            self.state,
            on_hello,
            on_stored=self._backoff.reset,
            sink=self._sample_sink,
            hold_s=hold_s,
            batch=batch,
            mono_s=self._mono,
        )

    async def _connected_session(self) -> None:
        _, agent_boot = await self.probe_clock()
        after = self._store.last_seq(self.spec.name, agent_boot) if self._resumes(agent_boot) else 0
        url = f"{self._base}/v1/stream?after={after}"
        try:
            ws = await self._session.ws_connect(
                url, headers=self._headers, heartbeat=30.0, max_msg_size=MAX_MESSAGE_BYTES
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:
                raise Unauthorized(unauthorized_reason(self.spec)) from None
            raise
        async with ws:
            self._streaming()
            await self._run_helpers(asyncio.ensure_future(self._consume(ws, agent_boot)))

    def _resumes(self, agent_boot: str) -> bool:
        """Whether the agent's boot is the node's latest stored one, streamed on after its last stored seq
        (else a new boot: from its start). Where the boots' rows are damaged outside sparkwatch (which is
        latest is unknown) it is resumed too, with one warning: its own stored seqs say where it stopped, and
        collection goes on (a boot asked from its start again would only be sent twice and stored once)."""
        try:
            return self._store.latest_boot_id(self.spec.name) == agent_boot
        except Damaged as exc:
            if str(exc) != self._boot_damage:
                log.warning(
                    "node %s: %s; boot %s resumes after its last stored seq", self.spec.name, exc, agent_boot
                )
            self._boot_damage = str(exc)
            return True

    async def _run_helpers(self, consumer: asyncio.Future[None]) -> None:
        """Run the clock-probe and lease loops for as long as ``consumer`` (the frame reader) runs."""
        prober = asyncio.create_task(self._probe_loop(), name=f"probe-{self.spec.name}")
        leaser = asyncio.create_task(self._lease_loop(), name=f"lease-{self.spec.name}")
        helpers = [prober, leaser]
        # until the reader ends, the probes say the link is stalled, or a probe or lease is refused our
        # token (rotated on the agent only): any one's error ends the session, and the link says why
        try:
            await asyncio.wait({consumer, *helpers}, return_when=asyncio.FIRST_COMPLETED)
            for task in (consumer, *helpers):
                if task.done():
                    task.result()
        finally:
            for task in (*helpers, consumer):
                task.cancel()
            await asyncio.gather(*helpers, consumer, return_exceptions=True)

    async def _consume(self, ws: aiohttp.ClientWebSocketResponse, expected_boot: str) -> None:
        """Store every frame of the stream. ``expected_boot`` is the boot our ``after`` was chosen for: if
        the agent restarted in between, that seq means nothing to the new boot, so we redial from 0."""

        def on_hello(hello: HelloFrame) -> None:
            if hello.boot_id != expected_boot:
                raise LinkError("agent restarted between clock probe and stream; resuming from seq 0")

        ingest = self._ingest(on_hello)
        try:
            while True:  # receive(), not `async for`, which hides the close message and the agent's reason
                due_s = ingest.due_in_s(self._promptly())
                try:  # no longer than until what is held is due (a 0 timeout would be none at all)
                    msg = await ws.receive(timeout=None if due_s is None else max(due_s, MIN_WAIT_S))
                except TimeoutError:
                    ingest.settle(self._promptly())
                    continue
                if msg.type == aiohttp.WSMsgType.TEXT:
                    ingest.feed(msg.data)
                    ingest.settle(self._promptly())
                elif msg.type in _STREAM_ENDS:
                    break
        finally:
            ingest.flush_held()
        reason = f": {msg.extra}" if msg.type == aiohttp.WSMsgType.CLOSE and msg.extra else ""
        raise LinkError(f"stream closed ({ws.close_code}){reason}")

    # ---- clock -----------------------------------------------------------------------------------
    async def probe_clock(self) -> tuple[ClockOffset, str]:
        """Round trips to /v1/time; stores the estimate for the agent's current boot."""
        probes: list[TimeProbe] = []
        boot = ""
        for _ in range(self._probes):
            t_send = self._now()
            reply = await self._ask_time()
            probes.append(TimeProbe(t_send, reply.t_wall_ns, self._now(), reply.t_mono_ns))
            boot = reply.boot_id
        offset = estimate_offset(probes)
        self._record_offset(boot, offset)
        return offset, boot

    async def _ask_time(self) -> TimeFrame:
        """One /v1/time answer; what is not an agent's answer, in words (a hang, a 404, a web page, bytes
        that are not HTTP), each once read as "TimeoutError:" or aiohttp's multi-line parser message."""
        url = f"{self._base}/v1/time"
        connect_s = CONNECT_SHARE * PROBE_TIMEOUT_S  # its own timer: the total's reads as no answer
        try:
            timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S, sock_connect=connect_s)
            async with self._session.get(
                url, headers=self._headers, timeout=timeout, allow_redirects=False
            ) as r:
                service = other_service(r.headers, AGENT_SERVER)
                if service is not None:  # a coordinator has /v1/time too: its answer would be read as one
                    raise Misaddressed(not_an_agent(self.spec, service))
                if r.status == 401:
                    raise Unauthorized(unauthorized_reason(self.spec))
                if r.status == 404:
                    raise no_agent(self.spec, "/v1/time answered 404")
                if r.status != 200:
                    raise LinkError(f"/v1/time answered {r.status}")
                if r.content_type != "application/json":  # aiohttp says application/octet-stream of none
                    raise no_agent(self.spec, f"/v1/time answered {r.content_type}")
                return time_reply(await r.json())
        except aiohttp.ConnectionTimeoutError:  # a TimeoutError too: nothing took the connection
            where = host_port(URL(url).host or "", URL(url).port)
            raise LinkError(f"cannot connect to {where}: no answer within {connect_s:g} s") from None
        except TimeoutError:  # the connection taken, no answer
            raise LinkError(f"/v1/time gave no answer within {PROBE_TIMEOUT_S:g} s") from None
        except aiohttp.ClientResponseError as exc:  # bytes aiohttp's parser refused: not an HTTP server
            raise no_agent(self.spec, f"answered what is not HTTP ({parser_problem(exc.message)})") from None

    def _record_offset(self, boot: str, offset: ClockOffset) -> None:
        """The round's estimate stamps what comes next (remote write) and is stored; while no run wants
        samples at once, stored at most every IDLE_OFFSET_EVERY_S (a commit writes ~49 KiB of pages: every
        10 s it was half of an idle link's writes), a boot's first always."""
        now_s = self._mono()
        last = self._offset_stored.get(boot)
        if self._promptly() or last is None or now_s - last >= IDLE_OFFSET_EVERY_S:
            self._store.add_offset(self.spec.name, boot, offset)
            self._offset_stored[boot] = now_s
        self.state.clocked(boot, offset)

    async def _probe_loop(self) -> None:
        """A probe round every ``probe_every_s``. A failed one only means no new estimate this time, but
        STALLED_PROBES in a row mean the link is stalled (an SSH session stopped, a host that froze): the
        session ends, so the link is down, says so and redials, instead of "streaming" with nothing."""
        failures = 0
        while True:
            await asyncio.sleep(self._probe_every_s)
            try:
                await self.probe_clock()
                failures = 0
            except Misconfigured:
                raise  # a refused token, another service: no retry fixes it
            except Exception as exc:
                failures += 1
                why = str(exc) or type(exc).__name__
                if failures >= STALLED_PROBES:
                    raise LinkError(
                        f"stalled: {failures} clock probes in a row failed, the last: {why}"
                    ) from None
                log.info("node %s: clock probe failed: %s", self.spec.name, why)

    # ---- interval lease --------------------------------------------------------------------------
    async def _lease_loop(self) -> None:
        held: float | None = None
        while True:
            self._lease_changed.clear()  # before reading the wish: a change during the update is not lost
            want = self._desired()
            try:
                if want is not None:
                    await self._put_lease(want)
                    held = want
                elif held is not None:
                    await self._release_lease()
                    held = None
            except Misconfigured:
                raise  # its run would be sampled at the idle interval while the link looked well
            except (aiohttp.ClientError, OSError, TimeoutError, LinkError) as exc:
                log.info("node %s: interval lease update failed: %s", self.spec.name, exc)
            self.state.lease_interval_s = held
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LEASE_RENEW_S):
                    await self._lease_changed.wait()

    async def _put_lease(self, interval_s: float) -> None:
        body = {"holder": self._holder, "interval_s": interval_s, "ttl_s": LEASE_TTL_S}
        async with self._session.put(f"{self._base}/v1/interval", json=body, headers=self._headers) as r:
            if r.status == 401:
                raise Unauthorized(unauthorized_reason(self.spec))
            if r.status != 200:
                raise LinkError(f"/v1/interval answered {r.status}: {await r.text()}")

    async def _release_lease(self) -> None:
        async with self._session.delete(
            f"{self._base}/v1/interval", params={"holder": self._holder}, headers=self._headers
        ) as r:
            if r.status == 401:
                raise Unauthorized(unauthorized_reason(self.spec))
            if r.status != 200:
                raise LinkError(f"/v1/interval DELETE answered {r.status}")
