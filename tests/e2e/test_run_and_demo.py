"""The README's commands as users run them: `sparkwatch demo`, `sparkwatch run -- CMD` with the proxy and an
import around real agent processes, `sparkwatch hardware`, and their one-line refusals."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import textwrap
import time
from typing import Any

import jsonschema
import pytest

from helpers.cli import nodes_toml, sparkwatch
from helpers.processes import Coordinator, free_port, wait_connected
from sparkwatch.commands.sim_drive import COLD_UTIL, MODEL_BYTES_PER_NODE, warm_util
from sparkwatch.core.export_schema import run_schema
from sparkwatch_agent.hardware.sim import SimSpec

GIB = 1024**3
SPEC = SimSpec()


def test_demo_measures_the_simulation_and_excludes_the_warmup(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "run.json"
    t0 = time.monotonic()
    result = sparkwatch("demo", "-o", str(out), timeout=90)
    elapsed = time.monotonic() - t0
    assert result.returncode == 0, result.stderr
    assert elapsed < 60, f"the demo took {elapsed:.1f} s"
    export = json.loads(out.read_text())
    jsonschema.validate(export, run_schema())
    assert len(export["nodes"]) == 4
    warmup = [w for w in export["windows"] if w["phase"] == "warmup"]
    timed = [w for w in export["windows"] if w["phase"] == "timed"]
    assert len(warmup) == 1 and len(timed) == 3
    assert not warmup[0]["in_scope"] and all(w["in_scope"] for w in timed)
    assert all(w["verdict"] == "ok" for w in timed), [w["reasons"] for w in timed]
    for i, node in enumerate(export["nodes"]):
        truth_w = SPEC.resident_idle_w + SPEC.busy_slope_w * warm_util(i)
        assert node["power_w"]["gated_mean"] == pytest.approx(truth_w, rel=0.02), node["node"]
        assert node["memory_used_bytes"]["peak"] == SPEC.base_used_bytes + MODEL_BYTES_PER_NODE
        # the warm-up was measured (at its own, higher power) and left out of the node figures
        cold_w = SPEC.resident_idle_w + SPEC.busy_slope_w * COLD_UTIL
        assert warmup[0]["nodes"][i]["power_w_gated_mean"] == pytest.approx(cold_w, rel=0.03)
    totals = export["totals"]
    assert totals["completion_tokens"] == 3 * 256
    assert totals["joules_per_token"] == pytest.approx(totals["energy_j"] / 768, rel=1e-3)
    assert totals["memory_used_bytes_peak_sum"] == 4 * (SPEC.base_used_bytes + MODEL_BYTES_PER_NODE)
    assert len(export["lmx"]["gpuPowerWatts"]) == 4
    assert "gated GPU W" in result.stdout and "simulation truth" in result.stdout


CLIENT = textwrap.dedent(
    """
    import json, sys, time, urllib.request
    proxy, agents, util, csv_path = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]), sys.argv[4]
    def post(url, body):
        req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()
    for a in agents:
        post(a + "/v1/sim/load", {"util_ratio": util})
    time.sleep(0.3)  # requests run on a steady load: no sampling interval inside a window straddles a change
    t0 = time.time_ns()
    for i in range(3):
        body = {"messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 40, "stream": True,
                "stream_options": {"include_usage": True}}
        assert post(proxy + "/v1/chat/completions", body).endswith(b"data: [DONE]\\n\\n")
    t1 = time.time_ns()
    time.sleep(0.3)
    for a in agents:
        post(a + "/v1/sim/load", {"util_ratio": 0.0})
    with open(csv_path, "w") as f:
        f.write(f"id,phase,t_start_ns,t_end_ns\\nwhole-client,timed,{t0},{t1}\\n")
    print("client done")
    sys.exit(3)
    """
)


def test_run_wraps_a_failing_command_with_proxy_and_import(
    tmp_path: pathlib.Path, agent_factory: Any, sim_model: str
) -> None:
    agents = [agent_factory("--backend", "sim", "--node", f"n{i}") for i in range(2)]
    nodes = nodes_toml(tmp_path, agents)
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    proxy_port = free_port()
    out = tmp_path / "run.json"
    csv = tmp_path / "extra.csv"
    result = sparkwatch(
        "run",
        "--nodes", str(nodes),
        "--proxy-upstream", sim_model,
        "--proxy-listen", f"127.0.0.1:{proxy_port}",
        "--warmup", "1",
        "--import", f"plain:{csv}",
        "-o", str(out),
        "--no-report",
        "--",
        sys.executable, str(client), f"http://127.0.0.1:{proxy_port}", ",".join(a.url for a in agents), "0.8",
        str(csv),
    )  # fmt: skip
    assert result.returncode == 3, result.stderr  # CMD's exit code
    # the URL is in the command, not {proxy}: said before the command starts (it may be the model server's)
    said = f"note: the command does not name {{proxy}}: only requests it sends to the proxy at http://127.0.0.1:{proxy_port}"
    assert said in result.stderr, result.stderr
    assert not (tmp_path / "run.report.html").exists() and "report written" not in result.stderr
    assert "client done" in result.stdout
    assert "FAILED with exit code 3" in result.stdout
    export = json.loads(out.read_text())
    jsonschema.validate(export, run_schema())
    assert "series" not in export  # --no-report: no plot data either
    assert export["run"]["command"]["exit_code"] == 3
    phases = sorted((w["phase"], w["source"]["kind"] if "kind" in w["source"] else w["source"]["format"])
                    for w in export["windows"])  # fmt: skip
    assert phases == [("timed", "plain"), ("timed", "proxy"), ("timed", "proxy"), ("warmup", "proxy")]
    proxied = [w for w in export["windows"] if w["source"].get("kind") == "proxy"]
    assert all(w["completion_tokens"] == 40 and w["finish_reason"] == "length" for w in proxied)
    for node in export["nodes"]:
        # sim GPU rail: 5 W idle (no model) + 50 W x 0.8 while the client held the load
        assert node["power_w"]["gated_mean"] == pytest.approx(SPEC.idle_w + SPEC.busy_slope_w * 0.8, rel=0.01)


#: CLIENT's requests, each written to the CSV as a harness would: the proxy's requests again.
REQUESTS_CLIENT = textwrap.dedent(
    """
    import json, sys, time, urllib.error, urllib.request
    proxy, agent, util, csv_path = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    def post(url, body):
        req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()
    post(agent + "/v1/sim/load", {"util_ratio": util})
    time.sleep(0.3)
    rows = ["id,phase,t_start_ns,t_end_ns"]
    for i in range(3):
        body = {"messages": [{"role": "user", "content": f"hello {i}"}], "max_tokens": 40, "stream": True,
                "stream_options": {"include_usage": True}}
        start = time.time_ns()
        assert post(proxy + "/v1/chat/completions", body).endswith(b"data: [DONE]\\n\\n")
        rows.append(f"r{i},timed,{start},{time.time_ns()}")
    post(agent + "/v1/sim/load", {"util_ratio": 0.0})
    try:  # a control request a harness sends (the simulated model has no such path: a 404, relayed)
        post(proxy + "/tokenize", {"prompt": "hello"})
    except urllib.error.HTTPError:
        pass
    with open(csv_path, "w") as f:
        f.write("\\n".join(rows) + "\\n")
    """
)


def test_a_harness_file_of_the_proxys_requests_is_not_imported_twice(
    tmp_path: pathlib.Path, agent_factory: Any, sim_model: str
) -> None:
    """The proxy and a harness file of the same requests both gave the run its windows: each request twice,
    its tokens counted twice, joules per token halved. A file whose windows repeat the proxy's is noted and
    not imported (the whole-client window of the test above is a window of its own: imported)."""
    agents = [agent_factory("--backend", "sim", "--node", "n0")]
    client = tmp_path / "client.py"
    client.write_text(REQUESTS_CLIENT)
    proxy_port = free_port()
    out, csv = tmp_path / "run.json", tmp_path / "requests.csv"
    result = sparkwatch(
        "run", "--nodes", str(nodes_toml(tmp_path, agents)), "--proxy-upstream", sim_model,
        "--proxy-listen", f"127.0.0.1:{proxy_port}", "--import", f"plain:{csv}", "-o", str(out),
        "--no-report", "--",
        sys.executable, str(client), "{proxy}", agents[0].url, "0.8", str(csv),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "does not name {proxy}" not in result.stderr  # it does: the proxy's URL replaced it
    assert len(csv.read_text().splitlines()) == 4  # the client's three requests
    export = json.loads(out.read_text())
    assert (
        sorted(w["source"].get("kind", w["source"].get("format")) for w in export["windows"]) == ["proxy"] * 3
    )
    (note,) = [n for n in export["run"]["notes"] if "repeat the proxy's" in n]
    assert (
        note.startswith(f"3 of the 3 window(s) in {csv} (plain) repeat the proxy's")
        and "not imported" in note
    )
    assert export["totals"]["completion_tokens"] == 3 * 40
    # the POST the proxy made no window for, said as a note of the run and kept in its export
    (untimed,) = [n for n in export["run"]["notes"] if "made no window for" in n]
    assert untimed.startswith("the proxy relayed 1 POST request(s) it made no window for (/tokenize ×1)")
    assert f"sparkwatch: note: {untimed}" in result.stderr


def test_run_refusals_are_one_line(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    result = sparkwatch("run", "--nodes", "nodes.toml")
    assert result.returncode == 2 and "give the benchmark command" in result.stderr
    result = sparkwatch("run", "--import", "bogus:file", "--", "true")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "unknown import format 'bogus'" in result.stderr
    result = sparkwatch("run", "--clock-anchor", "yesterday", "--import", "vllm:x.json", "--", "true")
    assert result.returncode == 2 and "--clock-anchor" in result.stderr
    # taken by vllm files alone: with any other it was ignored without a word
    result = sparkwatch("run", "--clock-anchor", "1:2", "--import", "plain:x.csv", "--", "true")
    assert result.stderr == (
        "sparkwatch run: error: --clock-anchor is for vllm files (their monotonic stamps), not for plain"
        " (see `sparkwatch run --help`)\n"
    )
    result = sparkwatch("run", "--clock-anchor", "1:2", "--", "true")  # it said "not for no import"
    assert result.stderr == (
        "sparkwatch run: error: --clock-anchor is for vllm files (their monotonic stamps), and no --import"
        " vllm:FILE was given (see `sparkwatch run --help`)\n"
    )
    result = sparkwatch("import", "plain", "x.csv", "--run", "r", "--clock-anchor", "1:2")
    assert result.returncode == 2 and "--clock-anchor is for vllm files" in result.stderr
    result = sparkwatch("run", "--import", "lmx-status:-", "--import", "lmx-status:-", "--", "true")
    assert result.stderr == "sparkwatch: error: --import lmx-status:- is given twice\n"
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "now.csv").write_text("")
    twice = ["--import", f"plain:{tmp_path}/f/now.csv", "--import", f"aiperf:{tmp_path}/f/../f/now.csv"]
    result = sparkwatch("run", *twice, "--", "true")  # it imported once, then failed the run's quality
    assert (
        result.stderr
        == f"sparkwatch: error: {' '.join(twice[2:])} names the file {' '.join(twice[:2])} names\n"
    )
    result = sparkwatch(
        "run", "--coordinator", "http://127.0.0.1:9", "--db", str(tmp_path / "x.db"), "--", "true"
    )
    assert result.returncode == 2 and "--db keeps the embedded coordinator's database" in result.stderr
    assert not (tmp_path / "x.db").exists()  # it was ignored without a word, before
    plain = tmp_path / "bench.sh"
    plain.write_text("#!/bin/sh\n")
    agent = agent_factory("--backend", "sim", "--node", "n0")
    out = tmp_path / "run.json"
    nodes = str(nodes_toml(tmp_path, [agent]))
    for missing, why in (
        ("/nonexistent/x", "no such file"),
        ("no-such-benchmark", "not found on PATH"),
        (str(plain), "it is not executable (chmod +x?)"),
        (str(tmp_path), "it is a folder"),  # was "no such file"
    ):
        result = sparkwatch("run", "--nodes", nodes, "-o", str(out), "--", missing, "--x")
        assert result.returncode == 2
        assert result.stderr == f"sparkwatch: error: cannot run {missing}: {why}\n"
    result = sparkwatch("run", "--nodes", nodes, "-o", str(out), "--", "", "--x")  # `-- "$BENCH"`, unset
    assert (result.returncode, result.stderr) == (
        2,
        "sparkwatch: error: cannot run '': the command's name is empty\n",
    )
    assert not out.exists()  # refused before a run was opened
    # an output over what the run reads or keeps: the export replaced it, exit 0, without a word
    result_file, db = tmp_path / "res.json", tmp_path / "keep.db"
    result_file.write_text("{}")
    for extra, said in (
        (["-o", nodes], f"-o {nodes} is the nodes file (--nodes) itself"),
        (["--db", str(db), "-o", str(db)], f"-o {db} is the database itself"),
        (
            ["--import", f"plain:{result_file}", "-o", str(result_file)],
            "is the plain file --import reads itself",
        ),
        (
            ["--proxy-upstream", "http://127.0.0.1:9", "-o", str(out), "--spill", str(out)],
            f"--spill {out} is the export (-o) itself",
        ),
    ):
        result = sparkwatch("run", "--nodes", nodes, *extra, "--", "true")
        assert result.returncode == 2 and said in result.stderr and result.stderr.count("\n") == 1, (
            result.stderr
        )
    assert result_file.read_text() == "{}" and not db.exists() and not out.exists()


def test_a_background_child_holding_stderr_does_not_hold_the_run(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    out = tmp_path / "run.json"
    nodes = str(nodes_toml(tmp_path, [agent]))
    t0 = time.monotonic()
    background = ["sh", "-c", "sleep 30 >/dev/null & exit 0"]  # sleep keeps our stderr pipe open
    result = sparkwatch(
        "run", "--nodes", nodes, "--import", "lmx-status:-", "-o", str(out), "--", *background
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - t0 < 20 and out.exists()


def test_hardware_for_the_cluster_from_the_nodes(tmp_path: pathlib.Path, agent_factory: Any) -> None:
    agents = [agent_factory("--backend", "sim", "--node", f"n{i}") for i in range(2)]
    out = tmp_path / "hardware.json"
    result = sparkwatch("hardware", "--nodes", str(nodes_toml(tmp_path, agents)), "-o", str(out))
    assert result.returncode == 0, result.stderr
    hw = json.loads(out.read_text())
    assert (hw["hwClass"], hw["chipVendor"], hw["chipFamily"]) == ("UNIFIED", "NVIDIA", "GB10")
    per_node_gb = round(SPEC.mem_total_bytes / GIB, 1)
    assert hw["unifiedMemoryGb"] == pytest.approx(2 * per_node_gb)
    assert f"kernel {platform.release()}" in hw["os"]  # read from the node, not typed by hand
    # the sim's GB10 beside this host's CPU and OS: said, so the record is not taken for a real machine's
    assert "warning: simulated node(s) n0, n1 (--backend sim)" in result.stderr


def test_hardware_with_a_node_down_is_one_line(tmp_path: pathlib.Path) -> None:
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.gone]\nurl = "ws://127.0.0.1:{free_port()}"\n')
    result = sparkwatch("hardware", "--nodes", str(nodes), "--wait", "1", timeout=60)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]  # after the link's own log lines
    assert last.startswith(
        "sparkwatch: error: node gone: no hardware report: cannot connect to 127.0.0.1:"
    ), last
    assert last.endswith(": Connection refused"), last


def test_hardware_from_a_standing_coordinator_says_which_agent_is_away(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """The coordinator keeps a node's last hello after its agent stops: the record is still made from it
    (what the node was), but the command says so (before, nothing)."""
    agents = [agent_factory("--backend", "sim", "--node", f"n{i}") for i in range(2)]
    coord = Coordinator(
        tmp_path, "".join(f'[nodes.n{i}]\nurl = "ws://127.0.0.1:{a.port}"\n' for i, a in enumerate(agents))
    )
    coord.start()
    try:
        wait_connected(coord, 2)
        agents[1].stop()
        deadline = time.monotonic() + 15
        while sum(n["connected"] for n in coord.call("GET", "/v1/nodes")[1]["nodes"]) != 1:
            assert time.monotonic() < deadline, "the link never noticed its agent stop"
            time.sleep(0.1)
        result = sparkwatch("hardware", "--coordinator", coord.url, "--token-file", str(coord.token))
    finally:
        coord.stop()
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["hwClass"] == "UNIFIED"
    assert "sparkwatch: warning: node n1 is not connected: its last hello is used" in result.stderr
    assert "node n0" not in result.stderr


LMX_LIKE = textwrap.dedent(
    """
    import json, sys, time
    def status(event, **fields):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(json.dumps({"event": event, "time": now, **fields}), file=sys.stderr, flush=True)
    status("speed_test_remote_start", baseUrl="http://127.0.0.1:1")
    status("endpoint_warmup_request", index=1, warmup=1)
    for iteration in (0, 1, 2):  # the warm-up, then two timed iterations of one request (lmx's events)
        time.sleep(0.05)
        status("first_token_received", ttftMs=50)
        time.sleep(0.3)
        if iteration:
            status("endpoint_iteration_complete", iteration=iteration, iterations=2, concurrency=1)
    print("not json on stderr", file=sys.stderr)
    """
)


def test_run_captures_lmx_json_status_from_the_command_stderr(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    script = tmp_path / "lmx_like.py"
    script.write_text(LMX_LIKE)
    out = tmp_path / "run.json"
    nodes = nodes_toml(tmp_path, [agent])
    result = sparkwatch(
        "run",
        "--nodes",
        str(nodes),
        "--import",
        "lmx-status:-",
        "-o",
        str(out),
        "--",
        sys.executable,
        str(script),
    )
    assert result.returncode == 0, result.stderr
    assert "not json on stderr" in result.stderr  # the command's stderr still reaches the user
    windows = json.loads(out.read_text())["windows"]
    assert sorted((w["id"], w["phase"]) for w in windows) == [
        ("lmx-it1-r1", "timed"),
        ("lmx-it2-r1", "timed"),
        ("lmx-warmup-1", "warmup"),
    ]
    for w in windows:  # no payload file: token counts unknown (tests/e2e/test_lmx_real.py has the rest)
        assert w["source"]["kind"] == "lmx-status" and w["completion_tokens"] is None
        assert 0.25 < (w["t_end_ns"] - w["t_start_ns"]) / 1e9 < 1.0  # arrival stamps, not whole seconds


def test_a_refused_import_still_ends_the_run_and_writes_the_export(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    csv = tmp_path / "w.csv"
    bench = tmp_path / "bench.py"  # the harness: writes its result file while the run is open
    again = tmp_path / "again.csv"  # the same windows in another file (the same --import twice is refused)
    bench.write_text(
        "import sys, time\nt = time.time_ns()\n"
        f"for f in ({str(csv)!r}, {str(again)!r}):\n"
        f"    open(f, 'w').write(f'id,phase,t_start_ns,t_end_ns\\nw1,timed,{{t}},{{t + 10**8}}\\n')\n"
    )
    out = tmp_path / "run.json"
    nodes = str(nodes_toml(tmp_path, [agent]))
    imports = ["--import", f"plain:{csv}", "--import", f"plain:{again}"]  # the second repeats window ids
    secret = ["--api-key", "sk-secret", "--token=abc"]
    command = [sys.executable, str(bench), *secret]
    result = sparkwatch("run", "--nodes", nodes, *imports, "-o", str(out), "--", *command)
    assert result.returncode == 0, result.stderr
    assert "skipped" in result.stderr and "HTTP 409" in result.stderr
    export = json.loads(out.read_text())
    assert [w["id"] for w in export["windows"]] == ["w1"]
    assert "sk-secret" not in export["run"]["name"] and "abc" not in export["run"]["name"]
    assert export["run"]["command"]["argv"] == [sys.executable, str(bench), "--api-key", "***", "--token=***"]
    assert "sk-secret" not in out.read_text()


def test_a_result_file_an_earlier_run_left_is_not_measured_as_this_runs(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """A harness that failed leaves last run's file in place: before, its windows were measured against
    this run (the run still open takes any window within 24 h) and `--strict` said 12 of 12 ok."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    csv = tmp_path / "w.csv"
    old = time.time_ns() - 60 * 10**9
    csv.write_text(f"id,phase,t_start_ns,t_end_ns\nw1,timed,{old},{old + 10**8}\n")
    nodes = str(nodes_toml(tmp_path, [agent]))
    args = ("run", "--nodes", nodes, "-o", str(tmp_path / "r.json"), "--strict", "--json")
    result = sparkwatch(*args, "--import", f"plain:{csv}", "--", "true")
    assert result.returncode == 3, result.stderr
    said = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert len(said) == 1 and "window 'w1'" in said[0] and "lies outside this run" in said[0], said
    assert "a result file an earlier run left behind, or a harness clock that is off?" in said[0]
    assert json.loads((tmp_path / "r.json").read_text())["windows"] == []


def test_an_unwritable_export_path_is_refused_before_anything_starts(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no-such-folder" / "run.json"
    result = sparkwatch("run", "--nodes", "absent.toml", "-o", str(missing), "--", "true")
    assert result.returncode == 2
    assert (
        result.stderr
        == f"sparkwatch: error: cannot write {missing}: folder {missing.parent} does not exist\n"
    )
    result = sparkwatch("demo", "-o", str(missing))
    assert result.returncode == 2 and "does not exist" in result.stderr


PROGRESS = textwrap.dedent(
    """
    import json, sys, time
    sys.stderr.write("\\r".join(f"progress {i}%" for i in range(20000)))  # 250 kB without a newline
    sys.stderr.write("\\n" + json.dumps({"event": "first_token_received", "time": "2026-01-01T00:00:00Z",
                                          "ttftMs": 20}) + "\\n")
    time.sleep(0.2)
    sys.stderr.write(json.dumps({"event": "endpoint_iteration_complete", "time": "2026-01-01T00:00:00Z",
                                 "iteration": 1, "iterations": 1, "concurrency": 1}) + "\\n")
    """
)


def test_a_progress_bar_on_stderr_neither_breaks_the_capture_nor_is_held_back(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    script = tmp_path / "progress.py"
    script.write_text(PROGRESS)
    out = tmp_path / "run.json"
    nodes = str(nodes_toml(tmp_path, [agent]))
    result = sparkwatch(
        "run", "--nodes", nodes, "--import", "lmx-status:-", "-o", str(out), "--", sys.executable, str(script)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "progress 19999%" in result.stderr
    assert [w["id"] for w in json.loads(out.read_text())["windows"]] == ["lmx-it1-r1"]


def test_nodes_check_uses_the_coordinator_from_the_environment(tmp_path: pathlib.Path) -> None:
    port = free_port()
    env = {**os.environ, "SPARKWATCH_COORDINATOR": f"http://127.0.0.1:{port}"}
    cli = [sys.executable, "-m", "sparkwatch", "nodes", "check"]
    result = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"sparkwatch: error: cannot reach the coordinator at http://127.0.0.1:{port}"
    )


def test_import_command_posts_a_good_file_and_refuses_a_bad_one(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    from helpers.processes import Coordinator

    agent = agent_factory("--backend", "sim", "--node", "n0")
    coord = Coordinator(tmp_path, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    try:
        _, run = coord.call("POST", "/v1/runs", {"name": "imports"})
        env = {**os.environ, "SPARKWATCH_COORDINATOR": coord.url, "SPARKWATCH_TOKEN_FILE": str(coord.token)}
        # the fixture's 7 s of requests, moved into the run: an import takes windows inside it, from its
        # start to now (give or take 2 s), so they are imported once they are over
        fixture = pathlib.Path(__file__).parents[1] / "fixtures/harness/plain/windows.csv"
        shift = run["t_start_ns"] - 1_759_522_500_000_000_000
        time.sleep(max(0.0, (run["t_start_ns"] + 7 * 10**9 - time.time_ns()) / 1e9))
        good = tmp_path / "windows.csv"
        good.write_text(re.sub(r"\b1759\d{15}\b", lambda m: str(int(m.group()) + shift), fixture.read_text()))
        cli = [sys.executable, "-m", "sparkwatch", "import"]
        ok = subprocess.run(
            [*cli, "plain", str(good), "--run", run["id"]], capture_output=True, text=True, env=env
        )
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith("imported ") and f"into run {run['id']}" in ok.stdout
        _, stored = coord.call("GET", f"/v1/runs/{run['id']}")
        bad = tmp_path / "bad.csv"
        bad.write_text("id,phase,t_start_ns,t_end_ns\nx,timed,10,not-a-number\n")
        refused = subprocess.run(
            [*cli, "plain", str(bad), "--run", run["id"]], capture_output=True, text=True, env=env
        )
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(f"sparkwatch: error: {bad}: ")
        no_token = {k: v for k, v in env.items() if k != "SPARKWATCH_TOKEN_FILE"}
        denied = subprocess.run(
            [*cli, "plain", str(good), "--run", run["id"]], capture_output=True, text=True, env=no_token
        )
        assert denied.returncode == 2 and "HTTP 401" in denied.stderr
        _, after = coord.call("GET", f"/v1/runs/{run['id']}")
        assert stored["windows"] > 0 and after["windows"] == stored["windows"]  # the refusals stored nothing
    finally:
        coord.stop()


def test_the_readme_agent_block_pastes_into_a_shell(tmp_path: pathlib.Path) -> None:
    """The README's "agent alone" block, run by bash as pasted (its port moved to a free one): the wait
    for readiness makes the first curl find a sample, and the job is stopped at the end."""
    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    block = readme.split("### The agent alone", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    port = str(free_port())
    script = block.replace("9464", port).replace(
        "--node spark-1", f"--node spark-1 --listen 127.0.0.1:{port}"
    )
    bin_dir = pathlib.Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-e", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r'^sparkwatch_gpu_power_watts\{[^}]*node="spark-1"[^}]*\} [0-9.]+$', result.stdout, re.M)
    assert '"status": "ok"' in result.stdout or '"status":"ok"' in result.stdout
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"--listen 127.0.0.1:{port}"], capture_output=True, text=True)
    assert left.stdout == "", "the block's agent outlived its kill %1"


def test_a_bad_status_line_on_the_commands_stderr_names_that_stream(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """`--import lmx-status:-` captures CMD's stderr in a temporary file, gone once the run ends: the skip
    names the stream and the line, never that file."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    line = '{"event": "endpoint_warmup_request", "index": "x", "time": "2025-10-03T20:13:50Z"}'
    result = sparkwatch(
        "run", "--nodes", str(nodes_toml(tmp_path, [agent])), "--import", "lmx-status:-", "--no-report",
        "-o", str(tmp_path / "run.json"), "--", "sh", "-c", f"echo '{line}' >&2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = "import of the command's stderr (lmx-status) skipped: line 1 (endpoint_warmup_request): index must"
    assert said in result.stderr and "lmx-status.jsonl" not in result.stderr, result.stderr
    assert "import failed: the command's stderr (lmx-status): line 1" in result.stdout + result.stderr
