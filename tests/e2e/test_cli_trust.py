"""The CLI a shell script can trust (issue 16), through the real entry points: one agent listed twice is
refused, the measurement's quality decides `--strict`'s exit code, `--json` is one object on stdout,
Ctrl-C ends a run with its export (twice: at once, nothing left running, the data kept), wrong flags are
one line naming the flag, and proxy windows that could not be stored land in a file `import plain` takes."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from helpers.cli import nodes_toml, sparkwatch
from helpers.frames import T0, S, sample_frame
from helpers.processes import (
    TOKEN,
    Coordinator,
    alive,
    free_port,
    wait_connected,
    wait_for_file,
    wait_listening,
)
from sparkwatch.core.windows import Window
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr


def test_one_agent_listed_twice_is_refused_and_a_problem(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    """By one URL, the nodes file is refused as it is read; by two that reach it (an address and a name),
    the agent's boot id tells the nodes are one, when they are dialled."""
    agent = agent_factory("--backend", "sim", "--node", "left")
    same = nodes_toml(tmp_path, [agent, agent], names=["left", "right"])
    out = tmp_path / "run.json"
    refused = sparkwatch("run", "--nodes", str(same), "-o", str(out), "--", "true")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"nodes.right: the agent of nodes.left too (ws://127.0.0.1:{agent.port})" in refused.stderr
    nodes = tmp_path / "two-ways.toml"
    nodes.write_text(
        f'[nodes.left]\nurl = "ws://127.0.0.1:{agent.port}"\n[nodes.right]\nurl = "ws://localhost:{agent.port}"\n'
    )
    result = sparkwatch("run", "--nodes", str(nodes), "-o", str(out), "--", "true")
    assert result.returncode == 2, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("sparkwatch: error:")]
    assert len(error) == 1 and "nodes left and right share agent boot id" in error[0]
    # the coordinator is the command's own: its loopback URL of the moment means nothing to the user
    assert error[0].startswith("sparkwatch: error: POST /v1/runs on the command's own coordinator: HTTP 409:")
    assert "http://" not in error[0], error[0]
    assert not out.exists()
    check = sparkwatch("nodes", "check", "--nodes", str(nodes), "--wait", "10", "--json")
    assert check.returncode == 1
    by_node = {n["node"]: n for n in json.loads(check.stdout)["nodes"]}
    for name in ("left", "right"):
        assert any("share agent boot id" in p for p in by_node[name]["problems"]), by_node[name]
    # the entry called "right" reaches an agent that calls itself "left": a warning on that entry only
    assert any("calls itself 'left'" in w for w in by_node["right"]["warnings"])
    assert not any("calls itself" in w for w in by_node["left"]["warnings"])


def test_a_misnamed_agent_is_a_warning_not_a_refusal(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-7")
    nodes = nodes_toml(tmp_path, [agent], names=["spark-1"])
    result = sparkwatch("run", "--nodes", str(nodes), "-o", str(tmp_path / "r.json"), "--", "true")
    assert result.returncode == 0, result.stderr
    # said when the agent says hello (a standing coordinator's log said it only when a run was opened)
    assert "WARNING sparkwatch.links.state: node spark-1: its agent calls itself 'spark-7'" in (result.stderr)
    check = sparkwatch("nodes", "check", "--nodes", str(nodes), "--wait", "10")
    assert "warning spark-1: its agent calls itself 'spark-7'" in check.stdout
    assert "calls itself" not in check.stderr  # said once, in the check's own lines (it was also logged)


def test_strict_and_json_judge_a_run_without_timed_windows(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    nodes = str(nodes_toml(tmp_path, [agent]))
    out = tmp_path / "run.json"
    db = tmp_path / "kept.db"
    plain = sparkwatch("run", "--nodes", nodes, "--db", str(db), "-o", str(out), "--", "true")
    assert plain.returncode == 0, plain.stderr  # the command's code, by default
    unsound = "WARNING: measurement: 0 of 0 timed windows ok: no timed window was recorded"
    assert f"{unsound} (--scope run measures the whole run)" in plain.stdout
    # the same run exported again from its file: the all-n/a export is not written in silence
    again = sparkwatch("export", "--db", str(db), "-o", str(tmp_path / "again.json"))
    assert again.returncode == 0, again.stderr
    assert f"sparkwatch: {unsound}" in again.stderr
    chatty = ["sh", "-c", "echo the benchmark talks on stdout"]
    strict = sparkwatch("run", "--nodes", nodes, "-o", str(out), "--strict", "--json", "--", *chatty)
    assert strict.returncode == 3, strict.stderr
    outcome = json.loads(strict.stdout)  # the whole of stdout is one JSON object: CMD's went to stderr
    assert "the benchmark talks on stdout" in strict.stderr
    assert outcome["schema"] == "sparkwatch.outcome/1"
    assert outcome["exit_code"] == 3 and outcome["command_exit_code"] == 0
    assert outcome["quality"]["sound"] is False
    assert outcome["quality"]["problems"] == [
        "no timed window was recorded (--scope run measures the whole run)"
    ]
    assert outcome["figures_doubtful"] is False and outcome["doubtful_share_ratio"] is None  # none measured
    assert outcome["export"] == str(out) and json.loads(out.read_text())["run"]["id"] == outcome["run_id"]
    assert "gated GPU W" in strict.stderr  # the table went to stderr
    config = tmp_path / "config.toml"
    config.write_text("strict = true\n")
    by_config = sparkwatch(
        "run", "--nodes", nodes, "-o", str(out), "--", "true", env={"SPARKWATCH_CONFIG": str(config)}
    )
    assert by_config.returncode == 3
    config.write_text("strickt = true\n")
    typo = sparkwatch(
        "run", "--nodes", nodes, "-o", str(out), "--", "true", env={"SPARKWATCH_CONFIG": str(config)}
    )
    assert typo.returncode == 2 and "unknown key(s) strickt" in typo.stderr
    assert typo.stderr.count("\n") == 1


def test_run_takes_the_method_from_its_flags(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    out = tmp_path / "r.json"
    args = ["--scope", "run", "--gate-threshold", "0.25", "--phases", "warmup,timed", "--interval", "0.5"]
    result = sparkwatch(
        "run", "--nodes", str(nodes_toml(tmp_path, [agent])), *args, "-o", str(out), "--", "sleep", "1"
    )
    assert result.returncode == 0, result.stderr
    method = json.loads(out.read_text())["method"]
    assert (method["scope"], method["gate"]["threshold_ratio"], method["interval_s"]) == ("run", 0.25, 0.5)
    assert method["phases"] == ["timed", "warmup"]
    # the whole run is what was measured, not its (absent) windows; the idle sim's GPU is under the gate
    said = f"WARNING: measurement: the whole run ({method['scope_s']:.1f} s) on 0 of 1 nodes: "
    assert said in result.stdout and "no gated GPU power on n0" in result.stdout, result.stdout
    assert "timed windows ok" not in result.stdout


def test_strict_fails_a_run_whose_import_failed_but_a_failing_command_keeps_its_code(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    nodes = str(nodes_toml(tmp_path, [agent]))
    bad = tmp_path / "bad.csv"
    bad.write_text("id,phase\nx,timed\n")
    args = ("run", "--nodes", nodes, "-o", str(tmp_path / "r.json"), "--strict", "--json")
    result = sparkwatch(*args, "--import", f"plain:{bad}", "--", "true")
    assert result.returncode == 3
    problems = json.loads(result.stdout)["quality"]["problems"]
    assert any(p.startswith(f"import failed: {bad} (plain)") for p in problems), problems
    # the archived export says so too: it read like a run that had no windows
    notes = json.loads((tmp_path / "r.json").read_text())["run"]["notes"]
    assert any(n.startswith(f"import of {bad} (plain) failed: ") for n in notes), notes
    failing = sparkwatch(*args, "--", "sh", "-c", "exit 5")
    assert failing.returncode == 5  # the command's own failure wins over the measurement's


def _start_run(tmp_path: pathlib.Path, nodes: str, *command: str) -> subprocess.Popen[str]:
    scratch = tmp_path / "tmp"  # its temporary folder (a database kept after a second Ctrl-C): not /tmp's
    scratch.mkdir(exist_ok=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}, "TMPDIR": str(scratch)}
    return subprocess.Popen(
        [sys.executable, "-m", "sparkwatch", "run", "--nodes", nodes, "-o", str(tmp_path / "r.json"),
         "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_ctrl_c_ends_the_run_with_its_export(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    started = tmp_path / "started"
    proc = _start_run(tmp_path, str(nodes_toml(tmp_path, [agent])), "sh", "-c", f"touch {started}; sleep 60")
    wait_for_file(started)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    _no_traceback(stderr)
    export = json.loads((tmp_path / "r.json").read_text())
    assert export["run"]["command"]["exit_code"] == 130  # sh died of the SIGINT relayed to its group
    assert "measurement:" in stdout and "gated GPU W" in stdout


def test_sigterm_while_run_waits_for_the_hellos_unwinds_as_ctrl_c_does(tmp_path: pathlib.Path) -> None:
    """Before the run opened, SIGTERM killed `run` where it stood: exit -15, no word, and the embedded
    coordinator's temporary database (a 7.6 MB WAL in a trial) left in the temporary folder."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    nodes = tmp_path / "ghost.toml"
    nodes.write_text('[nodes.ghost]\nurl = "ws://127.0.0.1:9"\n')  # the discard port: refused, waited for
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkwatch", "run", "--nodes", str(nodes), "--wait", "60",
         "-o", str(tmp_path / "r.json"), "--", "true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:  # the wait has begun
        if "more for node ghost to say hello" in line:
            break
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    _no_traceback(stderr)
    assert stderr.endswith("sparkwatch: interrupted\n")  # not a silent exit
    assert list(scratch.iterdir()) == [] and not (tmp_path / "r.json").exists()


def test_a_second_ctrl_c_quits_at_once_kills_the_command_and_keeps_the_data(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    pid_file = tmp_path / "pid"
    stubborn = f'trap "" INT; sleep 120 & echo $! > {pid_file}; wait'  # ignores the first Ctrl-C
    proc = _start_run(tmp_path, str(nodes_toml(tmp_path, [agent])), "sh", "-c", stubborn)
    wait_for_file(pid_file)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # still waiting for the command, which ignored it
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - t0 < 5, stderr
    _no_traceback(stderr)
    sleeper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(sleeper):  # killed with its group (reaped by init a moment later)
        assert time.monotonic() < deadline, "the command's child outlived sparkwatch"
        time.sleep(0.05)
    kept = [line for line in stderr.splitlines() if "the run's database is kept at" in line]
    assert len(kept) == 1, stderr
    db = pathlib.Path(kept[0].split("kept at ")[1].split(";")[0])
    assert db.exists()
    assert [f.name for f in (tmp_path / "tmp").iterdir()] == [db.parent.name]  # no empty folder beside it
    store = Store.read_only(db)
    try:
        (run,) = store.runs()
    finally:
        store.close()
    # ended with what it wrapped, as any run is: the second Ctrl-C's SIGKILL is the command's end (the run
    # was ended with no command at all, and read as one no command ran under)
    assert run.t_end_ns is not None and json.loads(run.command or "null") == {
        "argv": ["sh", "-c", stubborn],
        "exit_code": 128 + signal.SIGKILL,  # as a shell says it, as a command killed otherwise is
    }
    with pytest.raises(OSError):
        (tmp_path / "r.json").read_text()  # no export: it quit at once
    lease = json.loads(_get(f"{agent.url}/v1/interval"))
    assert lease["leases"] == []  # released on the way out


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return bytes(r.read())


def test_ctrl_c_during_the_demo_exports_without_a_traceback(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "run.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkwatch", "demo", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # Ctrl-C while the first timed request streams
        said.append(line)
        if "request 1 (warm-up) done" in line:
            break
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    stdout, rest = proc.communicate(timeout=60)
    stderr = "".join(said) + rest
    assert proc.returncode == 130, stderr
    _no_traceback(stderr)
    assert "client disconnected mid-stream" in stderr or "client_disconnected" in out.read_text()
    assert json.loads(out.read_text())["run"]["id"] and "measurement:" in stdout
    assert "truth" not in stdout + stderr  # of whole timed requests: not the table's, which has none whole


@pytest.mark.parametrize(
    ("args", "flag", "usage"),
    [
        (["run", "--interval", "61", "--", "true"], "--interval", "sparkwatch run"),
        (["run", "--interval", "0.001", "--", "true"], "--interval", "sparkwatch run"),
        (["run", "--gate-threshold", "1.5", "--", "true"], "--gate-threshold", "sparkwatch run"),
        (["run", "--proxy-upstream", "ftp://h:1", "--", "true"], "--proxy-upstream", "sparkwatch run"),
        (["run", "--proxy-upstream", "http://h:99999", "--", "true"], "--proxy-upstream", "sparkwatch run"),
        (["run", "--proxy-listen", "127.0.0.1:http", "--", "true"], "--proxy-listen", "sparkwatch run"),
        (["run", "--coordinator", "localhost:8750", "--", "true"], "--coordinator", "sparkwatch run"),
        (["proxy", "--upstream", "http://h:0"], "--upstream", "sparkwatch proxy"),
        # aiohttp refused user:password@ beside the client's Authorization: every request was a 500
        (["proxy", "--upstream", "http://u:key@h:1"], "--upstream", "sparkwatch proxy"),
        # the path went after the query: every request was the upstream's 404
        (["run", "--proxy-upstream", "http://h:1/?k=v", "--", "true"], "--proxy-upstream", "sparkwatch run"),
        (["coordinator", "--nodes", "n", "--listen", "h:abc"], "--listen", "sparkwatch coordinator"),
        (["coordinator", "--nodes", "n", "--retain-idle", "30s"], "--retain-idle", "sparkwatch coordinator"),
        (["coordinator", "--nodes", "n", "--retain-idle", "7w"], "--retain-idle", "sparkwatch coordinator"),
        (["demo", "--nodes", "0"], "--nodes", "sparkwatch demo"),
        (["run", "--phases", "timed,Warm", "--", "true"], "--phases", "sparkwatch run"),
        (["run", "--spill", "unsent.txt", "--", "true"], "--spill", "sparkwatch run"),
        (["run", "--name", "", "--", "true"], "--name", "sparkwatch run"),
        (["runs", "mark", "r", "m", "begin", "--phase", "Timed"], "--phase", "sparkwatch runs mark"),
        (["run", "--phases", "timed,timed", "--", "true"], "--phases", "sparkwatch run"),
        (["export", "--db", "x.db", "--phases", ""], "--phases", "sparkwatch export"),
        (["nodes", "check", "--wait", "-1"], "--wait", "sparkwatch nodes check"),
        (["run", "--nodes", "n.toml"], "give the benchmark command", "sparkwatch run"),
        # flags that were taken and then did nothing
        (["run", "--warmup", "1", "--", "true"], "--warmup is for the proxy", "sparkwatch run"),
        (["run", "--proxy-listen", "127.0.0.1:9", "--", "true"], "--proxy-listen is for", "sparkwatch run"),
        (["run", "--spill", "u.json", "--", "true"], "--spill keeps", "sparkwatch run"),
        (["run", "--nodes", "n", "--token-file", "t", "--", "true"], "--token-file is", "sparkwatch run"),
        (["proxy", "--upstream", "http://h:1", "--spill", "u.json"], "--spill keeps", "sparkwatch proxy"),
        # read as host h:8750 and port 1
        (["coordinator", "--nodes", "n", "--listen", "h:8750:1"], "--listen", "sparkwatch coordinator"),
        (["proxy", "--upstream", "http://h:1", "--listen", "::1:5"], "or [IPV6]:PORT", "sparkwatch proxy"),
        # sent as user "a" with the wrong password, or as no one
        (["coordinator", "--nodes", "n", "--remote-write-basic-auth-user", "a:b"],
         "--remote-write-basic-auth-user: must not contain ':'", "sparkwatch coordinator"),
        (["export", "--prometheus", "http://h:1", "--basic-auth-user", ""],
         "--basic-auth-user: must not be empty", "sparkwatch export"),
        # read the engine for hours, saying nothing
        (["export", "--prometheus", "http://h:1", "--windows", "w.csv", "--start", "1e9", "--end", "2e9"],
         "spans more than 31 days (11,574.1 days)", "sparkwatch export"),
        # - made a file named -
        (["run", "-o", "-", "--", "true"], "-o/--output: - is not standard output", "sparkwatch run"),
        (["demo", "-o", "-"], "-o/--output: - is not standard output", "sparkwatch demo"),
        (["report", "x.json", "-o", "-"], "-o/--output: - is not standard output", "sparkwatch report"),
        (["attach", "x.json", "--lmx", "p.json", "-o", "-"], "- is not standard output", "sparkwatch attach"),
    ],
)  # fmt: skip
def test_a_wrong_flag_names_itself_and_its_subcommand(args: list[str], flag: str, usage: str) -> None:
    result = sparkwatch(*args, timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr  # one line, no usage
    assert result.stderr.startswith(f"{usage}: error:") and flag in result.stderr, result.stderr
    assert result.stderr.endswith(f" (see `{usage} --help`)\n"), result.stderr


def test_proxy_windows_that_cannot_be_stored_are_spilled_for_import_plain(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    coord = Coordinator(tmp_path, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    try:
        wait_connected(coord, 1)
        _, run = coord.call("POST", "/v1/runs", {"name": "spill"})
        model_port, proxy_port = free_port(), free_port()
        model = subprocess.Popen(
            [sys.executable, "-m", "sparkwatch", "sim-model", "--listen", f"127.0.0.1:{model_port}",
             "--tokens-per-s", "500"], stderr=subprocess.DEVNULL,
        )  # fmt: skip
        spill = tmp_path / "unsent.json"
        proxy = subprocess.Popen(
            [sys.executable, "-m", "sparkwatch", "proxy", "--upstream", f"http://127.0.0.1:{model_port}",
             "--listen", f"127.0.0.1:{proxy_port}", "--run", run["id"], "--coordinator", coord.url,
             "--token-file", str(coord.token), "--spill", str(spill)],
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_listening(proxy_port)
            wait_listening(model_port)
            coord.kill9()  # the coordinator goes away: the proxy's windows cannot be stored
            for _ in range(2):
                _chat(f"http://127.0.0.1:{proxy_port}")
            proxy.send_signal(signal.SIGINT)
            _out, stderr = proxy.communicate(timeout=60)
        finally:
            model.terminate()
            model.wait(10)
        assert proxy.returncode == 1, stderr
        assert f"2 window(s) could not be stored: 2 kept in {spill}" in stderr
        coord.start()  # the same database: the run is still open
        imported = sparkwatch(
            "import", "plain", str(spill), "--run", run["id"], "--coordinator", coord.url,
            "--token-file", str(coord.token),
        )  # fmt: skip
        assert imported.returncode == 0, imported.stderr
        _, stored = coord.call("GET", f"/v1/runs/{run['id']}")
        assert stored["windows"] == 2
        _, export = coord.call("GET", f"/v1/runs/{run['id']}/export")
        assert [w["completion_tokens"] for w in export["windows"]] == [8, 8]
    finally:
        coord.stop()
    assert TOKEN not in spill.read_text()


def _chat(base: str) -> None:
    import urllib.request

    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True,
         "stream_options": {"include_usage": True}}
    ).encode()  # fmt: skip
    req = urllib.request.Request(f"{base}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def test_a_coordinator_lost_mid_run_is_exit_4_and_said_in_json(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    coord = Coordinator(tmp_path, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    started = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkwatch", "run", "--coordinator", coord.url,
         "--token-file", str(coord.token), "--json", "-o", str(tmp_path / "r.json"),
         "--", "sh", "-c", f"touch {started}; sleep 2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        wait_for_file(started)
        coord.kill9()  # the run can be neither ended nor exported
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        coord.stop()
    assert proc.returncode == 4, stderr  # the command succeeded, but there is no export to trust
    _no_traceback(stderr)
    assert "could not be ended and exported" in stderr
    outcome = json.loads(stdout)
    assert outcome["export"] is None and outcome["exit_code"] == 4 and outcome["command_exit_code"] == 0
    assert outcome["figures_doubtful"] is None and outcome["doubtful_share_ratio"] is None  # nothing judged
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("what", ["schema", "export"])
def test_a_reader_that_leaves_early_ends_the_output_quietly(what: str, tmp_path: pathlib.Path) -> None:
    """`sparkwatch export --db F | head`: the reader goes before the export is written; the command stops
    with a shell's SIGPIPE status (128 + 13) and says nothing more (no error line, no traceback)."""
    args = ["schema"]
    if what == "export":
        db = tmp_path / "c.db"
        store = Store(db)
        store.set_nodes(["n1"])
        gpu = {"power_w": 50.0, "util_ratio": 0.9}
        store.ingest("n1", "b1", [sample_frame(s, {**gpu, "energy_j": 5.0 * s}) for s in range(1, 60)])
        store.create_run(RunRow("r", "r", T0, None, 0.1, 0.5, "request"))
        store.add_windows("r", [Window("w", "timed", T0 + S, T0 + 3 * S)])
        store.end_run("r", T0 + 6 * S)
        store.close()
        args = ["export", "--db", str(db), "r"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkwatch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child (still starting up) writes a byte
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGPIPE, stderr
    _no_traceback(stderr)
    assert "error" not in stderr, stderr


def test_a_reader_that_leaves_mid_export_ends_it_with_sigpipes_status(tmp_path: pathlib.Path) -> None:
    """`sparkwatch export --db F | head -c 10` on an export larger than a pipe holds: the reader goes while
    the write is under way. The write came back short, the rest was dropped and the command exited 0."""
    db = tmp_path / "c.db"
    store = Store(db)
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(s, {"power_w": 50.0, "util_ratio": 0.9}) for s in range(1, 600)])
    store.create_run(RunRow("r", "r", T0, None, 0.1, 0.5, "request"))
    store.add_windows(
        "r", [Window(f"w{k}", "timed", T0 + k * S // 10, T0 + (k + 5) * S // 10) for k in range(500)]
    )
    store.end_run("r", T0 + 60 * S)
    store.close()
    line = (
        f"{sys.executable} -m sparkwatch export --db {db} r | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}"
    )
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == str(128 + signal.SIGPIPE), done.stderr
    _no_traceback(done.stderr)
    assert "error" not in done.stderr, done.stderr
    whole = subprocess.run(
        [sys.executable, "-m", "sparkwatch", "export", "--db", str(db), "r"], capture_output=True
    )
    assert (
        len(whole.stdout) > 4 * 65536 and json.loads(whole.stdout)["run"]["id"] == "r"
    )  # larger than a pipe


def test_no_output_replaces_a_file_the_command_reads(tmp_path: pathlib.Path) -> None:
    """Each wrote its JSON over the file and exited 0: the token named by $SPARKWATCH_TOKEN_FILE (which
    the coordinator then refused to start with, mode 0644), a `hardware --nodes` nodes file, an export
    --prometheus windows file, and the export `attach --lmx` was given as its payload."""
    token, nodes, windows = tmp_path / "coordinator.token", tmp_path / "nodes.toml", tmp_path / "w.json"
    token.write_text("t" * 32 + "\n")
    token.chmod(0o600)
    agent_token = tmp_path / "a1.token"  # a file the nodes file names: `run -o a1.token` wrote over it
    agent_token.write_text("a" * 32 + "\n")
    agent_token.chmod(0o600)
    nodes.write_text('[nodes.a]\nurl = "http://127.0.0.1:9"\ntoken_file = "a1.token"\n')
    windows.write_text('{"windows": []}')
    export = tmp_path / "run.json"
    export.write_text("{}")
    env = {"SPARKWATCH_TOKEN_FILE": str(token), "SPARKWATCH_COORDINATOR": "http://127.0.0.1:9"}
    span = ["--start", "2026-01-01T00:00:00Z", "--end", "2026-01-01T01:00:00Z"]
    for args, said in (
        (["run", "-o", str(token), "--", "true"], "is the coordinator's token file itself"),
        (
            ["runs", "export", "r1", "-o", str(token)],
            "is the coordinator's token file ($SPARKWATCH_TOKEN_FILE)",
        ),
        (["hardware", "-o", str(token)], "is the coordinator's token file ($SPARKWATCH_TOKEN_FILE)"),
        (["hardware", "--nodes", str(nodes), "-o", str(nodes)], "is the nodes file (--nodes) itself"),
        (
            ["run", "--nodes", str(nodes), "-o", str(agent_token), "--", "true"],
            "is nodes.a.token_file, a file the nodes file names",
        ),
        (
            ["hardware", "--nodes", str(nodes), "-o", str(agent_token)],
            "is nodes.a.token_file, a file the nodes file names",
        ),
        (
            [
                "export",
                "--prometheus",
                "http://127.0.0.1:9",
                "--windows",
                str(windows),
                *span,
                "-o",
                str(windows),
            ],
            "is the windows file (--windows) itself",
        ),
        (["attach", str(export), "--lmx", str(export)], f"--lmx {export} is the export itself"),
    ):
        result = sparkwatch(*args, env=env, timeout=60)
        assert result.returncode == 2 and said in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
    assert token.read_text() == "t" * 32 + "\n" and (token.stat().st_mode & 0o777) == 0o600
    assert nodes.read_text().startswith("[nodes.a]") and windows.read_text() == '{"windows": []}'
    assert export.read_text() == "{}" and agent_token.read_text() == "a" * 32 + "\n"


def test_an_error_quoting_control_characters_stays_one_line(tmp_path: pathlib.Path) -> None:
    """`runs delete $'a\\nb'` printed its 404 on two lines, and an escape sequence in a name reached the
    terminal; a missing import file was found only after the coordinator was asked (and was unreachable)."""
    env = {"SPARKWATCH_COORDINATOR": "http://127.0.0.1:9"}  # nothing listens: never reached
    result = sparkwatch("import", "plain", str(tmp_path / "a\nb\x1b[31m.csv"), "--run", "r", env=env)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    shown = str(tmp_path).encode("unicode_escape").decode()  # the path as given, its escapes written out
    assert result.stderr == f"sparkwatch: error: {shown}/a\\nb\\x1b[31m.csv: no such file\n"


@pytest.mark.parametrize("closed", [1, 2])
def test_a_command_with_a_closed_standard_stream_runs_and_measures(
    tmp_path: pathlib.Path, agent_factory: Any, closed: int
) -> None:
    """`sparkwatch run … 2>&-` never ran the command: Python started with sys.stderr None, and the first
    message was an AttributeError (exit 1, nothing said, the run left open on a standing coordinator); with
    `>&-` the export was written, then a traceback. A closed stream is /dev/null now, for both programs;
    but a probe, whose one output is stdout, says it cannot write it there (exit 74), as a stdio stream
    refuses to start."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    out = tmp_path / "run.json"
    argv = ["run", "--scope", "run", "--nodes", str(nodes_toml(tmp_path, [agent])), "-o", str(out)]
    argv += ["--", sys.executable, "-c", "import time; time.sleep(0.5)"]
    probe = [sys.executable, "-m", "sparkwatch_agent", "probe", "--backend", "sim"]
    for program in ([sys.executable, "-m", "sparkwatch", *argv], probe):
        result = subprocess.run(
            program, capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.close(closed)
        )
        expected = 74 if program is probe and closed == 1 else 0
        assert result.returncode == expected, (program, result.stdout, result.stderr)
        _no_traceback(result.stdout + result.stderr)  # the open one of the two
    assert json.loads(out.read_text())["run"]["t_end_ns"] is not None
    said = result.stderr if closed == 1 else result.stdout  # the probe's other stream still works
    assert said
