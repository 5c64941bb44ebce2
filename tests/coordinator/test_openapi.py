"""The published description of the coordinator's API: generated from the models, kept in
docs/openapi.json, served at GET /v1/openapi.json, and covering exactly the routes the app has."""

from __future__ import annotations

import json
import pathlib
import sqlite3

import jsonschema
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.api.openapi import openapi_document
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.windows import Window, WindowError, check_window
from sparkwatch.store import Store

PUBLISHED = pathlib.Path(__file__).parents[2] / "docs" / "openapi.json"


def test_the_published_document_is_the_generated_one() -> None:
    assert json.loads(PUBLISHED.read_text()) == openapi_document(), (
        "docs/openapi.json is stale: python -m sparkwatch.coordinator.api.openapi > docs/openapi.json"
    )


def test_every_schema_is_valid_json_schema_and_every_reference_resolves() -> None:
    doc = openapi_document()
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    text = json.dumps(doc)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/components/schemas/')[1:]}:
        assert ref in doc["components"]["schemas"], ref


async def test_it_is_served_and_lists_exactly_the_routes_of_the_app(tmp_path: pathlib.Path) -> None:
    store = Store(tmp_path / "c.db")
    app = make_app(Coordinator([], store), "t0ken-0123456789")
    routes = {
        (r.method.lower(), r.resource.canonical)
        for r in app.router.routes()
        if r.method != "HEAD" and r.resource is not None
    }
    async with TestClient(TestServer(app)) as client:
        answer = await client.get("/v1/openapi.json", headers={"Authorization": "Bearer t0ken-0123456789"})
        doc = await answer.json()
    store.close()
    assert answer.status == 200 and doc == openapi_document()
    documented = {(method, path) for path, item in doc["paths"].items() for method in item}
    assert documented == routes
    for path, item in doc["paths"].items():
        for operation in item.values():
            assert operation["security"] == ([] if path in ("/healthz", "/metrics") else [{"bearer": []}])


def test_a_window_the_schema_refuses_is_refused_by_the_rules_too() -> None:
    """The field bounds the document publishes are the ones check_window enforces."""
    validator = jsonschema.Draft202012Validator(openapi_document()["components"]["schemas"]["Window"])
    t0 = 1_800_000_000 * 10**9
    good = {"id": "a", "phase": "timed", "t_start_ns": t0, "t_end_ns": t0 + 10**9}
    assert validator.is_valid(good) and check_window(Window(**good))
    for change in ({"id": ""}, {"phase": "Timed"}, {"t_end_ns": 2**63 - 1}, {"http_status": 99}):
        assert not validator.is_valid({**good, **change}), change
        with pytest.raises(WindowError):
            check_window(Window(**{**good, **change}))
    assert not validator.is_valid({**good, "x": 1})


async def test_what_the_server_answers_is_what_the_document_declares(tmp_path: pathlib.Path) -> None:
    """Answers a trial found undeclared: a mark's end (200), a bad import body (400), dropping a committed
    import (409); /healthz's 503 is its own shape, not a Refusal."""
    store = Store(tmp_path / "c.db")
    app = make_app(Coordinator([], store), "t0ken-0123456789")
    doc = openapi_document()
    health = doc["paths"]["/healthz"]["get"]["responses"]["503"]
    assert "Refusal" not in json.dumps(health) and "disconnected" in health["description"]
    auth = {"Authorization": "Bearer t0ken-0123456789"}
    async with TestClient(TestServer(app)) as client:

        async def answer(method: str, path: str, template: str, body: object = None) -> int:
            response = await client.request(method, path, json=body, headers=auth)
            declared = doc["paths"][template][method.lower()]["responses"]
            assert str(response.status) in declared, (method, template, response.status, list(declared))
            return response.status

        run = await (await client.post("/v1/runs", json={"name": "r"}, headers=auth)).json()
        runs = f"/v1/runs/{run['id']}"
        marks = "/v1/runs/{run_id}/marks"
        assert await answer("POST", f"{runs}/marks", marks, {"name": "m", "event": "begin"}) == 201
        assert (
            await answer("POST", f"{runs}/marks", marks, {"name": "m", "event": "end", "phase": None}) == 200
        )
        imports = "/v1/runs/{run_id}/imports"
        assert await answer("POST", f"{runs}/imports", imports, {"x": 1}) == 400
        started = await (await client.post(f"{runs}/imports", headers=auth)).json()
        one = f"{runs}/imports/{started['import_id']}"
        assert await answer("POST", f"{one}/commit", imports + "/{import_id}/commit", {}) == 200
        assert await answer("DELETE", one, imports + "/{import_id}", None) == 409
    store.close()


async def test_a_damaged_runs_answers_are_declared(tmp_path: pathlib.Path) -> None:
    """A run row edited outside sparkwatch makes its reads a 409 ``damaged``, which the document did not
    declare for the run, its export, windows and report; ``GET /v1/runs`` lists it under ``damaged``."""
    store = Store(tmp_path / "c.db")
    app = make_app(Coordinator([], store), None)
    doc = openapi_document()
    async with TestClient(TestServer(app)) as client:
        run = await (await client.post("/v1/runs", json={"name": "r"})).json()
        with sqlite3.connect(tmp_path / "c.db") as conn:
            conn.execute("UPDATE runs SET scope = 'everything' WHERE id = ?", (run["id"],))
        conn.close()
        listed = await (await client.get("/v1/runs")).json()
        assert [d["id"] for d in listed["damaged"]] == [run["id"]]
        assert "damaged" in doc["paths"]["/v1/runs"]["get"]["responses"]["200"]["description"]
        base = f"/v1/runs/{run['id']}"
        for template, suffix in (
            ("", ""),
            ("/export", "/export"),
            ("/windows", "/windows"),
            ("/report", "/report"),
        ):
            response = await client.get(base + suffix)
            assert response.status == 409 and (await response.json())["error"] == "damaged"
            declared = doc["paths"]["/v1/runs/{run_id}" + template]["get"]["responses"]
            assert "409" in declared and "damaged" in declared["409"]["description"], template
    store.close()
