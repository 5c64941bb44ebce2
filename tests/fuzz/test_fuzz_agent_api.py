"""Hostile requests to every route of the agent's HTTP API: lease and sim-load bodies and mutations of them,
garbage bytes, odd methods, paths, query strings and headers; hostile ``?after=`` on the stream; wrong and
missing tokens.

Every answer: no 5xx; a 4xx is JSON with ``error`` and ``reason``; a refused request changes nothing (the
lease table, the interval in effect, the simulated load); the interval in effect is never slower than the
configured one, whatever leases were granted, and the agent keeps sampling. A stream is refused before the
upgrade (JSON) or starts with a hello; ``after`` beyond the newest seq gets an error frame and close code
``CLOSE_AFTER_BEYOND_NEWEST``; every WebSocket is closed within ``CASE_TIMEOUT_S`` on both ends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import WSMsgType, WSServerHandshakeError
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import assume, event, given
from hypothesis import strategies as st

from fuzz.coord_harness import Answer, check_answer, check_refusal
from fuzz.hostile import JSON, floats, hostile_body, ints, texts
from fuzz.profiles import CASE_TIMEOUT_S, fuzz_settings
from sparkwatch_agent.assemble import assemble
from sparkwatch_agent.config import build_config
from sparkwatch_agent.hardware.sim import SimSpec
from sparkwatch_agent.sampling.leases import MAX_LEASES
from sparkwatch_agent.serving.http_app import WEBSOCKETS, AgentContext, make_app
from sparkwatch_agent.serving.serve import agent_context
from sparkwatch_agent.shared.protocol import (
    CLOSE_AFTER_BEYOND_NEWEST,
    FRAME_ERROR,
    FRAME_GAP,
    FRAME_HELLO,
    FRAME_SAMPLE,
    MIN_INTERVAL_S,
)

TOKEN = "fuzz-agent-token-0123456789abcdef"
CONFIGURED_S = 0.02
#: Sampling must go on: after every case the newest sample is younger than ``STALE_S`` (free to check);
#: every ``ALIVE_EVERY`` cases and at the end of a test, ``ALIVE_SAMPLES`` new samples come within
#: ``ALIVE_WITHIN_S`` (at 0.02 s they take 0.1 s; an agent stuck at a 1 s interval or more fails).
STALE_S = 2.0
ALIVE_SAMPLES = 5
ALIVE_WITHIN_S = 2.0
ALIVE_EVERY = 50
MAX_SEQ = 2**63 - 1
#: Holders of the leases a case fills the table with (and releases after it); no fuzzed holder has it.
FILL = "\x01fill-"


@dataclass(frozen=True, slots=True)
class AgentState:
    """What a request may change: the lease table (holder, interval, expiry), the interval in effect and
    the simulated load (utilisation, resident bytes, power; not the energy, which grows by itself)."""

    leases: frozenset[tuple[str, float, int]]
    effective_s: float
    sim: tuple[float, int, float]

    def at(self, now_ns: int) -> AgentState:
        """The same state with the leases that lapse by ``now_ns`` gone (what time alone changes)."""
        kept = frozenset(lease for lease in self.leases if lease[2] > now_ns)
        if kept == self.leases:
            return self
        return AgentState(kept, effective_interval(kept), self.sim)


def effective_interval(leases: frozenset[tuple[str, float, int]]) -> float:
    """The documented rule: the fastest lease's interval, never slower than the configured one."""
    return min([CONFIGURED_S, *(interval for _, interval, _ in leases)])


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    """What a stream request got: a refusal before the upgrade (the handshake's status and the same
    request replayed as a plain GET, whose body the handshake error does not keep), or the messages read
    (each a (type, data, extra) triple; TEXT data split into JSON lines)."""

    target: str
    refused: Answer | None
    handshake_status: int | None
    messages: tuple[tuple[WSMsgType, Any, Any], ...]

    def frames(self, index: int) -> list[dict[str, Any]]:
        kind, data, _ = self.messages[index]
        assert kind == WSMsgType.TEXT, f"{self.target}: message {index} is {kind.name}, not text: {data!r}"
        return [json.loads(line) for line in data.split("\n")]

    def __str__(self) -> str:
        shown = [(kind.name, str(data)[:200], extra) for kind, data, extra in self.messages]
        return f"GET {self.target} -> {self.refused or self.handshake_status or shown}"


class AgentApi:
    """One simulated agent (sampling every 0.02 s in its thread) behind a real in-process HTTP server;
    ``call`` sends one request, ``stream`` opens one WebSocket; every step under ``CASE_TIMEOUT_S``."""

    def __init__(self, token: str | None = None) -> None:
        config = build_config(
            {"node": "spark-fuzz", "backend": "sim", "interval": CONFIGURED_S, "ring_size": 1000}, {}
        )
        node = assemble(config)
        assert node.sim is not None
        self.sampler = node.sampler
        self.leases = node.sampler.leases
        self.sim = node.sim
        self.token = token
        self.cases = 0
        self.loop = asyncio.Runner()
        self.client = self.loop.run(self._start(agent_context(node.sampler, node.sim, token)))
        self.sampler.start()
        self.loop.run(self._until(lambda: self.sampler.last_seq > 0, "the first sample"))

    async def _start(self, ctx: AgentContext) -> TestClient[Any, Any]:
        client = TestClient(TestServer(make_app(ctx)))
        await client.start_server()
        return client

    def close(self) -> None:
        self.sampler.stop()
        self.loop.run(self.client.close())
        self.loop.close()

    async def _until(self, done: Callable[[], bool], what: str, within: float = CASE_TIMEOUT_S) -> None:
        try:
            async with asyncio.timeout(within):
                while not done():
                    await asyncio.sleep(0.005)
        except TimeoutError:
            raise AssertionError(f"hang: waited over {within} s for {what}") from None

    def _auth(self, auth: bool) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token and auth else {}

    def call(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> Answer:
        """One request (``target``: path and query, already encoded), with the bearer token if ``auth``
        (``headers`` may replace it); a hang fails the case."""
        sent = self._auth(auth)
        sent.update(headers or {})
        return self.loop.run(self._call(method, target, body, sent))

    async def _call(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        try:
            async with asyncio.timeout(CASE_TIMEOUT_S):
                response = await self.client.request(method, target, data=body, headers=headers)
                data = await response.read()
        except TimeoutError:
            raise AssertionError(f"hang: {method} {target} took over {CASE_TIMEOUT_S} s") from None
        return Answer(method, target, response.status, response.content_type, data)

    def stream(self, target: str, reads: int) -> StreamAnswer:
        """Open ``target`` as a WebSocket and read up to ``reads`` messages (after an error frame, one
        more: the close); then close it and wait until the server's end is closed too."""
        return self.loop.run(self._stream(target, reads))

    async def _stream(self, target: str, reads: int) -> StreamAnswer:
        messages: list[tuple[WSMsgType, Any, Any]] = []
        try:
            async with asyncio.timeout(CASE_TIMEOUT_S):
                try:
                    ws = await self.client.ws_connect(target, headers=self._auth(True))
                except WSServerHandshakeError as exc:
                    replay = await self._call("GET", target, None, self._auth(True))
                    return StreamAnswer(target, replay, exc.status, ())
                try:
                    while len(messages) < reads:
                        msg = await ws.receive()
                        messages.append((msg.type, msg.data, msg.extra))
                        if msg.type != WSMsgType.TEXT:
                            break
                        if f'"type":"{FRAME_ERROR}"' in msg.data:
                            reads = len(messages) + 1
                finally:
                    await ws.close()
                while any(not server_ws.closed for server_ws in self.client.app[WEBSOCKETS]):
                    await asyncio.sleep(0.005)
        except TimeoutError:
            read = [(kind.name, str(data)[:200]) for kind, data, _ in messages]
            raise AssertionError(
                f"hang: stream {target} not done within {CASE_TIMEOUT_S} s: {read}"
            ) from None
        return StreamAnswer(target, None, None, tuple(messages))

    def state(self) -> tuple[AgentState, int]:
        """The state now, and the monotonic time it was read at (the agent's lease clock)."""
        now = time.monotonic_ns()
        active = self.leases.active(now)
        effective = self.leases.current_s(now)
        load = self.sim.state()
        table = frozenset((lease.holder, lease.interval_s, lease.expires_mono_ns) for lease in active)
        sim = (float(load["util_ratio"]), int(load["model_bytes"]), float(load["power_w"]))
        return AgentState(table, effective, sim), now

    def check_invariants(self) -> AgentState:
        """What holds after every case: the interval in effect follows the lease table and is never slower
        than configured (nor faster than the agent allows), the table is bounded, the newest sample is
        recent; every ``ALIVE_EVERY`` cases, new samples still come (see ``check_sampling``)."""
        state, now = self.state()
        assert MIN_INTERVAL_S <= state.effective_s <= CONFIGURED_S, f"interval in effect: {state}"
        assert state.effective_s == effective_interval(state.leases), f"interval off the lease table: {state}"
        assert self.leases.stored <= MAX_LEASES, f"{self.leases.stored} leases stored"
        snap = self.sampler.snapshot
        assert snap.sample is not None and snap.interval_s <= CONFIGURED_S, (
            f"sampled every {snap.interval_s} s"
        )
        age_s = (now - snap.sample.t_mono_ns) / 1e9
        assert age_s < STALE_S, f"the newest sample is {age_s:.2f} s old (sampling stopped or slowed)"
        self.cases += 1
        if self.cases % ALIVE_EVERY == 0:
            self.check_sampling()
        return state

    def check_sampling(self) -> None:
        seq = self.sampler.last_seq
        self.loop.run(
            self._until(
                lambda: self.sampler.last_seq >= seq + ALIVE_SAMPLES,
                f"{ALIVE_SAMPLES} new samples after seq {seq} (sampling stopped or slowed)",
                ALIVE_WITHIN_S,
            )
        )

    def clear_leases(self) -> None:
        for lease in self.leases.active(time.monotonic_ns()):
            self.leases.release(lease.holder)
        self.sampler.wake()

    def fill_leases(self) -> None:
        """Every lease slot held (by slow leases, which change nothing): a new holder must get 429."""
        i = 0
        while len(self.leases.active(time.monotonic_ns())) < MAX_LEASES:
            self.leases.grant(f"{FILL}{i}", 1.0, 60.0, time.monotonic_ns())
            i += 1
        self.sampler.wake()

    def release_fill(self) -> None:
        for lease in self.leases.active(time.monotonic_ns()):
            if lease.holder.startswith(FILL):
                self.leases.release(lease.holder)
        self.sampler.wake()


def check(answer: Answer) -> None:
    """check_answer for the agent: /healthz may be 503 (degraded), saying why; a HEAD answer has no body,
    but a refusal's headers still say JSON."""
    degraded = answer.status == 503 and answer.path.split("?")[0] == "/healthz"
    if answer.method == "HEAD":
        assert answer.status < 500 or degraded, f"server error: {answer}"
        if 400 <= answer.status < 500:
            assert answer.content_type == "application/json", f"a refusal that is not JSON: {answer}"
        return
    if degraded:
        body = answer.json()
        assert body["status"] == "degraded" and body["reason"], f"a 503 without a reason: {answer}"
        return
    check_answer(answer)


@pytest.fixture
def agent_api() -> Iterator[AgentApi]:
    """An agent without a token, shared by every example of the test (leases and load accumulate, as on a
    real agent)."""
    api = AgentApi()
    try:
        yield api
        api.check_sampling()
    finally:
        api.close()


@pytest.fixture
def secured_agent_api() -> Iterator[AgentApi]:
    api = AgentApi(token=TOKEN)
    try:
        yield api
        api.check_sampling()
    finally:
        api.close()


# ---- requests ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    body: str  # "lease", "sim" or "read": which valid body it is fuzzed from


ROUTES = (
    Route("GET", "/metrics", "read"),
    Route("GET", "/healthz", "read"),
    Route("GET", "/v1/time", "read"),
    Route("GET", "/v1/capabilities", "read"),
    Route("GET", "/v1/interval", "read"),
    Route("PUT", "/v1/interval", "lease"),
    Route("DELETE", "/v1/interval", "read"),
    Route("POST", "/v1/sim/load", "sim"),
    Route("GET", "/v1/stream", "read"),
)
#: The routes that change something drawn more often: PUT four times as often as a read, DELETE and POST
#: three times.
WEIGHTED_ROUTES = (
    *ROUTES,
    *[route for route in ROUTES if route.method == "PUT"] * 3,
    *[route for route in ROUTES if route.method in ("DELETE", "POST")] * 2,
)
#: Paths next to the routes, which none selects.
OTHER_PATHS = ("/", "/v1", "/v1/", "/v1/interval/", "/V1/interval", "/v1/sim", "/v1/sim/load/x", "/v1/leases")
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
#: Holders the valid lease bodies and the DELETE queries share, so deletes find leases to release.
HOLDERS = ("coord-1", "coord-2", "fuzz-holder")

LEASE = st.fixed_dictionaries(
    {
        "holder": st.one_of(st.sampled_from(HOLDERS), texts(40), st.text(min_size=125, max_size=131)),  # 128
        "interval_s": st.one_of(
            st.sampled_from([MIN_INTERVAL_S, 0.019, CONFIGURED_S, 0.021, 1, 3600, 3600.0]),
            st.floats(min_value=MIN_INTERVAL_S, max_value=3600),
        ),
    },
    optional={
        "ttl_s": st.one_of(st.sampled_from([0.05, 1, 60, 600, 86400]), st.floats(0, 86400, exclude_min=True))
    },
)
SIM_LOAD = st.fixed_dictionaries(
    {},
    optional={
        "util_ratio": st.floats(0, 1),
        "model_bytes": st.integers(0, SimSpec().mem_total_bytes),
    },
)
VALID: dict[str, st.SearchStrategy[JSON]] = {"lease": LEASE, "sim": SIM_LOAD, "read": LEASE | SIM_LOAD}
#: The same keys with any value of the right JSON type: ranges, lengths and signs are wrong now and then.
_NUMBER = st.one_of(ints(), floats())
SHAPED: dict[str, st.SearchStrategy[JSON]] = {
    "lease": st.fixed_dictionaries(
        {"holder": texts(300), "interval_s": _NUMBER}, optional={"ttl_s": _NUMBER}
    ),
    "sim": st.fixed_dictionaries({}, optional={"util_ratio": _NUMBER, "model_bytes": ints()}),
}
SHAPED["read"] = SHAPED["lease"] | SHAPED["sim"]


def _encode_json(body: JSON) -> bytes:
    return json.dumps(body).encode()


def bodies(kind: str) -> st.SearchStrategy[bytes]:
    """A valid body of the kind, one of the right shape (numbers out of range), a mutation of a valid one,
    damaged bytes of one, or garbage."""
    valid = VALID[kind].map(_encode_json)
    shaped = SHAPED[kind].map(_encode_json)
    hostile = hostile_body(VALID[kind])
    # a plain one_of would flatten hostile_body's branches and draw a valid body one time in eight
    return st.sampled_from([valid, valid, shaped, hostile, hostile]).flatmap(lambda chosen: chosen)


def encode(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def queries() -> st.SearchStrategy[str]:
    """Query strings: the holder a DELETE names (or several, or none), and junk."""
    names = st.one_of(st.sampled_from(["holder", "after", "HOLDER", "holder[]", ""]), texts(8))
    values = st.one_of(st.sampled_from(HOLDERS), texts(20), ints().map(str), floats().map(repr))
    pairs = st.lists(st.tuples(names, values), max_size=3).map(
        lambda ps: "?" + "&".join(f"{encode(k)}={encode(v)}" for k, v in ps)
    )
    return st.one_of(
        st.just(""),
        st.sampled_from(HOLDERS).map(lambda h: f"?holder={h}"),
        pairs,
        st.sampled_from(
            ["?", "?holder", "?holder=", "?&&=", "?holder=coord-1&holder=coord-2", "?holder=%ff"]
        ),
    )


def headers() -> st.SearchStrategy[dict[str, str]]:
    kinds = st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "application/json; charset=latin-1",
            "application/json; charset=utf-16",
            "application/json; charset=utf-99",
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "x/y; charset=utf-99",
        ]
    )
    extra = st.sampled_from(
        [
            {"Upgrade": "websocket"},
            {"Connection": "Upgrade", "Upgrade": "websocket"},
            {"Accept": "text/html"},
            {"Accept-Encoding": "gzip"},
            {"X-Forwarded-For": "10.0.0.1"},
            {"Authorization": "Bearer nonsense"},
        ]
    )
    return st.one_of(
        st.just({}),
        st.fixed_dictionaries({"Content-Type": kinds}),
        extra,
        st.tuples(st.fixed_dictionaries({"Content-Type": kinds}), extra).map(lambda t: {**t[0], **t[1]}),
    )


def _sent_body(body: bytes, sent_headers: dict[str, str]) -> dict[str, Any] | None:
    """The body as the agent read it, when that is certain (UTF-8: no charset was named), else None."""
    if "charset" in sent_headers.get("Content-Type", ""):
        return None
    parsed = json.loads(body.decode("utf-8"))
    return parsed if isinstance(parsed, dict) else None


@fuzz_settings()
@given(data=st.data())
def test_any_request_on_any_route(agent_api: AgentApi, data: st.DataObject) -> None:
    api = agent_api
    route = data.draw(st.sampled_from(WEIGHTED_ROUTES), label="route")
    full = _lease_table(api, data, route)
    try:
        odd = data.draw(st.sampled_from(["route"] * 8 + ["method", "path"]), label="odd")
        method = data.draw(st.sampled_from(METHODS), label="method") if odd == "method" else route.method
        path = data.draw(st.sampled_from(OTHER_PATHS), label="path") if odd == "path" else route.path
        query = data.draw(queries(), label="query")
        with_body = route.body != "read" or data.draw(st.booleans(), label="with a body")
        body = data.draw(bodies(route.body), label="body") if with_body else None
        sent = data.draw(headers(), label="headers")
        label = f"{method} {path}" if (method, path) == (route.method, route.path) else "odd"
        send_and_check(api, method, path, query, body, sent, label)
    finally:
        if full:
            api.release_fill()


WRITE_ROUTES = tuple(route for route in ROUTES if route.body != "read")


@fuzz_settings()
@given(route=st.sampled_from(WRITE_ROUTES), data=st.data())
def test_bodies_of_the_right_shape_on_the_write_routes(
    agent_api: AgentApi, route: Route, data: st.DataObject
) -> None:
    """Bodies that parse, valid or with values out of range (the validation decides, not the parser): the
    same properties, drawn often enough that CI's few examples reach them."""
    api = agent_api
    full = _lease_table(api, data, route)
    try:
        kind = data.draw(st.sampled_from([VALID, SHAPED]), label="kind")
        body = data.draw(kind[route.body].map(_encode_json), label="body")
        send_and_check(api, route.method, route.path, "", body, {}, f"{route.method} {route.path}")
    finally:
        if full:
            api.release_fill()


def _lease_table(api: AgentApi, data: st.DataObject, route: Route) -> bool:
    """Now and then (often before a PUT) every lease slot held for this one case, where a new holder must
    get 429; now and then none. Returns whether the slots were filled (the caller releases them)."""
    full = ["full"] * (4 if route.body == "lease" else 1)
    table = data.draw(st.sampled_from(["keep"] * 8 + ["clear", *full]), label="lease table")
    if table == "clear":
        api.clear_leases()
    elif table == "full":
        api.fill_leases()
    return table == "full"


def send_and_check(
    api: AgentApi, method: str, path: str, query: str, body: bytes | None, sent: dict[str, str], label: str
) -> Answer:
    """One request, and what every answer must be: no 5xx, a JSON refusal that changed nothing, or an
    accepted change that did what it says; then the invariants."""
    before, _ = api.state()

    answer = api.call(method, path + query, body, sent)

    after, after_ns = api.state()
    event(f"{label} -> {answer.status}")
    check(answer)
    if answer.status >= 400:
        assert after == before.at(after_ns), (
            f"a refused request changed the agent: {answer}\n{before}\n{after}"
        )
    else:
        assert 200 <= answer.status < 300, str(answer)
        if method == "PUT" and path == "/v1/interval" and body is not None:
            _check_granted(api, body, sent, answer)
        if method == "DELETE" and path == "/v1/interval":
            holders = {holder for holder, _, _ in after.leases}
            assert answer.json()["released"] in (True, False), str(answer)
            assert not holders - {holder for holder, _, _ in before.leases}, f"DELETE granted: {answer}"
        if method == "POST" and path == "/v1/sim/load":
            load = answer.json()
            assert (load["util_ratio"], load["model_bytes"]) == after.sim[:2], f"{answer}\n{after}"
    api.check_invariants()
    return answer


def _check_granted(api: AgentApi, body: bytes, sent: dict[str, str], answer: Answer) -> None:
    """An accepted lease is in the table as asked (unless its ttl already ran out), and the interval in
    effect the answer reports is never slower than configured."""
    shown = answer.json()
    assert MIN_INTERVAL_S <= shown["interval_s"] <= CONFIGURED_S, f"interval in effect: {answer}"
    assert shown["configured_s"] == CONFIGURED_S, str(answer)
    asked = _sent_body(body, sent)
    if asked is None:
        return
    now = time.monotonic_ns()
    held = {lease.holder: lease for lease in api.leases.active(now)}
    lapsed = asked.get("ttl_s", 600) < 1.0  # lapses within the case: absent is no failure
    assert asked["holder"] in held or lapsed, f"an accepted lease is not held: {answer}"
    if asked["holder"] in held:
        assert held[asked["holder"]].interval_s == float(asked["interval_s"]), str(answer)


# ---- the stream --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class After:
    """How ``?after=`` is built from the newest seq when the case runs: ``valid`` (a seq the agent has,
    or none), ``beyond`` (a seq far beyond the newest, at most MAX_SEQ), ``unknown`` (a parameter the route
    does not take: refused, not ignored) or ``hostile`` (anything else)."""

    kind: str
    query: str


@st.composite
def after_queries(draw: st.DrawFn, newest: int) -> After:
    choice = draw(st.sampled_from(["valid", "beyond", "near", "hostile", "repeated", "absent", "unknown"]))
    if choice == "valid":
        back = draw(st.one_of(st.sampled_from([0, 1, 10**6]), st.integers(0, 2000)))
        return After("valid", f"?after={max(0, newest - back)}")
    if choice == "absent":
        return After("valid", draw(st.sampled_from(["", "?"])))
    if choice == "unknown":
        names = st.one_of(st.sampled_from(["AFTER", "x", "after[]", "since", "after "]), texts(10))
        name = draw(names.filter(lambda n: n != "after" and encode(n) != "after"))
        return After("unknown", f"?{encode(name)}=1" + draw(st.sampled_from(["", "&after=0"])))
    if choice == "beyond":  # far enough that the sampler cannot catch up during the case
        ahead = draw(st.one_of(st.sampled_from([10**6, MAX_SEQ]), st.integers(10**6, MAX_SEQ)))
        return After("beyond", f"?after={min(newest + ahead, MAX_SEQ)}")
    if choice == "near":  # beyond the newest when asked, but the sampler may catch up: either answer
        return After("hostile", f"?after={newest + draw(st.integers(1, 3))}")
    if choice == "repeated":
        first, second = draw(st.sampled_from([("0", "x"), ("x", "0"), ("", "1"), (str(MAX_SEQ), "0")]))
        return After("hostile", f"?after={first}&after={second}")
    value = draw(
        st.one_of(
            st.sampled_from(
                [
                    "-1",
                    "-0",
                    str(2**63),
                    str(2**64),
                    str(-(2**63)),
                    "1.5",
                    "1e3",
                    "0x10",
                    "",
                    " ",
                    "abc",
                    "NaN",
                    "\u0661\u0662",
                    "1_000",
                    "+5",
                    " 5 ",
                    "9" * 5000,
                    "0" * 5000 + "1",
                ]
            ),
            texts(20),
            ints().map(str),
            floats().map(repr),
        )
    )
    return After("hostile", f"?after={encode(value)}")


@fuzz_settings()
@given(data=st.data())
def test_hostile_after_on_the_stream(agent_api: AgentApi, data: st.DataObject) -> None:
    api = agent_api
    newest = api.sampler.last_seq
    after = data.draw(after_queries(newest), label="after")
    absent = after.kind == "valid" and "after=" not in after.query
    exact_newest = absent or after.query == f"?after={newest}"
    # a reader up to date gets nothing until the next poll (up to a second): read the hello only
    got = api.stream(f"/v1/stream{after.query}", reads=1 if exact_newest else 2)

    event(
        f"{after.kind} -> "
        + (f"refused {got.refused.status}" if got.refused else f"{len(got.messages)} messages")
    )
    if after.kind == "unknown":
        assert got.refused is not None and got.refused.status == 400, f"served an unknown parameter: {got}"
    if got.refused is not None:
        assert after.kind in ("hostile", "unknown"), f"refused a stream it must serve: {got}"
        assert got.handshake_status == got.refused.status, f"{got.handshake_status}: {got}"
        assert 400 <= got.refused.status < 500, str(got)
        check_refusal(got.refused)
    else:
        hello = got.frames(0)
        assert len(hello) == 1 and hello[0]["type"] == FRAME_HELLO, f"the first frame is no hello: {got}"
        assert hello[0]["boot_id"] == api.sampler.boot_id, str(got)
        if len(got.messages) > 1:
            _check_after_hello(api, after, got)
        else:
            assert after.kind != "beyond", f"no error frame: {got}"
    answer = api.call("GET", "/healthz")
    assert answer.status == 200, f"the agent stopped answering after {got}: {answer}"
    api.check_invariants()


def _check_after_hello(api: AgentApi, after: After, got: StreamAnswer) -> None:
    frames = got.frames(1)
    if frames[0]["type"] == FRAME_ERROR:
        error = frames[0]
        assert after.kind != "valid", f"refused a seq the agent has: {got}"
        assert error["error"] == "after_beyond_newest" and error["reason"], str(got)
        assert error["boot_id"] == api.sampler.boot_id, str(got)
        assert error["last_seq"] < error["after"] <= MAX_SEQ, str(got)
        if after.kind == "beyond":
            assert f"after={error['after']}" in got.target, f"the error names another seq: {got}"
        assert len(got.messages) == 3, f"no close after the error frame: {got}"
        kind, code, reason = got.messages[2]
        assert kind == WSMsgType.CLOSE and code == CLOSE_AFTER_BEYOND_NEWEST, f"closed with {code}: {got}"
        assert reason and error["reason"].startswith(reason), f"close reason {reason!r}: {got}"
        assert len(reason.encode()) <= 123, str(got)
        return
    assert after.kind != "beyond", f"no error frame for after beyond the newest: {got}"
    # replay (or live) frames: consecutive seqs, right after ``after`` or after an announced gap
    expect: int | None = None
    for frame in frames:
        if frame["type"] == FRAME_GAP:
            assert expect is None and frame["missing"] > 0, str(got)
            expect = frame["next_seq"]
            assert frame["after"] + frame["missing"] + 1 == expect, str(got)
            continue
        if frame["type"] == FRAME_HELLO:
            continue
        assert frame["type"] == FRAME_SAMPLE, f"unknown frame: {frame!r}"
        assert expect is None or frame["seq"] == expect, f"seq {frame['seq']}, expected {expect}: {got}"
        expect = frame["seq"] + 1
    first = frames[0]
    if after.kind == "valid" and "after=" in after.query:
        asked = int(after.query.split("after=")[1])
        assert first.get("after", first.get("seq", 0) - 1) == asked, f"not resumed after {asked}: {got}"


# ---- the token ---------------------------------------------------------------------------------------


AUTH_HEADERS: st.SearchStrategy[dict[str, str]] = st.one_of(
    st.just({}),
    st.just({"Authorization": ""}),
    st.sampled_from(
        [
            "Bearer",
            "Bearer ",
            f"bearer {TOKEN[::-1]}",  # (the scheme in any case is right: RFC 9110 §11.1; the token is not)
            f"Bearer{TOKEN}",
            f"Basic {TOKEN}",
            TOKEN,
            f"Bearer {TOKEN}x",
            f"Bearer {TOKEN[:-1]}",
            f"Bearer {TOKEN.upper()}",
            f"Bearer  {TOKEN[1:]}",
        ]
    ).map(lambda v: {"Authorization": v}),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80).map(
        lambda v: {"Authorization": f"Bearer {v}"}
    ),
)
SECURED_ROUTES = (*ROUTES, Route("GET", "/v1/nope", "read"), Route("POST", "/v1/interval", "lease"))


@fuzz_settings()
@given(route=st.sampled_from(SECURED_ROUTES), sent=AUTH_HEADERS, data=st.data())
def test_a_wrong_or_missing_token_is_401_and_changes_nothing(
    secured_agent_api: AgentApi, route: Route, sent: dict[str, str], data: st.DataObject
) -> None:
    api = secured_agent_api
    header = sent.get("Authorization", "")
    assume(not (header.startswith("Bearer ") and header[len("Bearer ") :].strip() == TOKEN))
    query = data.draw(queries(), label="query") if route.method == "DELETE" else ""
    body = data.draw(bodies(route.body), label="body") if route.method != "GET" else None
    before, _ = api.state()

    answer = api.call(route.method, route.path + query, body, sent, auth=False)

    after, after_ns = api.state()
    event(f"{route.path} -> {answer.status}")
    assert after == before.at(after_ns), f"an unauthenticated request changed the agent: {answer}"
    if route.path.startswith("/v1/"):
        assert answer.status == 401, f"not refused without the token: {answer}"
        check_refusal(answer)
        assert answer.json()["error"] == "unauthorized", str(answer)
    else:
        check(answer)
        assert answer.status in (200, 503), f"an open route refused: {answer}"
    api.check_invariants()
