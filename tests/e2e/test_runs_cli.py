"""`sparkwatch runs ...` against a real coordinator and sim agent, and `sparkwatch export --db` on the files a
coordinator and `sparkwatch run --db` leave behind — all through the real entry point, as subprocesses."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pathlib
import re
import sqlite3
import subprocess
import sys
import time
from typing import Any

import jsonschema
import pytest

from helpers.cli import sparkwatch as cli
from helpers.processes import Coordinator, free_port, sim_load, wait_connected
from sparkwatch.client import CoordinatorClient, CoordinatorTarget
from sparkwatch.commands.run import run_command
from sparkwatch.commands.run_options import RunOptions
from sparkwatch.commands.wrapped import command_env
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.windows import Window
from sparkwatch.defaults import OPEN_RUN_NOTE
from sparkwatch.outputs import size_text
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow
from sparkwatch_agent.hardware.sim import SimSpec

SPEC = SimSpec()
RUN_ID = re.compile(r"run-\d{8}-\d{6}-[0-9a-f]{6}")


def one_line_refusal(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, result
    assert result.stderr.startswith("sparkwatch: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for part in parts:
        assert part in result.stderr, (part, result.stderr)


def state_of(folder: pathlib.Path) -> dict[str, tuple[str, int]]:
    """Every file in ``folder`` with its sha256 and mtime: what an export must leave as it was."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.fixture
def standing(agent_factory: Any, tmp_path: pathlib.Path) -> Any:
    agent = agent_factory("--backend", "sim", "--node", "spark-1")
    (tmp_path / "coord").mkdir()  # the coordinator's files alone in a folder: an export must add none
    coord = Coordinator(tmp_path / "coord", f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    wait_connected(coord, 1)
    env = {"SPARKWATCH_COORDINATOR": coord.url, "SPARKWATCH_TOKEN_FILE": str(coord.token)}
    yield coord, agent, env
    coord.stop()


def _export_open_then_end_with_a_mark_open(env: dict[str, str], run_id: str, coord: Coordinator) -> None:
    live = cli("runs", "export", run_id, env=env)  # still open: the export says so, and so does the CLI
    assert live.returncode == 0 and f"warning: run {run_id} is still open: exported up to now" in live.stderr
    assert json.loads(live.stdout)["run"]["notes"] == [OPEN_RUN_NOTE]
    assert cli("runs", "mark", run_id, "forgotten", "begin", env=env).returncode == 0
    for k in range(6):  # a script's marks, never ended: 2000 of them were one 24 kB line
        assert coord.call("POST", f"/v1/runs/{run_id}/marks", {"name": f"m{k}", "event": "begin"})[0] == 201
    finished = cli("runs", "end", run_id, env=env)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith(f"run {run_id} (by-hand) ended after ")
    said = "warning: mark(s) still open, dropped without a window: forgotten, m0, m1, m2, m3 and 2 more\n"
    assert finished.stderr.endswith(said), finished.stderr


def test_a_run_by_hand_open_mark_end_export_list_and_offline(standing: Any, tmp_path: pathlib.Path) -> None:
    coord, agent, env = standing
    opened = cli("runs", "open", "--name", "by-hand", "--interval", "0.05", env=env)
    assert opened.returncode == 0, opened.stderr
    run_id = opened.stdout.strip()
    assert opened.stdout == f"{run_id}\n" and RUN_ID.fullmatch(run_id)  # ID=$(sparkwatch runs open) works
    assert f"run {run_id} (by-hand) open on {coord.url}" in opened.stderr
    time.sleep(1.0)  # idle (util 0) inside the run, before any window: a run-scope re-export sees it
    sim_load(agent, 1.0)
    time.sleep(0.3)
    # the flags work as well as the environment
    flags = ["--coordinator", coord.url, "--token-file", str(coord.token)]
    # (one CLI start-up fewer inside req-1: on a loaded 2-core machine each can starve the 20 Hz sampler)
    assert cli("runs", "mark", run_id, "cold", "begin", "--phase", "warmup", env=env).returncode == 0
    begun = cli("runs", "mark", run_id, "req-1", "begin", *flags)
    assert begun.returncode == 0 and f"mark req-1 (timed) begun in run {run_id}" in begun.stdout
    time.sleep(1.0)
    t_called_ns = time.time_ns()
    ended = cli("runs", "mark", run_id, "req-1", "end", env=env)
    took_ns = time.time_ns() - t_called_ns
    assert ended.returncode == 0 and "mark req-1 ended: a window of" in ended.stdout
    assert cli("runs", "mark", run_id, "cold", "end", env=env).returncode == 0
    time.sleep(0.3)
    sim_load(agent, 0.0)
    # refusals: the API's reason on one line, exit 2; a usage mistake is argparse's
    one_line_refusal(cli("runs", "mark", run_id, "req-1", "end", env=env), "HTTP 404", "no open mark 'req-1'")
    wrong_phase = cli("runs", "mark", run_id, "x", "end", "--phase", "warmup", env=env)
    assert wrong_phase.returncode == 2 and "argument --phase: only with begin" in wrong_phase.stderr
    bad_phase = cli(
        "runs", "mark", run_id, "x", "begin", "--phase", "Warm Up", env=env
    )  # refused by the flag
    assert bad_phase.returncode == 2 and "sparkwatch runs mark: error: argument --phase: must match" in (
        bad_phase.stderr
    )

    _export_open_then_end_with_a_mark_open(env, run_id, coord)
    one_line_refusal(cli("runs", "end", run_id, env=env), "HTTP 409", "already ended")
    one_line_refusal(cli("runs", "show", "run-nope", env=env), "HTTP 404", "no run run-nope")

    _list_and_show(coord, env, run_id)
    # no more samples or clock probes from here on: an export of an ended run still takes in the node's
    # first clock probe after the end (up to 10 s later), so online and offline are compared on one state
    agent.stop()
    out = tmp_path / "online.json"
    exported = cli("runs", "export", run_id, "-o", str(out), env=env)
    assert exported.returncode == 0 and exported.stdout == "", exported.stderr
    online = json.loads(out.read_text())
    jsonschema.validate(online, run_schema())
    assert "notes" not in online["run"] and "warning" not in exported.stderr  # ended: no such note
    assert "sparkwatch: measurement: 1 of 1 timed window ok on 1 of 1 nodes\n" in exported.stderr
    assert json.loads(cli("runs", "export", run_id, env=env).stdout) == online  # stdout without -o
    table = cli("runs", "export", run_id, "--table", env=env)  # as `export --db --table` prints it
    assert table.returncode == 0 and "gated GPU W" in table.stdout and "{" not in table.stdout, table.stderr
    assert table.stdout.endswith("measurement: 1 of 1 timed window ok on 1 of 1 nodes\n")
    assert sorted((w["id"], w["phase"], w["in_scope"]) for w in online["windows"]) == [
        ("cold", "warmup", False),
        ("req-1", "timed", True),
    ]
    (node,) = online["nodes"]
    busy_w = SPEC.idle_w + SPEC.busy_slope_w
    assert node["power_w"]["gated_mean"] == pytest.approx(busy_w, rel=0.01)
    req_1 = online["windows"][[w["id"] for w in online["windows"]].index("req-1")]
    assert req_1["verdict"] == "ok"
    # dated back to when the `mark … end` process started, not when its POST arrived after its start-up
    assert req_1["t_end_ns"] - t_called_ns < took_ns / 2, (req_1["t_end_ns"] - t_called_ns, took_ns)

    _offline_matches_online(coord, tmp_path, run_id, online, busy_w)


def _list_and_show(coord: Coordinator, env: dict[str, str], run_id: str) -> None:
    second = cli("runs", "open", env=env).stdout.strip()  # still open: the list shows both states
    listed = cli("runs", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    header, rule, *rows = listed.stdout.splitlines()
    assert header.split() == ["id", "name", "state", "start", "(UTC)", "end", "(UTC)", "windows", "samples"]
    assert set(rule) == {"-"}
    as_json = json.loads(cli("runs", "list", "--json", env=env).stdout)
    answer = coord.call("GET", "/v1/runs")[1]

    def unsized(runs: dict[str, Any]) -> list[dict[str, Any]]:  # a size moves as samples arrive
        return [{k: v for k, v in r.items() if k != "size_bytes"} for r in runs["runs"]]

    assert unsized(as_json) == unsized(answer)
    sizes = {r["id"]: size_text(r["size_bytes"]).split() for r in as_json["runs"]}
    assert rows[0].split()[:3] == [run_id, "by-hand", "ended"]
    assert rows[0].split()[-3:] == ["2", *sizes[run_id]] and as_json["runs"][0]["size_bytes"] > 0
    assert rows[1].split()[:3] == [second, "manual", "open"] and rows[1].split()[-4:-2] == ["-", "0"]
    shown = cli("runs", "show", run_id, env=env).stdout
    assert re.search(r"^windows +2$", shown, re.M) and re.search(r"^state +ended$", shown, re.M)
    assert re.search(r"^interval +0\.05 s$", shown, re.M)
    assert json.loads(cli("runs", "show", run_id, "--json", env=env).stdout)["windows"] == 2
    assert cli("runs", "end", second, env=env).returncode == 0


def _offline_matches_online(
    coord: Coordinator, tmp_path: pathlib.Path, run_id: str, online: dict[str, Any], busy_w: float
) -> None:
    # while the coordinator runs (its write-ahead log in use), then after it stopped (log checkpointed away)
    live = cli("export", "--db", str(coord.db), run_id)
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout) == online
    coord.stop()
    before = state_of(coord.db.parent)
    newest = cli("export", "--db", str(coord.db))  # the newest run is the second one (opened later)
    assert newest.returncode == 0 and "the newest of 2 runs in it" in newest.stderr
    assert json.loads(newest.stdout)["run"]["id"] != run_id
    offline = cli("export", "--db", str(coord.db), run_id, "-o", str(tmp_path / "offline.json"))
    assert offline.returncode == 0 and offline.stdout == "", offline.stderr
    assert json.loads((tmp_path / "offline.json").read_text()) == online
    # recomputed: the whole run, every sample counted (the idle second before the window pulls it down)
    again = cli("export", "--db", str(coord.db), run_id, "--scope", "run", "--gate-threshold", "0")
    assert again.returncode == 0 and "recomputed with gate 0 and scope run" in again.stderr
    method = json.loads(again.stdout)["method"]
    assert method["scope"] == "run" and method["gate"]["threshold_ratio"] == 0
    assert method["scope_s"] > online["method"]["scope_s"]
    assert json.loads(again.stdout)["nodes"][0]["power_w"]["gated_mean"] < busy_w - 5
    table = cli("export", "--db", str(coord.db), run_id, "--table")
    assert table.stdout.startswith(f"run {run_id} (by-hand): 1 measured window(s) of 2")
    # ended by the quality line `run` ends its table with (it was left out)
    assert table.stdout.splitlines()[-1].startswith(("measurement: ", "WARNING: measurement: ")), table.stdout
    for onto in (coord.db, coord.db.with_name(coord.db.name + "-wal")):  # the running coordinator's own
        one_line_refusal(cli("export", "--db", str(coord.db), run_id, "-o", str(onto)), " itself: what is")
    assert state_of(coord.db.parent) == before  # nothing written, not even a -wal or -shm beside it
    one_line_refusal(cli("export", "--db", str(coord.db), "run-nope"), f"no run run-nope in {coord.db}")


def test_runs_refusals_name_the_coordinator(tmp_path: pathlib.Path) -> None:
    port = free_port()
    down = cli("runs", "list", "--coordinator", f"http://127.0.0.1:{port}")
    one_line_refusal(down, f"cannot reach the coordinator at http://127.0.0.1:{port}: Connection refused")
    assert "ssl:default" not in down.stderr  # aiohttp's words for any URL, plain http too
    # `runs` needs a standing coordinator: nothing about starting one of its own, which `hardware` can
    assert down.stderr.endswith(
        "(is `sparkwatch coordinator` running there? its URL: --coordinator or $SPARKWATCH_COORDINATOR)\n"
    ), down.stderr
    embeds = cli("hardware", "--coordinator", f"http://127.0.0.1:{port}")
    one_line_refusal(embeds, "; or let this command start its own: --nodes nodes.toml)")
    env = {"SPARKWATCH_COORDINATOR": f"http://127.0.0.1:{port}"}
    one_line_refusal(cli("runs", "open", env=env), f"http://127.0.0.1:{port}")
    flag = cli("runs", "list", "--coordinator", "ftp://x")  # the flag: the parser's one line names it
    assert flag.returncode == 2 and flag.stderr.count("\n") == 1, flag.stderr
    assert flag.stderr.startswith("sparkwatch runs list: error: argument --coordinator: must be an http://")
    one_line_refusal(
        cli("runs", "list", env={"SPARKWATCH_COORDINATOR": "ftp://x"}), "must start with http://"
    )
    bad = cli("runs", "open", "--interval", "0", "--coordinator", f"http://127.0.0.1:{port}")
    assert bad.returncode == 2 and "--interval" in bad.stderr  # refused before anything is sent
    for url in (f"http://u:SECRETPW@127.0.0.1:{port}", f"http://127.0.0.1:{port}/?api_key=SECRETPW"):
        refused = cli("runs", "list", "--coordinator", url)  # before: sent, and the secret echoed
        one_line_refusal(refused, "coordinator URL must not carry credentials, a query or a fragment")
        assert "SECRETPW" not in refused.stdout + refused.stderr


def test_run_db_exports_offline_as_the_run_wrote_it(agent_factory: Any, tmp_path: pathlib.Path) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    db, written = tmp_path / "run.db", tmp_path / "run.json"
    ran = cli("run", "--nodes", str(nodes), "--db", str(db), "-o", str(written), "--", "sleep", "1")
    assert ran.returncode == 0, ran.stderr
    export = cli("export", "--db", str(db), "--series", "--table", "-o", str(tmp_path / "again.json"))
    assert export.returncode == 0, export.stderr
    assert "the only run in it" in export.stderr
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(written.read_text())  # series too
    assert f"report written to {tmp_path / 'run.report.html'}" in ran.stderr  # run writes it by default
    assert export.stdout.strip() and export.stdout.strip() in ran.stdout  # the table `run` printed
    whole = json.loads(cli("export", "--db", str(db), "--scope", "run", "--gate-threshold", "0").stdout)
    # no windows: the run's own scope measures nothing, the whole run measures the idle sim GPU
    assert json.loads(written.read_text())["nodes"][0]["power_w"]["gated_mean"] is None
    assert whole["nodes"][0]["power_w"]["gated_mean"] == pytest.approx(SPEC.idle_w, rel=0.01)


def test_export_refuses_what_is_not_a_sparkwatch_database(tmp_path: pathlib.Path) -> None:
    one_line_refusal(cli("export", "--db", str(tmp_path / "missing.db")), "no database at")
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.close()
    empty = tmp_path / "empty.db"
    Store(empty).close()  # a sparkwatch database before its first run
    before = state_of(tmp_path)
    one_line_refusal(cli("export", "--db", str(text)), f"{text} is not a sparkwatch database")
    one_line_refusal(cli("export", "--db", str(other)), f"{other} is not a sparkwatch database")
    one_line_refusal(cli("export", "--db", str(tmp_path)), "is a folder")
    one_line_refusal(cli("export", "--db", str(empty)), f"{empty} holds no runs")
    assert state_of(tmp_path) == before
    bad_gate = cli("export", "--db", str(other), "--gate-threshold", "1.5")
    assert bad_gate.returncode == 2 and "--gate-threshold" in bad_gate.stderr


def test_a_url_that_answers_json_of_another_shape_is_one_line_and_writes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    """`--coordinator` naming some other service: every answer the CLI reads is checked for the keys it
    uses (``runs export -o`` for the export's ``schema``) and a run id is one path segment, so ``../nodes``
    asks for that run and not for another route."""
    from aiohttp import web

    from helpers.app_thread import AppThread

    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.raw_path)
        if request.raw_path == "/v1/runs" and request.method == "POST":
            return web.json_response({"id": 42}, status=201)
        if request.raw_path == "/v1/runs":
            return web.json_response({"runs": 5})
        if request.raw_path.endswith("/export"):
            return web.json_response({"schema": "nope"})
        if request.raw_path.endswith("/deep"):  # past json's recursion limit: a RecursionError traceback
            return web.Response(text="[" * 100_000 + "]" * 100_000, content_type="application/json")
        return web.json_response({"weird": 1} if "list" not in request.raw_path else [1, 2])

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    server = AppThread(app, free_port())
    server.start()
    assert server.ready.wait(10)
    url = f"http://127.0.0.1:{server.port}"
    try:
        one_line_refusal(cli("runs", "list", "--coordinator", url), "GET /v1/runs at", "not a sparkwatch")
        one_line_refusal(cli("runs", "show", "X", "--coordinator", url), "'id' missing or of another type")
        one_line_refusal(
            cli("runs", "show", "deep", "--coordinator", url), "the answer is JSON nested too deep"
        )
        one_line_refusal(cli("runs", "show", "list", "--coordinator", url), "not a sparkwatch coordinator")
        one_line_refusal(cli("runs", "show", "../nodes", "--coordinator", url), "not a sparkwatch")
        assert "/v1/runs/..%2Fnodes" in asked and "/v1/nodes" not in asked
        out = tmp_path / "x.json"
        done = cli("runs", "export", "X", "-o", str(out), "--coordinator", url)
        one_line_refusal(done, "not a sparkwatch.run/1 export")
        assert not out.exists() and list(tmp_path.iterdir()) == []
        # 2xx answers the commands that change something read (a KeyError traceback each, before)
        opened = cli("runs", "open", "--coordinator", url)
        one_line_refusal(opened, "POST /v1/runs at", "'id' missing or of another type")
        assert opened.stdout == ""  # no id for ID=$(sparkwatch runs open) to take
        one_line_refusal(cli("runs", "end", "X", "--coordinator", url), "POST /v1/runs/X/end at")
        one_line_refusal(cli("runs", "delete", "X", "--coordinator", url), "DELETE /v1/runs/X at")
        one_line_refusal(cli("runs", "mark", "X", "m", "begin", "--coordinator", url), "/marks at")
        one_line_refusal(cli("runs", "mark", "X", "m", "end", "--coordinator", url), "/marks at")
        windows = tmp_path / "w.json"
        windows.write_text('{"windows": [{"id": "r", "phase": "timed", "t_start_ns": 1796443700000000000,'
                           ' "t_end_ns": 1796443701000000000}]}')  # fmt: skip
        one_line_refusal(
            cli("import", "plain", str(windows), "--run", "X", "--coordinator", url), "GET /v1/runs/X at"
        )
        one_line_refusal(cli("run", "--coordinator", url, "--", "true"), "GET /v1/nodes at")
    finally:
        server.stop()


def _one_run(path: pathlib.Path) -> pathlib.Path:
    """A database of one node at 40 W, busy, for 30 s, and one ended run r1 with one timed window w1."""
    from helpers.frames import T0, sample_frame
    from sparkwatch.core.clock import ClockOffset
    from sparkwatch.store.run_rows import RunRow

    store = Store(path, now_ns=lambda: T0 + 30 * 10**9)
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(i, {"power_w": 40.0, "util_ratio": 0.9}) for i in range(1, 300)])
    store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=T0)
    store.create_run(RunRow("r1", "one", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("w1", "timed", T0 + 5 * 10**9, T0 + 9 * 10**9)])
    store.end_run("r1", T0 + 29 * 10**9)
    store.close()
    return path


def test_a_window_stored_before_a_text_rule_still_reads(tmp_path: pathlib.Path) -> None:
    """The rules of a window's text (one line, no bidirectional override) came after windows were stored
    under the older ones: such a window still reads, and its run exports (the figures' rules are checked)."""
    path = _one_run(tmp_path / "c.db")
    with sqlite3.connect(path) as db:  # as an older sparkwatch took it
        db.execute("UPDATE windows SET id = 'w' || char(8238) || '1', finish_reason = 'stop' || char(10)")
    out = tmp_path / "out.json"
    done = cli("export", "--db", str(path), "-o", str(out))
    assert done.returncode == 0, done.stderr
    (window,) = json.loads(out.read_text())["windows"]
    assert window["id"] == "w\u202e1" and window["nodes"][0]["energy_j"] is not None


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("UPDATE windows SET source = 'not json'", "damaged window 'w1' in the database: its source is not"),
        (
            "UPDATE windows SET t_end_ns = t_start_ns - 1",
            "damaged window 'w1' in the database: it ends before",
        ),
        (
            "UPDATE sample_blocks SET data = 'xx'",
            "damaged sample block 1 of node n1 (boot b1): a str, not a blob",
        ),
        # counts and stamps the figures rest on: -50 tokens made a J/token three times too high, 'abc' a
        # traceback, an import marked committed 'yes' or a window of an import not there hid windows
        (
            "UPDATE windows SET completion_tokens = -50",
            "damaged window 'w1' in the database: completion_tokens: must be a non-negative 64-bit integer",
        ),
        (
            "UPDATE windows SET prompt_tokens = 'abc'",
            "damaged window 'w1' in the database: prompt_tokens 'abc' is not an integer",
        ),
        (
            "UPDATE windows SET t_start_ns = 'abc'",
            "damaged window 'w1' in the database: t_start_ns 'abc' is not",
        ),
        (
            "UPDATE windows SET http_status = 7",
            "damaged window 'w1' in the database: http_status: 7 is not an",
        ),
        (
            "UPDATE windows SET t_first_token_ns = t_end_ns + 1",
            "damaged window 'w1' in the database: t_first_token_ns:",
        ),
        # rules the figures and the export's schema rest on: a phase of 'Timed' left the window out of
        # every figure with exit 0, and a stamp of 1 made an export its own schema refuses
        ("UPDATE windows SET phase = 'Timed'", "damaged window 'w1' in the database: phase: 'Timed' must"),
        (
            "UPDATE windows SET t_start_ns = 1",
            "damaged window 'w1' in the database: t_start_ns: 1 is not Unix",
        ),
        (
            'UPDATE windows SET source = \'{"upstream_error": "yes"}\'',
            "damaged window 'w1' in the database: source.upstream_error: must be true or false",
        ),
        (
            "INSERT INTO imports VALUES ('i1', 'r1', 0, 0, 'yes')",
            "import 'i1' of run r1 is damaged in the database: committed 'yes' is not 0 or 1",
        ),
        (
            "UPDATE windows SET import_id = 'nope'",
            "damaged window 'w1' in the database: its import 'nope' is not in it",
        ),
    ],
)
def test_a_database_whose_rows_were_damaged_is_one_line_and_writes_nothing(
    tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """Rows this store would never write (an edited or damaged file): a traceback each, or for a window
    ending before it starts an export of nothing with exit 0, before."""
    path = _one_run(tmp_path / "c.db")
    assert cli("export", "--db", str(path), "-o", str(tmp_path / "whole.json")).returncode == 0
    assert json.loads((tmp_path / "whole.json").read_text())["nodes"][0]["power_w"]["gated_mean"] == 40.0
    db = sqlite3.connect(path)
    db.execute(damage)
    db.commit()
    db.close()
    out = tmp_path / "out.json"
    done = cli("export", "--db", str(path), "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    *_progress, last = done.stderr.splitlines()  # after the line that says which run it exports
    assert last.startswith("sparkwatch: error: ") and said in last, done.stderr
    assert not out.exists()


def test_the_wrapped_command_posts_its_own_marks_to_its_run(
    standing: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run` on a standing coordinator tells CMD its run, the coordinator and the --token-file given, made
    absolute (SPARKWATCH_RUN_ID, _COORDINATOR, _TOKEN_FILE): a benchmark script marks its own requests with
    `runs mark` (a new user found no way to learn the run's id, and then a relative token file lost once
    the script changed directory). A mark it leaves open is said. With `--nodes`, CMD learns the run's id
    alone: the embedded coordinator's token is never handed to it."""
    coord, _agent, _env = standing
    mark = f"{sys.executable} -m sparkwatch runs mark"
    script = tmp_path / "bench.sh"
    script.write_text(  # in another directory: the token file given relative still reads
        f'#!/bin/sh\nset -e\ncd /\n{mark} "$SPARKWATCH_RUN_ID" req-1 begin\nsleep 0.5\n'
        f'{mark} "$SPARKWATCH_RUN_ID" req-1 end\n{mark} "$SPARKWATCH_RUN_ID" left begin\n'
    )
    script.chmod(0o755)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    out = tmp_path / "r.json"
    args = ["run", "--coordinator", coord.url, "--token-file", coord.token.name, "-o", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "sparkwatch", *args, "--", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=bare,
        cwd=coord.token.parent,
    )
    assert done.returncode == 0, done.stderr
    export = json.loads(out.read_text())
    (window,) = export["windows"]
    assert (window["id"], window["phase"], window["source"]["kind"]) == ("req-1", "timed", "mark")
    assert 0.4e9 < window["t_end_ns"] - window["t_start_ns"] < 5e9
    # a mark left open is dropped at the run's end, and said (it was said in the coordinator's log alone)
    dropped = "mark(s) still open when the run ended, dropped without a window: left"
    assert f"sparkwatch: note: {dropped}" in done.stderr and dropped in export["run"]["notes"]
    monkeypatch.setenv("SPARKWATCH_COORDINATOR", coord.url)  # a standing coordinator's, not the run's
    monkeypatch.setenv("SPARKWATCH_TOKEN_FILE", str(coord.token))
    embedded = command_env("run-x", None, None)
    assert embedded["SPARKWATCH_RUN_ID"] == "run-x"
    assert "SPARKWATCH_COORDINATOR" not in embedded and "SPARKWATCH_TOKEN_FILE" not in embedded


async def test_a_runs_own_export_waits_for_the_samples_up_to_its_end(
    standing: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sparkwatch run` waited for its nodes to catch up to a moment before it ended the run, then
    exported at once: the sample that closes the run's last interval could still be on its way, and a
    later `runs export` of the same run measured one interval more, with another digest. It now ends the
    run first and waits for the samples up to the end's own stamp."""
    coord, _, _ = standing
    calls: list[tuple[str, int]] = []
    end_run, wait = CoordinatorClient.end_run, CoordinatorClient.wait_caught_up

    async def ending(self: CoordinatorClient, run_id: str, command: Any = None) -> dict[str, Any]:
        ended = await end_run(self, run_id, command)
        calls.append(("end", ended["t_end_ns"]))
        return ended

    async def waiting(self: CoordinatorClient, t_wall_ns: int, *args: Any, **kwargs: Any) -> list[str]:
        behind = await wait(self, t_wall_ns, *args, **kwargs)
        calls.append(("caught up", t_wall_ns))
        return behind

    monkeypatch.setattr(CoordinatorClient, "end_run", ending)
    monkeypatch.setattr(CoordinatorClient, "wait_caught_up", waiting)
    own, err = tmp_path / "own.json", io.StringIO()
    target = CoordinatorTarget(coord.url, coord.token.read_text().strip())
    opts = RunOptions(["sleep", "1"], target=target, scope="run", interval_s=0.5, output=own, report=False)
    assert await run_command(dataclasses.replace(opts, stderr=err)) == 0, err.getvalue()
    (_, end_ns), last = calls[-2], calls[-1]
    assert calls[-2][0] == "end" and last == ("caught up", end_ns), calls  # up to the end, after it
    exported = json.loads(own.read_text())
    async with CoordinatorClient(target) as client:
        later = await client.export(exported["run"]["id"])
    assert later["nodes"][0]["samples"] == exported["nodes"][0]["samples"]
    assert later["lmx"]["notes"] == exported["lmx"]["notes"]  # it quotes the digest: the same measurement


def test_a_run_ended_by_someone_else_is_still_exported(standing: Any, tmp_path: pathlib.Path) -> None:
    """`sparkwatch runs end ID` while `sparkwatch run` still ran: its own end was refused (409 run_ended) and
    it exited 4 with no export, though the run and its samples were there. It exports the run as it was
    ended, and says so."""
    coord, _, env = standing
    out = tmp_path / "r.json"
    ends_it = 'sleep 1; sparkwatch runs end "$SPARKWATCH_RUN_ID"; sleep 3'
    result = cli(
        "run", "--token-file", str(coord.token), "--scope", "run", "--no-report", "-o", str(out),
        "--", "sh", "-c", f"PATH={pathlib.Path(sys.executable).parent}:$PATH; {ends_it}",
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    note = "the run was ended by someone else while the command ran; its end is theirs"
    assert f"sparkwatch: note: {note}" in result.stderr
    export = json.loads(out.read_text())
    assert note in export["run"]["notes"] and export["run"]["command"] is None  # theirs: no outcome given
    # at their end (1 s and a CLI's start-up, which a loaded machine may stretch), not the command's (≥ 4 s)
    assert 0.9 < (export["run"]["t_end_ns"] - export["run"]["t_start_ns"]) / 1e9 < 3.9


def test_an_export_of_a_damaged_run_row_is_one_line_and_writes_nothing(tmp_path: pathlib.Path) -> None:
    """A row edited outside sparkwatch: before, a TypeError's traceback (``interval_s = 'abc'``), or a run
    gated at 7 (no API accepts it) exported as if sound."""
    db = tmp_path / "c.db"
    store = Store(db)
    try:
        store.create_run(RunRow("r1", "edited", 1_800_000_000 * 10**9, None, 0.1, 0.5, "request"))
    finally:
        store.close()
    for column, stored, said in (("interval_s", "abc", "interval_s 'abc'"), ("gate_threshold", 7, "7.0")):
        sqlite3.connect(db).execute(f"UPDATE runs SET {column} = ?", (stored,)).connection.commit()
        out = tmp_path / "out.json"
        one_line_refusal(cli("export", "--db", str(db), "r1", "-o", str(out)), "run r1 is damaged", said)
        assert not out.exists()
        sqlite3.connect(db).execute(
            "UPDATE runs SET interval_s = 0.1, gate_threshold = 0.5"
        ).connection.commit()


def test_a_damaged_run_row_leaves_the_other_runs_listed_exported_and_itself_deletable(
    standing: Any, tmp_path: pathlib.Path
) -> None:
    """One run row edited by hand made `runs` a 409 for every run, a coordinator restarted on the file
    refused to start, and its deletion never finished (its span was a ValueError): the way out was sqlite3."""
    coord, _agent, env = standing
    token = ["--token-file", str(coord.token)]
    sound, edited = (
        cli("runs", "open", "--name", name, *token, env=env).stdout.split()[0] for name in ("sound", "edited")
    )
    for run in (sound, edited):
        assert cli("runs", "end", run, *token, env=env).returncode == 0
    with sqlite3.connect(coord.db) as db:
        db.execute("UPDATE runs SET interval_s = 'abc' WHERE id = ?", (edited,))
    listed = cli("runs", "list", *token, env=env)
    assert listed.returncode == 0 and sound in listed.stdout and edited not in listed.stdout, listed
    assert listed.stderr == (
        f"sparkwatch: run {edited} is damaged in the database: interval_s 'abc' is not in [0.01, 60.0]"
        f" seconds (mend the row, or remove the run: sparkwatch runs delete {edited})\n"
    )
    out = tmp_path / "sound.json"
    assert cli("export", "--db", str(coord.db), sound, "-o", str(out)).returncode == 0
    assert json.loads(out.read_text())["run"]["id"] == sound
    newest = cli("export", "--db", str(coord.db), "-o", str(tmp_path / "newest.json"))  # no guess around it
    one_line_refusal(newest, f"run {edited} is damaged in the database: interval_s 'abc'")
    coord.stop()
    coord.start()  # a restart on the file
    wait_connected(coord, 1)
    deleted = cli("runs", "delete", edited, *token, env=env)
    assert deleted.returncode == 0 and deleted.stdout == f"deleted run {edited} (0 windows)\n", deleted
    for _ in range(100):
        with sqlite3.connect(coord.db) as db:
            if not db.execute("SELECT COUNT(*) FROM runs WHERE id = ?", (edited,)).fetchone()[0]:
                break
        time.sleep(0.05)
    else:
        raise AssertionError(f"run {edited}'s row is still in the file")
    again = cli("runs", "list", *token, env=env)
    assert again.stderr == "" and sound in again.stdout
