"""Hostile requests to every route of the coordinator's API: bodies from the models' JSON Schema and
mutations of them, garbage bytes, wrong and missing tokens, odd paths and query strings.

Every answer: no 5xx; a 4xx is JSON with ``error`` and ``reason``; a refused request changes nothing in the
database; an accepted windows batch is stored whole and only holds windows the docs allow; a run written to
still exports (200)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.coord_harness import TOKEN, Answer, CoordinatorApi, check_answer, check_export, segment
from fuzz.coord_strategies import MARK, RUN_CREATE, RUN_END, route_body, windows_body
from fuzz.profiles import fuzz_settings
from fuzz.window_rules import doc_problem


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    template: str  # {run} and {import} are filled in
    body: str  # which of coord_strategies.VALID_BODIES it is fuzzed from


ROUTES = (
    Route("POST", "/v1/runs", "create"),
    Route("GET", "/v1/runs", "read"),
    Route("GET", "/v1/runs/{run}", "read"),
    Route("POST", "/v1/runs/{run}/end", "end"),
    Route("POST", "/v1/runs/{run}/windows", "windows"),
    Route("POST", "/v1/runs/{run}/imports", "imports"),
    Route("POST", "/v1/runs/{run}/imports/{import}/commit", "commit"),
    Route("DELETE", "/v1/runs/{run}/imports/{import}", "abort"),
    Route("POST", "/v1/runs/{run}/marks", "marks"),
    Route("GET", "/v1/runs/{run}/export", "read"),
    Route("GET", "/v1/time", "read"),
    Route("GET", "/v1/openapi.json", "read"),
    Route("GET", "/v1/nodes", "read"),
    Route("GET", "/healthz", "read"),
    Route("GET", "/metrics", "read"),
)
#: Ids that still select the route: not "." or ".." (the client folds those segments into another path) and
#: without braces (aiohttp's route patterns exclude them). Paths that select no route are fuzzed in
#: test_fuzz_coordinator_paths.py.
HOSTILE_IDS = st.one_of(
    st.text(min_size=1, max_size=40).filter(lambda t: t not in (".", "..") and not {"{", "}"} & set(t)),
    st.sampled_from(["run-", "import-", "%", "%00", "\x00", " ", "run-20260101-000000-zzzzzz", "a" * 5000]),
)


@dataclass
class Targets:
    """Real things for the routes to act on, made afresh now and then (accepted requests use them up)."""

    open_run: str
    ended_run: str
    open_import: str
    committed_import: str


def make_targets(api: CoordinatorApi) -> Targets:
    def ok(answer: Answer) -> dict[str, str]:
        assert 200 <= answer.status < 300, str(answer)
        body = answer.json()
        assert isinstance(body, dict)
        return body

    open_run = ok(api.call("POST", "/v1/runs", b'{"name": "fuzz-open"}'))["id"]
    ended_run = ok(api.call("POST", "/v1/runs", b'{"name": "fuzz-ended"}'))["id"]
    ok(api.call("POST", f"/v1/runs/{segment(ended_run)}/end"))
    imports = f"/v1/runs/{segment(open_run)}/imports"
    open_import = ok(api.call("POST", imports, b"{}"))["import_id"]
    committed_import = ok(api.call("POST", imports, b"{}"))["import_id"]
    ok(api.call("POST", f"{imports}/{segment(committed_import)}/commit"))
    return Targets(open_run, ended_run, open_import, committed_import)


@pytest.fixture
def targets(coordinator_api: CoordinatorApi) -> list[Targets]:
    return [make_targets(coordinator_api)]


def _body(data: st.DataObject, route: Route, now: Targets) -> bytes | None:
    if route.body == "windows" and data.draw(st.booleans()):
        import_id = data.draw(st.sampled_from([now.open_import, now.committed_import]))
        return json.dumps(data.draw(windows_body(import_id))).encode()
    return data.draw(route_body(route.body))


def _headers() -> st.SearchStrategy[dict[str, str]]:
    kinds = st.sampled_from(
        ["application/json", "text/plain", "application/x-www-form-urlencoded", "x/y; charset=utf-99"]
    )
    return st.one_of(st.just({}), st.fixed_dictionaries({"Content-Type": kinds}))


@fuzz_settings()
@given(data=st.data())
def test_any_body_on_any_route(
    coordinator_api: CoordinatorApi, targets: list[Targets], data: st.DataObject
) -> None:
    api = coordinator_api
    if data.draw(st.integers(0, 9), label="fresh targets") == 0:
        targets[0] = make_targets(api)
    now = targets[0]
    route = data.draw(st.sampled_from(ROUTES), label="route")
    run_id = data.draw(st.sampled_from([now.open_run, now.ended_run]) | HOSTILE_IDS, label="run id")
    import_id = data.draw(st.sampled_from([now.open_import, now.committed_import]) | HOSTILE_IDS)
    path = route.template.format(run=segment(run_id), **{"import": segment(import_id)})
    body = _body(data, route, now) if route.method != "GET" or data.draw(st.booleans()) else None
    before, stored_before = api.state(), api.windows_stored()

    answer = api.call(route.method, path, body, data.draw(_headers(), label="headers"))

    check_answer(answer)
    if answer.status >= 400:
        assert api.state() == before, f"a refused request changed the database: {answer}"
        return
    assert 200 <= answer.status < 300, str(answer)
    if route.template != "/metrics":
        answer.json()
    if route.body == "windows":
        _check_batch_stored(api, body, answer, stored_before)
    if "{run}" in route.template and route.method != "GET":
        check_export(api, run_id)


def _check_batch_stored(api: CoordinatorApi, body: bytes | None, answer: Answer, stored_before: int) -> None:
    """An accepted batch is stored whole, and holds only windows the docs allow."""
    assert body is not None
    windows = json.loads(body)["windows"]
    assert answer.json()["stored"] == len(windows), str(answer)
    assert api.windows_stored() == stored_before + len(windows), f"a batch stored in part: {answer}"
    for window in windows:
        problem = doc_problem(window)
        assert problem is None, f"accepted a window the docs refuse ({problem}): {window!r}"


SCHEMA_VALID = st.one_of(
    RUN_CREATE.map(lambda body: ("create", body)),
    RUN_END.map(lambda body: ("end", body)),
    MARK.map(lambda body: ("marks", body)),
)


@fuzz_settings()
@given(case=SCHEMA_VALID)
def test_bodies_valid_by_the_schema_are_accepted(
    coordinator_api: CoordinatorApi, case: tuple[str, dict[str, object]]
) -> None:
    """The published models' schema and the validation agree: a body the schema allows is taken."""
    api = coordinator_api
    kind, body = case
    run = api.call("POST", "/v1/runs", b'{"name": "schema"}').json()["id"]
    paths = {
        "create": "/v1/runs",
        "end": f"/v1/runs/{segment(run)}/end",
        "marks": f"/v1/runs/{segment(run)}/marks",
    }
    if kind == "marks" and body["event"] == "end":
        opened = {"name": body["name"], "event": "begin", "phase": body.get("phase", "timed")}
        check_answer(api.call("POST", paths["marks"], json.dumps(opened).encode()))
    answer = api.call("POST", paths[kind], json.dumps(body).encode())
    # the one rule of state a schema cannot hold, as it cannot that the mark is open: an end dated back
    # (age_ns) past its mark's begin, just made, ends before it starts
    dated_back = bool(body.get("age_ns"))
    before_begin = answer.status == 400 and dated_back and b"ends before it starts" in answer.body
    refused = f"refused a body its own schema allows ({body!r}): {answer}"
    assert 200 <= answer.status < 300 or before_begin, refused
    check_export(api, run)


AUTH_HEADERS = st.one_of(
    st.just({"Authorization": ""}),
    st.sampled_from(["Bearer", "Bearer ", f"bearer{TOKEN}", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"]).map(
        lambda v: {"Authorization": v}
    ),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80).map(
        lambda v: {"Authorization": f"Bearer {v}"}
    ),
)


@fuzz_settings()
@given(route=st.sampled_from(ROUTES), headers=AUTH_HEADERS, data=st.data())
def test_a_wrong_or_missing_token_is_401_and_changes_nothing(
    secured_api: CoordinatorApi, route: Route, headers: dict[str, str], data: st.DataObject
) -> None:
    api = secured_api
    if headers.get("Authorization") == f"Bearer {TOKEN}":
        return
    path = route.template.format(run="r", **{"import": "i"})
    body = data.draw(route_body(route.body)) if route.method != "GET" else None
    before = api.state()
    open_route = route.template in ("/healthz", "/metrics")
    answer = api.call(route.method, path, body, headers if headers["Authorization"] else {}, auth=False)
    check_answer(answer)
    assert api.state() == before, f"an unauthenticated request changed the database: {answer}"
    if not open_route:
        assert answer.status == 401 and answer.json()["error"] == "unauthorized", str(answer)
