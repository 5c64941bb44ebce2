"""Odd request lines for the coordinator, written byte for byte: unknown and malformed paths, dot segments,
percent-encodings of anything, odd query strings, odd methods.

Whatever arrives: no 5xx, nothing written unless the request was accepted, and the server still answers.
A well-formed request that matches no route is still refused the API's way: JSON with a reason."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fuzz.coord_harness import Answer, CoordinatorApi, check_answer
from fuzz.profiles import fuzz_settings

SEGMENTS = (
    "v1",
    "runs",
    "imports",
    "commit",
    "end",
    "windows",
    "marks",
    "export",
    "time",
    "nodes",
    "healthz",
    "metrics",
    "",
    ".",
    "..",
    "%2e%2e",
    "%2E",
    "%2F",
    "%00",
    "%ff",
    "%",
    "%zz",
    "%C3%A9",
    "run-20260101-000000-abcdef",
    "{run_id}",
    "a;b=c",
    "~user",
)
#: Characters a request target may hold unencoded (RFC 3986: unreserved, sub-delims, ":", "@", "%").
TARGET_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@%"
#: The end of a request line and the headers every raw request carries.
CLOSE = b"\r\nHost: x\r\nConnection: close\r\n"
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE")


def _segment() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(SEGMENTS), st.text(alphabet=TARGET_CHARS, max_size=12))


def _query() -> st.SearchStrategy[str]:
    pair = st.tuples(
        st.text(alphabet=TARGET_CHARS + "/?", max_size=8), st.text(TARGET_CHARS + "/?", max_size=12)
    )
    pairs = st.lists(pair, max_size=4).map(lambda ps: "&".join(f"{k}={v}" for k, v in ps))
    return st.one_of(
        st.just(""), pairs.map(lambda q: "?" + q), st.sampled_from(["?", "??", "?&&=", "?after=-1"])
    )


def well_formed_targets() -> st.SearchStrategy[str]:
    """Paths of known and unknown segments, as a client could send them."""
    prefix = st.sampled_from(["/v1/runs", "/v1", "", "/v1/runs/run-x/imports/i"])
    tail = st.lists(_segment(), max_size=5).map(lambda parts: "".join("/" + p for p in parts))
    return st.builds(lambda p, t, q: (p + t or "/") + q, prefix, tail, _query())


def _head(method: str, target: str, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: fuzz", "Connection: close", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def malformed_heads() -> st.SearchStrategy[bytes]:
    """Request heads no client library sends: control characters and raw bytes in the target, a target of
    8 000+ bytes, a wrong version, a broken length or chunk. (Never a body shorter than its Content-Length:
    the server rightly waits for the rest.)"""
    junk = st.binary(min_size=1, max_size=20)
    return st.one_of(
        st.builds(
            lambda t, j: b"GET /v1/" + j + t.encode() + b" HTTP/1.1" + CLOSE + b"\r\n",
            _query(),
            junk,
        ),
        st.integers(8000, 9000).map(lambda n: _head("GET", "/v1/runs/" + "a" * n)),
        st.sampled_from(
            [
                b"GET /v1/runs HTTP/9.9" + CLOSE + b"\r\n",
                b"GET /v1/runs\r\n\r\n",
                b"POST /v1/runs HTTP/1.1" + CLOSE + b"Content-Length: 1\r\n\r\n{",
                b"POST /v1/runs HTTP/1.1" + CLOSE + b"Content-Length: -1\r\n\r\n",
                b"POST /v1/runs HTTP/1.1" + CLOSE + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
                b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 40,
                b"GET /v1/runs HTTP/1.1" + CLOSE + b"Authorization: Bearer \xff\r\n\r\n",
            ]
        ),
    )


@fuzz_settings()
@given(
    head=st.one_of(
        st.builds(
            _head, st.sampled_from(METHODS), well_formed_targets(), st.sampled_from([b"", b"{}", b"\x00"])
        ),
        malformed_heads(),
    )
)
def test_odd_requests_never_fail_the_server(coordinator_api: CoordinatorApi, head: bytes) -> None:
    api = coordinator_api
    before = api.state()
    answer = api.raw(head)
    assert answer.status < 500, f"server error: {answer}"
    if not 200 <= answer.status < 300:
        assert api.state() == before, f"a refused request changed the database: {answer}"
    still = api.call("GET", "/v1/runs")
    assert still.status == 200, f"the server stopped answering after {head[:200]!r}: {still}"


@fuzz_settings()
@given(method=st.sampled_from(METHODS), target=well_formed_targets())
def test_requests_that_match_no_route_are_refused_with_a_json_reason(
    coordinator_api: CoordinatorApi, method: str, target: str
) -> None:
    answer: Answer = coordinator_api.raw(_head(method, target))
    check_answer(answer)
