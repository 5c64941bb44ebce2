"""``GET /v1/runs/{id}/windows``: the run as stored and its windows, none measured — what
`export --prometheus RUN` measures again from a fleet's engine, so the coordinator no longer computes the
whole export first to hand them over. The answer read back (importers.windows_answer) gives the windows
and settings the export's answer gives; a coordinator without the route (older) is asked for its export."""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from helpers.app_thread import AppThread
from helpers.export_api import T0, S, ended_run, node_api, with_node
from helpers.processes import free_port
from sparkwatch.commands.export_tsdb import _coordinator_run, _defaults
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.importers import ImportFormatError, export_answer, windows_answer
from sparkwatch.sources import SourceError
from sparkwatch_agent.shared.http import json_refusals

DEMO = pathlib.Path(__file__).parents[1] / "fixtures" / "harness" / "export" / "demo-run.json"
#: What `sparkwatch run` wrapped, as it ends a run.
COMMAND = {"argv": ["./bench.sh", "--rate", "4"], "exit_code": 0}


def _fields(windows: list[Any]) -> list[dict[str, Any]]:
    return [w.to_json() for w in windows]


async def test_the_answer_is_the_run_as_stored_and_its_windows_as_the_export_has_them(
    tmp_path: pathlib.Path,
) -> None:
    async with node_api(tmp_path / "c.db") as api:
        client, store = api.client, api.store
        run_id = await ended_run(api)
        extra = {"id": "w2", "phase": "warmup", "t_start_ns": T0 + 1 * S, "t_end_ns": T0 + 3 * S}
        extra |= {"completion_tokens": 7, "finish_reason": "length"}
        # an ended run takes an import inside its span: a second window, of another phase, with tokens
        imported = await client.post(f"/v1/runs/{run_id}/imports")
        import_id = (await imported.json())["import_id"]
        body = {"windows": [extra], "import_id": import_id}
        assert (await client.post(f"/v1/runs/{run_id}/windows", json=body)).status == 201
        assert (await client.post(f"/v1/runs/{run_id}/imports/{import_id}/commit")).status == 200
        response = await client.get(f"/v1/runs/{run_id}/windows")
        answer = json.loads(await response.read())
        assert response.status == 200 and response.headers["Transfer-Encoding"] == "chunked"
        status, run = await api.get(f"/v1/runs/{run_id}")
        assert status == 200 and answer["run"] == {k: v for k, v in run.items() if k != "windows"}
        assert answer["windows"] == [w.to_json() for w in store.windows(run_id)]
        assert [w["id"] for w in answer["windows"]] == ["w2", "w1"]  # by start, as the export has them
        status, export = await api.get(f"/v1/runs/{run_id}/export")
        assert status == 200
        route = f"http://c/v1/runs/{run_id}"
        windows, settings = windows_answer(answer, f"{route}/windows")
        from_export, export_settings = export_answer(export, f"{route}/export")
        assert settings == export_settings and settings.t_end_ns == T0 + 10 * S
        for mine, theirs in zip(_fields(windows), _fields(from_export), strict=True):
            assert (
                mine["source"]["file"] == f"{route}/windows" and theirs["source"]["file"] == f"{route}/export"
            )
            assert {**mine, "source": None} == {**theirs, "source": None}
            assert mine["source"]["taken"] == theirs["source"]["taken"] and mine["source"]["run_id"] == run_id
        missing = await client.get("/v1/runs/run-nope/windows")
        reason = await missing.json()
        assert missing.status == 404 and reason == {"error": "not_found", "reason": "no run run-nope"}


async def test_an_open_runs_answer_has_no_end(tmp_path: pathlib.Path) -> None:
    """A run still open has no end to measure up to: `export --prometheus RUN` then asks for --end."""
    async with node_api(tmp_path / "c.db") as api:
        client = api.client
        opened = await client.post("/v1/runs", json={"name": "open", "gate_threshold": 0.3, "phases": ["x"]})
        run_id = (await opened.json())["id"]
        window = {"id": "w1", "phase": "x", "t_start_ns": T0 + S, "t_end_ns": T0 + 2 * S}
        assert (await client.post(f"/v1/runs/{run_id}/windows", json={"windows": [window]})).status == 201
        answer = await (await client.get(f"/v1/runs/{run_id}/windows")).json()
        windows, run = windows_answer(answer, "here")
        assert run.t_end_ns is None and (run.gate_threshold, run.phases) == (0.3, ("x",))
        assert [w.id for w in windows] == ["w1"]


def _stored() -> dict[str, Any]:
    run = {"id": "r1", "name": "n", "t_start_ns": T0, "t_end_ns": T0 + 10 * S, "interval_s": 0.1}
    run |= {"gate_threshold": 0.5, "scope": "request", "phases": ["timed"], "open": False, "command": None}
    windows = [{"id": "w1", "phase": "timed", "t_start_ns": T0 + S, "t_end_ns": T0 + 2 * S, "source": {}}]
    return {"run": run, "windows": windows}


def _changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data = _stored()
    *parents, last = path
    held: Any = data
    for key in parents:
        held = held[key]
    held[last] = value
    return data


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ([], "the answer must be a JSON object, found a list"),
        ({"windows": []}, "run must be a JSON object"),
        (_changed(("run",), "r1"), "run must be a JSON object, found a string"),
        (_changed(("run", "scope"), "tokens"), "run.scope must be one of"),
        (_changed(("run", "gate_threshold"), 1.5), "run.gate_threshold must be from 0 to 1, found 1.5"),
        (_changed(("run", "gate_threshold"), None), "run.gate_threshold"),
        (_changed(("run", "phases"), "timed"), "run.phases must be a list, found a string"),
        (_changed(("run", "t_start_ns"), "soon"), "run.t_start_ns"),
        (_changed(("windows",), [{"id": "w1"}]), "windows[0]: missing phase"),
    ],
)
def test_a_broken_answer_is_one_line_naming_the_route(data: Any, said: str) -> None:
    with pytest.raises(ImportFormatError) as info:
        windows_answer(data, "http://c:8750/v1/runs/r1/windows")
    assert str(info.value).startswith("http://c:8750/v1/runs/r1/windows: ") and said in str(info.value)
    assert "\n" not in str(info.value)
    windows, run = windows_answer(_stored(), "x")  # the shape all of them break
    assert [w.id for w in windows] == ["w1"] and run.scope == "request"


@pytest.mark.parametrize(
    "command",
    [
        None,
        "./bench.sh",
        {"argv": []},
        {"argv": ["a", 1], "exit_code": 0},
        {"argv": ["a"], "exit_code": True},
    ],
)
def test_a_command_of_another_shape_is_left_out(command: Any) -> None:
    """A hand-edited run's command the export's schema would refuse is not carried into an export."""
    data = _stored()
    data["run"]["command"] = command
    assert windows_answer(data, "x")[1].command is None
    data["run"]["command"] = {"argv": ["./bench.sh", "-n", "4"], "exit_code": 3, "extra": 1}
    assert windows_answer(data, "x")[1].command == {"argv": ["./bench.sh", "-n", "4"], "exit_code": 3}


class _Recorded:
    """A coordinator's app on a loopback port, each request's path kept."""

    def __init__(self, app: web.Application) -> None:
        self.paths: list[str] = []

        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            self.paths.append(request.path)
            return await handler(request)  # type: ignore[no-any-return]

        app.middlewares.insert(0, record)
        self.thread = AppThread(app, free_port())
        self.url = f"http://127.0.0.1:{self.thread.port}"

    def __enter__(self) -> _Recorded:
        self.thread.start()
        assert self.thread.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.stop()


def _asked(url: str, run_id: str) -> argparse.Namespace:
    return argparse.Namespace(coordinator=url, token_file=None, run=run_id)


@pytest.fixture
def coordinator_run(tmp_path: pathlib.Path) -> Iterator[tuple[_Recorded, str, dict[str, Any]]]:
    """A real coordinator holding an ended run (a window of 2-7 s), on a thread of its own; and the run's
    export, as the coordinator answers it."""
    clock = [T0]
    store, coordinator = with_node(tmp_path / "c.db", clock)
    with _Recorded(make_app(coordinator, None)) as served:

        async def made() -> tuple[str, dict[str, Any]]:
            async with aiohttp.ClientSession(served.url) as session:
                run_id = (await (await session.post("/v1/runs", json={"name": "r"})).json())["id"]
                window = {"id": "w1", "phase": "timed", "t_start_ns": T0 + 2 * S, "t_end_ns": T0 + 7 * S}
                await session.post(f"/v1/runs/{run_id}/windows", json={"windows": [window]})
                clock[0] = T0 + 10 * S
                await session.post(f"/v1/runs/{run_id}/end", json={"command": COMMAND})
                return run_id, await (await session.get(f"/v1/runs/{run_id}/export")).json()

        run_id, export = asyncio.run(made())
        served.paths.clear()
        yield served, run_id, export
        asyncio.run_coroutine_threadsafe(coordinator.stop(), served.thread.loop).result(10)
    store.close()


def test_export_prometheus_asks_a_coordinator_for_the_windows_not_the_export(
    coordinator_run: tuple[_Recorded, str, dict[str, Any]],
) -> None:
    served, run_id, export = coordinator_run
    windows, run = _coordinator_run(_asked(served.url, run_id))
    assert served.paths == [f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/windows"]  # no export computed
    from_export, export_run = export_answer(export, "x")
    assert run == export_run and run.command == COMMAND  # a TSDB export of the run names its command too
    assert [{**w, "source": None} for w in _fields(windows)] == [
        {**w, "source": None} for w in _fields(from_export)
    ]
    with pytest.raises(SourceError) as info:
        _coordinator_run(_asked(served.url, "run-nope"))
    assert str(info.value) == (
        f"GET {served.url}/v1/runs/run-nope: HTTP 404: no run run-nope"
        " (a run's export file gives its windows too: --windows FILE --windows-format export)"
    )


@pytest.mark.parametrize("posts", [True, False], ids=["405", "404"])
def test_a_coordinator_without_the_route_is_asked_for_its_export(posts: bool) -> None:
    """An older coordinator (no ``GET /windows``: 405 where it has the route's POST, as every one does, 404
    without; its JSON refusal middleware words either) still gives RUN's windows, from its export; its run
    read first, so a missing run is no fallback. An open run's export ends at the coordinator's "now": the
    run's own ``open`` makes it a run without an end, as ``/windows`` gives it."""
    export = json.loads(DEMO.read_text())
    run_id = export["run"]["id"]
    stored = {"windows": len(export["windows"]), **_stored()["run"], "id": run_id}

    async def run(request: web.Request) -> web.Response:
        if request.match_info["run_id"] != run_id:
            return web.json_response({"error": "not_found", "reason": "no run x"}, status=404)
        return web.json_response(stored)

    async def exported(request: web.Request) -> web.Response:
        return web.json_response(copy.deepcopy(export))

    async def added(request: web.Request) -> web.Response:
        return web.json_response({"stored": 0}, status=201)

    app = web.Application(middlewares=[json_refusals])
    app.router.add_get("/v1/runs/{run_id}", run)
    app.router.add_get("/v1/runs/{run_id}/export", exported)
    if posts:
        app.router.add_post("/v1/runs/{run_id}/windows", added)
    with _Recorded(app) as served:
        windows, settings = _coordinator_run(_asked(served.url, run_id))
        asked = list(served.paths)
        with pytest.raises(SourceError, match="HTTP 404: no run x"):
            _coordinator_run(_asked(served.url, "other"))
        stored.update(open=True, t_end_ns=None)
        _, still_open = _coordinator_run(_asked(served.url, run_id))
    assert asked == [f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/windows", f"/v1/runs/{run_id}/export"]
    assert [w.id for w in windows] == [w["id"] for w in export["windows"]]
    assert windows[0].source["file"] == f"{served.url}/v1/runs/{run_id}/export"
    assert settings.t_end_ns == export["run"]["t_end_ns"] and still_open.t_end_ns is None
    assert still_open == dataclasses.replace(settings, t_end_ns=None)


def test_an_open_coordinator_run_asks_for_its_end(tmp_path: pathlib.Path) -> None:
    """RUN still open: the coordinator's answer has no end, and the command says to give one (before the
    engine is asked); the same run with --end is measured up to it."""
    clock = [T0]
    store, coordinator = with_node(tmp_path / "c.db", clock)
    with _Recorded(make_app(coordinator, None)) as served:

        async def opened() -> str:
            async with aiohttp.ClientSession(served.url) as session:
                run_id = str((await (await session.post("/v1/runs", json={"name": "r"})).json())["id"])
                window = {"id": "w1", "phase": "timed", "t_start_ns": T0 + 2 * S, "t_end_ns": T0 + 7 * S}
                answer = await session.post(f"/v1/runs/{run_id}/windows", json={"windows": [window]})
                assert answer.status == 201
                return run_id

        run_id = asyncio.run(opened())
        windows, run = _coordinator_run(_asked(served.url, run_id))
        asyncio.run_coroutine_threadsafe(coordinator.stop(), served.thread.loop).result(10)
    store.close()
    assert run.t_end_ns is None and [w.id for w in windows] == ["w1"]
    flags = {"start": None, "end": None, "gate_threshold": None, "scope": None, "phases": None}
    with pytest.raises(SourceError) as info:
        _defaults(argparse.Namespace(**flags, run=run_id), run)
    assert str(info.value) == f"run {run_id} is still open (it has no end yet): give --end"
    end = T0 + 9 * S
    assert _defaults(argparse.Namespace(**{**flags, "end": end}, run=run_id), run)[:2] == (
        run.t_start_ns,
        end,
    )
