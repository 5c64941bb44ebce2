"""What the coordinator refuses, as users meet it on the command line: a coordinator whose port is taken
exits with one line and leaves no database behind (and an existing one untouched), and a harness file
imported after `sparkwatch run` ended the run is taken when its requests lie inside the run, refused with
the run's end named when they do not."""

from __future__ import annotations

import json
import pathlib
import socket
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.cli import sparkwatch
from helpers.processes import Coordinator, free_port
from sparkwatch.core.windows import Window
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow
from sparkwatch_agent.shared.server_limits import ENV_MAX_CONNECTIONS

S = 1_000_000_000


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port some other program listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def coordinator_on(tmp_path: pathlib.Path, db: pathlib.Path, port: int) -> Any:
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.n0]\nurl = "ws://127.0.0.1:9"\n')
    return sparkwatch("coordinator", "--nodes", str(nodes), "--db", str(db), "--listen", f"127.0.0.1:{port}")


def test_a_coordinator_whose_port_is_taken_leaves_no_database(
    tmp_path: pathlib.Path, taken_port: int
) -> None:
    db = tmp_path / "data" / "sparkwatch.db"
    db.parent.mkdir()
    result = coordinator_on(tmp_path, db, taken_port)
    assert result.returncode == 75  # held for now: the unit starts it again, 5 s later
    assert result.stderr == (
        f"sparkwatch: error: cannot listen on 127.0.0.1:{taken_port}: Address already in use\n"
    )
    assert list(db.parent.iterdir()) == []  # no database, no -wal, no -shm


def test_a_run_whose_proxy_port_is_taken_stops_before_a_coordinator_starts(
    tmp_path: pathlib.Path, taken_port: int
) -> None:
    """It started the embedded coordinator and dialled the nodes first (their lines before the error)."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.n0]\nurl = "ws://127.0.0.1:9"\n')
    db = tmp_path / "run.db"
    listen = f"127.0.0.1:{taken_port}"
    args = ("--proxy-upstream", "http://127.0.0.1:9", "--proxy-listen", listen, "--db", str(db))
    result = sparkwatch("--log-level", "info", "run", "--nodes", str(nodes), *args, "--", "true")
    assert result.returncode == 75 and not db.exists()
    assert result.stderr == f"sparkwatch: error: cannot listen on {listen}: Address already in use\n"


def test_a_start_that_fails_after_the_database_was_made_removes_it(tmp_path: pathlib.Path) -> None:
    """A bad server limit is found only when the API starts, after the store was opened: the file this
    start made goes again."""
    db = tmp_path / "data" / "sparkwatch.db"
    db.parent.mkdir()
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.n0]\nurl = "ws://127.0.0.1:9"\n')
    args = ("coordinator", "--nodes", str(nodes), "--db", str(db), "--listen", f"127.0.0.1:{free_port()}")
    result = sparkwatch(*args, env={ENV_MAX_CONNECTIONS: "many"})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"sparkwatch: error: {ENV_MAX_CONNECTIONS} must be an integer")
    assert list(db.parent.iterdir()) == []


def test_a_coordinator_whose_port_is_taken_leaves_an_existing_database_as_it_was(
    tmp_path: pathlib.Path, taken_port: int
) -> None:
    db = tmp_path / "data" / "sparkwatch.db"
    db.parent.mkdir()
    store = Store(db)
    store.create_run(RunRow("r1", "kept", 1_800_000_000 * S, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("w1", "timed", 1_800_000_000 * S, 1_800_000_001 * S)])
    store.close()
    before = {path.name: path.read_bytes() for path in db.parent.iterdir()}
    assert list(before) == ["sparkwatch.db"]
    result = coordinator_on(tmp_path, db, taken_port)
    assert result.returncode == 75 and result.stderr.count("\n") == 1, result.stderr
    assert {path.name: path.read_bytes() for path in db.parent.iterdir()} == before  # byte for byte


def test_a_second_coordinator_on_a_database_in_use_is_refused_and_changes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    """A `sparkwatch run --db` given a standing coordinator's file linked the same agents and stored every
    sample twice (an export counted 98 samples of a 5 s run at 10 Hz). The file is one coordinator's: the
    second, standing or embedded, stops in one line that names the holder; the first goes on; once it
    stops, the file is free."""
    first = Coordinator(tmp_path, '[nodes.n0]\nurl = "ws://127.0.0.1:9"\n')
    first.start()
    try:
        assert first.proc is not None
        before = first.call("GET", "/v1/runs")
        (tmp_path / "second").mkdir()
        second = coordinator_on(tmp_path / "second", first.db, free_port())
        held = f"database {first.db} is in use by another sparkwatch coordinator (pid {first.proc.pid})"
        hint = "stop it, or give this one a --db of its own (a `sparkwatch run` can use the standing one:"
        assert second.returncode == 2
        assert second.stderr == f"sparkwatch: error: {held}: {hint} --coordinator URL)\n"
        wrapped = sparkwatch("run", "--nodes", str(first.nodes), "--db", str(first.db), "--", "true")
        assert wrapped.returncode == 2 and wrapped.stderr.count("\n") == 1 and held in wrapped.stderr
        assert first.call("GET", "/v1/runs") == before and first.proc.poll() is None
    finally:
        first.stop()
    (tmp_path / "again").mkdir()
    again = Coordinator(tmp_path / "again", '[nodes.n0]\nurl = "ws://127.0.0.1:9"\n')
    again.db = first.db
    again.start()  # the lock went with the first
    again.stop()


REQUESTS = textwrap.dedent(
    """
    import sys, time
    rows = ["id,phase,t_start_ns,t_end_ns,completion_tokens"]
    for i in range(3):
        start = time.time_ns()
        time.sleep(0.05)
        rows.append(f"req-{i},timed,{start},{time.time_ns()},16")
    open(sys.argv[1], "w").write("\\n".join(rows) + "\\n")
    """
)


def test_a_harness_file_imported_after_the_run_lands_in_it_and_a_later_one_is_refused(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    coord = Coordinator(tmp_path, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    env = {"SPARKWATCH_COORDINATOR": coord.url, "SPARKWATCH_TOKEN_FILE": str(coord.token)}
    script, results, out = tmp_path / "bench.py", tmp_path / "results.csv", tmp_path / "run.json"
    script.write_text(REQUESTS)
    try:
        ran = sparkwatch("run", "-o", str(out), "--", sys.executable, str(script), str(results), env=env)
        assert ran.returncode == 0, ran.stderr
        run = json.loads(out.read_text())["run"]
        assert run["t_end_ns"] is not None  # the run has ended: the import below comes later
        imported = sparkwatch("import", "plain", str(results), "--run", run["id"], env=env)
        _, after_import = coord.call("GET", f"/v1/runs/{run['id']}")

        late = tmp_path / "late.csv"
        start = run["t_end_ns"] + 60 * S  # a request served a minute after the run ended
        late.write_text(f"id,phase,t_start_ns,t_end_ns\nlate-1,timed,{start},{start + S}\n")
        refused = sparkwatch("import", "plain", str(late), "--run", run["id"], env=env)
        _, after_refusal = coord.call("GET", f"/v1/runs/{run['id']}")
        mark = coord.call("POST", f"/v1/runs/{run['id']}/marks", {"name": "m", "event": "begin"})
    finally:
        coord.stop()
    assert imported.returncode == 0, imported.stderr
    assert after_import["windows"] == 3
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"HTTP 409: run {run['id']} ended at " in refused.stderr
    assert refused.stderr.startswith(f"sparkwatch: error: {late} (plain): nothing imported: "), refused.stderr
    assert f"(t_end_ns {run['t_end_ns']})" in refused.stderr and "'late-1'" in refused.stderr
    assert after_refusal["windows"] == 3  # nothing of the refused file
    assert mark[0] == 409 and mark[1]["error"] == "run_ended"
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            'token_file = "{missing}"\n',
            "nodes.n0.token_file: cannot read token file {missing}: No such file or directory",
        ),
        (
            '[nodes.n0.meter]\nkind = "shelly"\nurl = "http://127.0.0.1:9"\npassword_file = "{missing}"\n',
            "nodes.n0.meter.password_file: cannot read the meter's secret file {missing}: No such file",
        ),
        (
            '[nodes.n0.meter]\nkind = "prometheus"\nurl = "http://127.0.0.1:9"\nquery = "up"\n'
            'bearer_token_file = "{empty}"\n',
            "nodes.n0.meter.bearer_token_file: the meter's secret file {empty} is empty",
        ),
        (
            '[engine]\nurl = "http://127.0.0.1:9/metrics"\nbearer_token_file = "{missing}"\n',
            "engine.bearer_token_file: cannot read the engine's bearer token file {missing}: No such file",
        ),
    ],
)
def test_a_secret_file_a_node_names_that_cannot_be_used_stops_the_start_in_one_line(
    tmp_path: pathlib.Path, table: str, said: str
) -> None:
    """Found at the start, naming the key (it used to be only a meter's warning at each poll, or a
    token-file line that did not say which node)."""
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.write_text("\n")
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.n0]\nurl = "ws://127.0.0.1:9"\n' + table.format(missing=missing, empty=empty))
    db = tmp_path / "data" / "sparkwatch.db"
    db.parent.mkdir()
    result = sparkwatch(
        "coordinator", "--nodes", str(nodes), "--db", str(db), "--listen", f"127.0.0.1:{free_port()}"
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert said.format(missing=missing, empty=empty) in result.stderr, result.stderr
    assert list(db.parent.iterdir()) == []
    wrapped = sparkwatch("run", "--nodes", str(nodes), "--db", str(db), "--", sys.executable, "-c", "pass")
    assert wrapped.returncode == 2 and said.format(missing=missing, empty=empty) in wrapped.stderr
    assert wrapped.stderr.count("\n") == 1, wrapped.stderr  # `run` embeds one: the same check, first


def _refused_start(tmp_path: pathlib.Path, node_lines: str) -> str:
    """A coordinator of one SSH node started with ``node_lines`` in its table: refused in one line, no
    database made; that line."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.n0]\nssh = "sparkwatch@127.0.0.1"\n{node_lines}\n')
    db = tmp_path / "sparkwatch.db"
    result = sparkwatch(
        "coordinator", "--nodes", str(nodes), "--db", str(db), "--listen", f"127.0.0.1:{free_port()}"
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert not db.exists()
    return result.stderr


@pytest.mark.parametrize("key", ["client_keys", "known_hosts"])
def test_an_ssh_nodes_key_file_that_cannot_be_read_stops_the_start_in_one_line(
    tmp_path: pathlib.Path, key: str
) -> None:
    """Before, the coordinator started and its link retried for ever, each time with asyncssh's error."""
    missing = tmp_path / "ssh" / "id_ed25519"
    value = f'["{missing}"]' if key == "client_keys" else f'"{missing}"'
    said = _refused_start(tmp_path, f"{key} = {value}")
    assert f"nodes.n0.{key}: cannot read {missing}: No such file or directory" in said


def test_a_known_hosts_file_ssh_cannot_parse_stops_the_start_in_one_line(tmp_path: pathlib.Path) -> None:
    """Before, it loaded, and the link redialled for ever with asyncssh's "Invalid known hosts entry",
    naming no file."""
    known = tmp_path / "known_hosts"
    known.write_text("garbage\n")
    said = _refused_start(tmp_path, f'known_hosts = "{known}"')
    assert f"nodes.n0.known_hosts: {known} is not a known_hosts file SSH can read: Invalid known" in said
