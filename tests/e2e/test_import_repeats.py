"""`sparkwatch import` of a harness file into a run whose requests the proxy already took: the coordinator
compares the import with the run's proxy windows at its commit (core/repeated_windows.py). The same requests
again are refused whole — each would be counted twice, joules per token at half — and a file with requests
of its own that partly repeats them is imported without those, with a warning that says how many."""

from __future__ import annotations

import json
import pathlib
import sys
import textwrap
from typing import Any

from helpers.cli import sparkwatch
from helpers.processes import Coordinator, free_port

#: Three requests through the proxy, each also written to a CSV as a harness writes its own file.
CLIENT = textwrap.dedent(
    """
    import json, sys, time, urllib.request
    proxy, csv_path = sys.argv[1], sys.argv[2]
    rows = ["id,phase,t_start_ns,t_end_ns,completion_tokens"]
    for i in range(3):
        body = {"messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 8, "stream": True,
                "stream_options": {"include_usage": True}}
        req = urllib.request.Request(proxy + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        start = time.time_ns()
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        rows.append(f"r{i},timed,{start},{time.time_ns()},8")
        time.sleep(0.2)
    open(csv_path, "w").write("\\n".join(rows) + "\\n")
    """
)


def test_an_import_of_the_proxys_requests_is_refused_and_a_partial_repeat_is_warned(
    tmp_path: pathlib.Path, agent_factory: Any, sim_model: str
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "n0")
    coord = Coordinator(tmp_path, f'[nodes.n0]\nurl = "ws://127.0.0.1:{agent.port}"\n')
    coord.start()
    env = {"SPARKWATCH_COORDINATOR": coord.url, "SPARKWATCH_TOKEN_FILE": str(coord.token)}
    script, csv, out = tmp_path / "client.py", tmp_path / "requests.csv", tmp_path / "run.json"
    script.write_text(CLIENT)
    try:
        ran = sparkwatch(
            "run", "--proxy-upstream", sim_model, "--proxy-listen", f"127.0.0.1:{free_port()}",
            "-o", str(out), "--no-report", "--",
            sys.executable, str(script), "{proxy}", str(csv), env=env,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        run_id = json.loads(out.read_text())["run"]["id"]
        refused = sparkwatch("import", "plain", str(csv), "--run", run_id, env=env)
        _, after_refusal = coord.call("GET", f"/v1/runs/{run_id}")

        rows = csv.read_text().splitlines()
        first_start, last_end = int(rows[1].split(",")[2]), int(rows[-1].split(",")[3])
        own = [  # one of the proxy's requests again, and two windows of spans of their own
            rows[0],
            rows[1].replace("r0,", "again-0,"),
            f"whole,timed,{first_start},{last_end},24",
            f"tail,timed,{first_start + 100_000_000},{last_end},16",
        ]
        partial = tmp_path / "partial.csv"
        partial.write_text("\n".join(own) + "\n")
        warned = sparkwatch("import", "plain", str(partial), "--run", run_id, env=env)
        _, after_partial = coord.call("GET", f"/v1/runs/{run_id}")
    finally:
        coord.stop()
    assert after_refusal["windows"] == 3  # the proxy's three, nothing of the file
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "HTTP 409: 3 of the 3 window(s) in import import-" in refused.stderr
    assert "(plain) repeat the proxy's (start and end within 50 ms)" in refused.stderr
    assert "not imported (each would be counted twice)" in refused.stderr
    assert "Traceback" not in refused.stderr

    assert warned.returncode == 0, warned.stderr
    assert after_partial["windows"] == 5  # the proxy's three and the file's two of its own
    assert warned.stderr.startswith("sparkwatch: warning: 1 of the 3 window(s) in import import-")
    assert warned.stderr.rstrip().endswith("and were left out: the proxy's windows stand for those requests")
    assert "imported 2 window(s)" in warned.stdout
