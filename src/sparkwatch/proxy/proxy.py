"""`sparkwatch proxy`: a transparent reverse proxy in front of an OpenAI-compatible endpoint that turns
every generation request into a window — start, first byte, first token, last token, end, usage.

Bytes pass unchanged and unbuffered: each upstream chunk is written to the client as soon as it arrives
and only then shown to the watcher (decompression is off, so the watcher sees what the client sees). The
one header the proxy consumes is ``X-Sparkwatch-Phase``; everything else goes through both ways except
hop-by-hop headers, which belong to each connection.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import web
from yarl import URL

from sparkwatch.core.windows import Window
from sparkwatch.http_reasons import unreachable_reason
from sparkwatch.proxy import headers, paths
from sparkwatch.proxy.clock import WallClock
from sparkwatch.proxy.refusals import ABSOLUTE_FORM_REASON, openai_error
from sparkwatch.proxy.sse_watch import ResponseWatcher
from sparkwatch.proxy.window_notes import answer_notes, finished, within
from sparkwatch_agent.shared.log_limit import RateLimitedLog
from sparkwatch_agent.shared.parse_errors import parser_problem

log = logging.getLogger(__name__)

#: The request's place in the order generation requests arrived: its window's number (ids in arrival order).
ARRIVAL = web.RequestKey("sparkwatch_arrival", int)
#: How long requests in flight get to finish when the proxy closes (the runner's shutdown timeout).
SHUTDOWN_GRACE_S = 1.0
#: How long an idle upstream connection is kept for the next request: under uvicorn's default 5 s (vLLM and
#: SGLang serve through uvicorn), so the server is never the one to close it as a request is sent.
UPSTREAM_KEEPALIVE_S = 4.0


def upstream_shown(upstream: str) -> str:
    """The upstream URL as logs, warnings and error answers show it: no user:password@, no query (either
    can hold a key), no trailing slash."""
    return str(URL(upstream.rstrip("/")).with_user(None).with_query(None))


class ProxyConfigError(Exception):
    """A proxy set up in a way it cannot run (an upstream that is not an http(s) URL); one line."""


class WindowSink(Protocol):
    def submit(self, window: Window) -> None: ...


class WindowClock(Protocol):
    """What stamps the windows: ``label`` and ``uncertainty_ns`` go into each window's source."""

    label: str

    def now_ns(self) -> int: ...

    @property
    def uncertainty_ns(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    upstream: str
    warmup: int = 0
    upstream_timeout_s: float = 3600.0


class Proxy:
    """Forwards requests and stamps windows; one instance per listening proxy."""

    def __init__(self, config: ProxyConfig, sink: WindowSink, clock: WindowClock | None = None) -> None:
        self.config = config
        self.upstream = config.upstream.rstrip("/")
        # what logs and error answers show of it: no user:password@, no query (either can hold a key)
        self._upstream_shown = upstream_shown(self.upstream)
        self._sink = sink
        self._clock = clock or WallClock()
        self._now_ns = self._clock.now_ns
        self._instance = secrets.token_hex(3)  # window ids stay unique if the proxy restarts in a run
        self.via_name = headers.via_name(self._instance)
        self.saw_itself = False  # a request came back: the upstream leads to this proxy
        self.untimed = paths.UntimedPosts()  # said when it closes (serve.py)
        self._warmup_taken = 0  # warm-up slots given to requests without a phase header
        self._arrived = 0  # generation requests so far: a window's number is its request's arrival
        self._session: aiohttp.ClientSession | None = None
        self._in_flight = 0  # generation requests between arrival and their window
        self._closing = False  # set by closing(): a handler cancelled from now on was cut by the proxy
        self._garbled_log = RateLimitedLog(log)  # an upstream's header bytes the relay drops: a line a minute

    def closing(self) -> None:
        """Call before the runner's cleanup: requests still in flight after its grace are cut by the proxy,
        not by their clients, and their windows say so (``proxy_closed_unfinished``)."""
        self._closing = True
        if self._in_flight:
            log.warning(
                "%d generation request(s) in flight as the proxy closes: any not done within its %g s grace"
                " is cut, its window kept but not measured",
                self._in_flight,
                SHUTDOWN_GRACE_S,
            )

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=self.config.upstream_timeout_s, sock_connect=10),
            # idle upstream connections let go before the server's keep-alive ends: a POST sent on one the
            # server closed meanwhile is not retried (a 502 and a failed window)
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S),
            # no cookie jar: one shared by every client would keep a load balancer's sticky cookie and send
            # it (over the client's own) with every later request, pinning all clients to one replica
            cookie_jar=aiohttp.DummyCookieJar(),
            # nothing the client did not send: a body without a Content-Type gets none (aiohttp would add
            # application/octet-stream, which a FastAPI server may refuse where it took the client's as JSON)
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _arrival_phase(self, header: str | None) -> str:
        """A valid phase header decides; otherwise the first ``warmup`` requests to arrive are warm-up. The
        slot is taken on arrival (a long cold first request stays the warm-up, however late it ends)."""
        if header is not None:
            return header
        if self._warmup_taken < self.config.warmup:
            self._warmup_taken += 1
            return "warmup"
        return "timed"

    def _release_warmup(self) -> None:
        """A failed warm-up warmed nothing up: the next request to arrive gets its slot."""
        self._warmup_taken -= 1

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not request.raw_path.startswith("/"):  # before it is counted: no window, no warm-up slot taken
            return openai_error(400, "not_origin_form", ABSOLUTE_FORM_REASON)
        if headers.came_back(request, self.via_name):  # answered, not forwarded: no window, no warm-up slot
            self.saw_itself = True
            return openai_error(508, "loop_detected", headers.LOOP_REASON)
        if (garbled := headers.not_text(request.headers)) is not None:  # it would arrive changed: refused
            return openai_error(400, "header_not_utf8", garbled)
        if not paths.generation(request):
            self.untimed.seen(request.method, request.path)
            return await self._handle(request)
        self._arrived += 1
        request[ARRIVAL] = self._arrived
        self._in_flight += 1
        try:
            return await self._handle(request)
        finally:
            self._in_flight -= 1

    def _left(self) -> str:
        """The note for a cancelled handler: its client hung up, or the proxy is closing."""
        return "proxy_closed" if self._closing else "client_disconnected"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        t_start = self._now_ns()
        assert self._session is not None, "Proxy.start() was not awaited"
        generation = paths.generation(request)
        header = request.headers.get(headers.PHASE_HEADER)
        if generation and (refusal := headers.phase_refusal(request)) is not None:
            return openai_error(400, "invalid_phase", refusal)
        phase = self._arrival_phase(header) if generation else "timed"
        counted_warmup = generation and header is None and phase == "warmup"
        if isinstance(body := await self._body(request, counted_warmup), web.Response):
            return body
        # the path exactly as the client encoded it (%2F stays %2F)
        url = URL(self.upstream + request.raw_path, encoded=True)
        arrival = (phase, t_start, counted_warmup) if generation else None  # a window's, if it gets no answer
        try:
            upstream = await self._session.request(
                request.method,
                url,
                headers=headers.forwarded(request, self.via_name),
                data=body or None,
                allow_redirects=False,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            if isinstance(exc, aiohttp.ClientResponseError):  # an answer, in bytes aiohttp's parser refused
                why = f"answered what is not valid HTTP ({parser_problem(exc.message)})"
                return self._bad_gateway(request, arrival, why, "upstream_invalid_answer")
            why = unreachable_reason(exc) if isinstance(exc, aiohttp.ClientError) else "no answer in time"
            return self._bad_gateway(request, arrival, f"did not answer: {why}", "upstream_unreachable")
        except asyncio.CancelledError:  # the client hung up before the upstream answered
            if generation:
                self._unanswered(
                    request, phase, t_start, counted_warmup, status=None, notes={self._left(): True}
                )
            raise
        if not 200 <= upstream.status <= 599:  # a 1xx as the final answer (a 101 switch), or no status code
            upstream.close()
            why = f"answered HTTP {upstream.status}, which is no final answer a proxy can relay"
            return self._bad_gateway(request, arrival, why, "upstream_invalid_answer")
        encoded = upstream.headers.get("Content-Encoding", "identity") != "identity"
        # a media type is case-insensitive (RFC 9110 §8.3.1): aiohttp's content_type is it, lower-cased
        watcher = ResponseWatcher(streaming=upstream.content_type == "text/event-stream")
        notes = {"compressed": encoded}
        try:
            return await self._relay(request, upstream, watcher, notes, parse=generation and not encoded)
        except Exception:  # the proxy's own fault (aiohttp logs it): no window may read as a whole answer
            notes["proxy_failed"] = True
            raise
        finally:
            upstream.release()
            if generation:
                span = (t_start, self._now_ns())
                window = self._submit(request, phase, span, upstream.status, watcher, notes=notes)
                if counted_warmup and window.failed:  # a failed warm-up warmed nothing up
                    self._release_warmup()

    async def _body(self, request: web.Request, counted_warmup: bool) -> bytes | web.Response:
        """The request's body, or the 413 of one too large (then, or if the client left, nothing went up)."""
        try:
            return await request.read()
        except (web.HTTPRequestEntityTooLarge, asyncio.CancelledError) as exc:
            if counted_warmup:  # nothing went upstream: nothing warmed up
                self._release_warmup()
            if isinstance(exc, asyncio.CancelledError):  # the client left while sending its body
                raise
            return openai_error(413, "body_too_large", exc.text or "request body too large")

    def _bad_gateway(
        self, request: web.Request, arrival: tuple[str, int, bool] | None, why: str, note: str
    ) -> web.Response:
        """The 502 for an upstream that did not answer, or not in HTTP a proxy can relay: said in the log,
        and in a window (``note``: which) when ``arrival`` (phase, start, counted warm-up) is a
        generation's."""
        log.warning("upstream %s%s %s", self._upstream_shown, request.path, why)
        if arrival is not None:
            phase, t_start, counted_warmup = arrival
            self._unanswered(request, phase, t_start, counted_warmup, status=502, notes={note: True})
        return openai_error(502, "bad_gateway", f"upstream {self._upstream_shown} {why}")

    def _unanswered(
        self,
        request: web.Request,
        phase: str,
        t_start: int,
        counted_warmup: bool,
        *,
        status: int | None,
        notes: Mapping[str, bool],
    ) -> None:
        """The window of a generation request the upstream never answered (unreachable, or the client left
        first); a warm-up that got no answer warmed nothing up."""
        if counted_warmup:
            self._release_warmup()
        watcher = ResponseWatcher(streaming=False)
        self._submit(request, phase, (t_start, self._now_ns()), status, watcher, notes=notes)

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        watcher: ResponseWatcher,
        notes: dict[str, bool],
        *,
        parse: bool,
    ) -> web.StreamResponse:
        """Write the upstream's answer to the client chunk by chunk as it arrives, showing each chunk to
        ``watcher`` after it was written (with ``parse`` off, only its first byte is stamped); ``notes``
        learns whether the client hung up (the handler is cancelled then: make_proxy_runner) or the upstream
        broke off or timed out, which the client then sees too: its connection is cut, never ended cleanly."""
        response = headers.relay_response(upstream)
        if (garbled := headers.not_text(upstream.headers)) is not None:  # relayed without those bytes
            said = f"upstream {self._upstream_shown}: {garbled}; relayed without those bytes"
            self._garbled_log.log(logging.WARNING, said)
        for k, v in headers.relayed(upstream, self.via_name):
            response.headers.add(k, v)
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        try:
            await response.prepare(request)
            chunks = upstream.content.iter_any()
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self._cut(request, response, notes, exc)
                    return response
                t_chunk = self._now_ns()
                await response.write(chunk)
                if parse:
                    watcher.feed(chunk, t_chunk)
                elif watcher.stamps.t_first_byte_ns is None:
                    watcher.stamps.t_first_byte_ns = t_chunk
            await response.write_eof()
        except ConnectionResetError:
            notes["client_disconnected"] = True  # nothing to answer, but the window is still kept
            log.info("client hung up during %s", request.path)
        except asyncio.CancelledError:
            notes[self._left()] = True
            raise
        return response

    def _cut(
        self, request: web.Request, response: web.StreamResponse, notes: dict[str, bool], exc: Exception
    ) -> None:
        """The upstream's answer ended mid-body: the client's connection is cut too (aborted, so a chunked
        answer gets no last chunk: aiohttp would otherwise end it cleanly once the handler returns)."""
        timed_out = isinstance(exc, TimeoutError)
        notes["upstream_timed_out" if timed_out else "upstream_broke_off"] = True
        what = "timed out" if timed_out else f"broke off the response ({type(exc).__name__}: {exc})"
        log.warning("upstream %s%s %s", self._upstream_shown, request.path, what)
        response.force_close()
        if request.transport is not None:
            request.transport.abort()

    def _submit(
        self,
        request: web.Request,
        phase: str,
        span: tuple[int, int],
        status: int | None,
        watcher: ResponseWatcher,
        *,
        notes: Mapping[str, bool],
    ) -> Window:
        """Make the request's window, hand it to the sink and return it."""
        t_start = span[0]
        t_end = max(span)  # a wall clock stepped back mid-request must not make an invalid window
        stamps, notes = finished(watcher, t_end, notes)
        source: dict[str, object] = {
            "kind": "proxy",
            "clock": self._clock.label,
            "path": request.path,
            "stream": watcher.streaming,
            "events": stamps.events,
        }
        if self._clock.uncertainty_ns is not None:
            source["clock_uncertainty_ns"] = self._clock.uncertainty_ns
        source.update(answer_notes(watcher, status, notes))
        window = Window(
            id=f"proxy-{self._instance}-{request[ARRIVAL]:06d}",
            phase=phase,
            t_start_ns=t_start,
            t_end_ns=t_end,
            t_first_byte_ns=within(stamps.t_first_byte_ns, t_start, t_end),
            t_first_token_ns=within(stamps.t_first_token_ns, t_start, t_end),
            t_last_token_ns=within(stamps.t_last_token_ns, t_start, t_end),
            prompt_tokens=stamps.prompt_tokens,
            completion_tokens=stamps.completion_tokens,
            cached_tokens=stamps.cached_tokens,
            reasoning_tokens=stamps.reasoning_tokens,
            http_status=status,
            finish_reason=stamps.finish_reason,
            source=source,
        )
        self._sink.submit(window)
        return window


def make_proxy_app(proxy: Proxy) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", r"/{tail:[\s\S]*}", proxy.handle)  # any path, a %0A in it too (not "." )
    headers.name_own_answers(app)

    async def lifecycle(_app: web.Application) -> AsyncIterator[None]:
        await proxy.start()
        yield
        await proxy.close()

    app.cleanup_ctx.append(lifecycle)
    return app


def make_proxy_runner(proxy: Proxy) -> web.AppRunner:
    """Request bodies are not decompressed either: a gzip body goes upstream as gzip, labelled so. A client
    that hangs up cancels its request's handler, so its window ends then, not when the upstream next
    writes (a stalled upstream could hold it open for the whole upstream timeout)."""
    return web.AppRunner(
        make_proxy_app(proxy),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=SHUTDOWN_GRACE_S,
        auto_decompress=False,
        handler_cancellation=True,
    )
