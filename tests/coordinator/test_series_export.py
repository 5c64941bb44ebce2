"""The series block through every way out (issue 18): ``GET …/export?series=true`` and ``?series_buckets=N``
(a bad value is a 400 with a JSON reason), the client, ``export_run`` offline, and ``sparkwatch export --db
--series`` as a user runs it. Without asking, the export has no block. A real store, a real API in-process."""

from __future__ import annotations

import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import jsonschema
import pytest

from helpers.app_thread import AppThread
from helpers.cli import sparkwatch as cli
from helpers.export_api import T0, Api, S, ended_run, node_api, with_node
from helpers.processes import free_port
from helpers.windows_made import count_windows_made
from sparkwatch.client import CoordinatorClient, CoordinatorTarget
from sparkwatch.commands.export_cmd import offline_export
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.core.export import digest
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.window_rows import FirstPass, plain
from sparkwatch.defaults import SERIES_BUCKETS
from sparkwatch.report.bundle import Assets
from sparkwatch.report.page import build_page
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow

KINDS = ["gpu_power_w", "util_ratio", "mem_used_bytes", "sm_clock_hz"]


@pytest.fixture
async def api(tmp_path: pathlib.Path) -> AsyncIterator[Api]:
    async with node_api(tmp_path / "c.db") as api:
        yield api


def check_block(export: dict[str, Any], buckets: int) -> dict[str, Any]:
    jsonschema.validate(plain(export), run_schema())
    series = export["series"]
    assert series["buckets"] == buckets and series["t0_ns"] == T0 and series["t_end_ns"] == T0 + 10 * S
    (node,) = series["nodes"]
    assert node["node"] == "n1" and [line["kind"] for line in node["lines"]] == KINDS
    assert node["throttle"] == [{"t_s": [4.0, 5.0], "gpu_uuid": "GPU-x", "reasons": ["hw_power_brake"]}]
    power = node["lines"][0]
    assert set(power["v"]) == {10.0} and power["samples"] == 100  # the samples at 0.1 … 10.0 s
    return dict(series)


async def test_the_api_adds_the_series_block_only_when_asked(api: Api) -> None:
    run_id = await ended_run(api)
    status, plain = await api.get(f"/v1/runs/{run_id}/export")
    assert status == 200 and "series" not in plain
    status, asked = await api.get(f"/v1/runs/{run_id}/export?series=true")
    assert status == 200
    check_block(asked, SERIES_BUCKETS)
    assert {k: v for k, v in asked.items() if k != "series"} == plain and digest(asked) == digest(plain)
    status, finer = await api.get(f"/v1/runs/{run_id}/export?series_buckets=500")
    assert status == 200 and check_block(finer, 500)["bucket_s"] == pytest.approx(0.02)
    status, off = await api.get(f"/v1/runs/{run_id}/export?series=false")
    assert status == 200 and off == plain
    target = CoordinatorTarget(str(api.client.make_url("")).rstrip("/"), None)
    async with CoordinatorClient(target) as client:
        check_block(await client.export(run_id, 300), 300)
        assert "series" not in await client.export(run_id)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("series_buckets=5", "series_buckets must be 100 to 20000 buckets, got 5"),
        ("series_buckets=20001", "got 20001"),
        ("series_buckets=abc", "series_buckets must be a whole number, got 'abc'"),
        ("series_buckets=-200", "series_buckets must be 100 to 20000 buckets, got -200"),  # "whole number"
        ("series_buckets=99999999999999999999999", "buckets, got 99999999999999999999999"),
        ("series_buckets=", "whole number"),
        ("series=yes", "series must be true or false, got 'yes'"),
        ("series=false&series_buckets=200", "series=false leaves out"),
    ],
)
async def test_a_bad_series_query_is_a_400_with_a_json_reason(api: Api, query: str, words: str) -> None:
    run_id = await ended_run(api)
    status, answer = await api.get(f"/v1/runs/{run_id}/export?{query}")
    assert status == 400 and answer["error"] == "invalid_query" and words in answer["reason"], answer
    status, missing = await api.get(f"/v1/runs/run-nope/export?{query}")
    assert status == 400 and missing["error"] == "invalid_query"  # the query is judged first, as a body is


async def test_offline_the_export_and_the_cli_add_it_on_asking(api: Api, tmp_path: pathlib.Path) -> None:
    run_id = await ended_run(api)
    path = api.store.path
    said: list[str] = []
    common: dict[str, Any] = {"gate_threshold": None, "scope": None, "now_ns": lambda: T0, "say": said.append}
    check_block(offline_export(path, run_id, series_buckets=200, **common), 200)
    assert "series" not in offline_export(path, run_id, **common)

    out = tmp_path / "with-series.json"
    done = cli("export", "--db", str(path), run_id, "--series", "-o", str(out))
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    check_block(written, SERIES_BUCKETS)
    finer = cli("export", "--db", str(path), run_id, "--series-buckets", "400")
    assert finer.returncode == 0, finer.stderr
    check_block(json.loads(finer.stdout), 400)
    plain = json.loads(cli("export", "--db", str(path), run_id).stdout)
    assert "series" not in plain and digest(plain) == digest(written)
    refused = cli("export", "--db", str(path), run_id, "--series-buckets", "50")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr == (  # one line, no usage before it
        "sparkwatch export: error: argument --series-buckets: must be 100 to 20000 buckets, got 50"
        " (see `sparkwatch export --help`)\n"
    )


def test_runs_export_asks_a_standing_coordinator_for_the_block(tmp_path: pathlib.Path) -> None:
    """`sparkwatch runs export ID --series-buckets N` as a user runs it, against a coordinator on a port."""
    store, coordinator = with_node(tmp_path / "c.db", [T0 + 20 * S])
    store.create_run(RunRow("r1", "online", T0, T0 + 10 * S, 0.1, 0.5, "run"))
    server = AppThread(make_app(coordinator, None), free_port())
    server.start()
    try:
        assert server.ready.wait(5)
        env = {"SPARKWATCH_COORDINATOR": f"http://127.0.0.1:{server.port}"}
        done = cli("runs", "export", "r1", "--series-buckets", "300", env=env)
        assert done.returncode == 0, done.stderr
        export = json.loads(done.stdout)
        jsonschema.validate(plain(export), run_schema())
        assert export["series"]["buckets"] == 300 and export["series"]["nodes"][0]["node"] == "n1"
        assert export["series"]["nodes"][0]["gated_out"] == []  # busy all along: the gate dropped nothing
        assert "series" not in json.loads(cli("runs", "export", "r1", env=env).stdout)
    finally:
        server.stop()
        store.close()


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/v1/runs/{run}/export?gate_threshold=0.9", "parameter 'gate_threshold': this route takes series,"),
        ("/v1/runs/{run}/export?serie=true", "unknown query parameter 'serie'"),
        ("/v1/runs/{run}/report?series=true", "'series': this route takes series_buckets"),
        ("/v1/runs?b=1&a=2", "unknown query parameters 'a', 'b': this route takes none"),
        ("/v1/runs/{run}?x=1", "this route takes none"),
        # which one counts is no client's guess: the first was taken
        (
            "/v1/runs/{run}/report?series_buckets=100&series_buckets=200",
            "'series_buckets' given more than once",
        ),
    ],
)
async def test_a_query_parameter_a_route_does_not_take_is_refused(api: Api, path: str, words: str) -> None:
    """`?gate_threshold=0.9` on an export answered 200 with the run's own threshold, as if it had been
    taken; a typo (`?serie=true`) left the block out without a word. Each route takes what the OpenAPI
    document declares for it."""
    run_id = await ended_run(api)
    status, answer = await api.get(path.format(run=run_id))
    assert status == 400 and answer["error"] == "invalid_query" and words in answer["reason"], answer
    status, _ = await api.get(f"/v1/runs/{run_id}/export?series_buckets=200")
    assert status == 200
    status, missing = await api.get("/v1/no-such-route?x=1")
    assert status == 404, missing  # an unknown route is its own 404


async def test_the_coordinator_serves_the_run_report(api: Api) -> None:
    """``GET /v1/runs/ID/report``: the page, built from the export with its series block; a bad query is a
    400 and an unknown run a 404, both JSON."""
    run_id = await ended_run(api)
    response = await api.client.get(f"/v1/runs/{run_id}/report?series_buckets=300")
    assert response.status == 200 and response.content_type == "text/html"
    page = await response.text()
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    assert data["windows"]["id"] == ["w1"] and data["bucket_s"] == pytest.approx(10 / 300)
    assert data["columns"]["n0_power"]["v"][:3] == [10.0, 10.0, 10.0]
    assert "vegaEmbed" in page and f"({run_id})" in page
    status, refused = await api.get(f"/v1/runs/{run_id}/report?series_buckets=1")
    assert status == 400 and refused["error"] == "invalid_query"
    status, missing = await api.get("/v1/runs/run-nope/report")
    assert status == 404 and missing["error"] == "not_found"


async def test_the_run_report_makes_the_windows_once(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page reads the windows the export's digest pass made (every pass is handed to the tap, so the
    count is the windows made: they were made twice), and is the page of the export made whole."""
    made = count_windows_made(monkeypatch, FirstPass)
    async with node_api(tmp_path / "c.db") as api:
        client, clock = api.client, api.clock
        run_id = str((await (await client.post("/v1/runs", json={"name": "many"})).json())["id"])
        starts = [T0 + 2 * S + k * S // 300 for k in range(1200)]
        windows = [
            {"id": f"w{k}", "phase": "timed", "t_start_ns": t, "t_end_ns": t + S}
            for k, t in enumerate(starts)
        ]
        assert (await client.post(f"/v1/runs/{run_id}/windows", json={"windows": windows})).status == 201
        clock[0] = T0 + 10 * S
        assert (await client.post(f"/v1/runs/{run_id}/end")).status == 200
        response = await client.get(f"/v1/runs/{run_id}/report?series_buckets=100")
        page = await response.text()
        assert response.status == 200 and sum(made) == 1200, made
        reader = Store(tmp_path / "c.db")
        try:
            export = export_run(reader, run_id, ["n1"], lambda: clock[0], series_buckets=100)
        finally:
            reader.close()
        assert page == build_page(plain(export), Assets())
        data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
        assert data["windows"]["id"] == [f"w{k}" for k in range(1200)]
