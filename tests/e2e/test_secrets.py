"""Secrets and local trust: an embedded coordinator answers only its own process, and a secret on the wrapped
command line is published nowhere (export, /metrics, log, database bytes)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import aiohttp

from helpers.cli import nodes_toml
from helpers.processes import free_port
from sparkwatch.commands.embedded import embedded_coordinator
from sparkwatch.core.windows import Window

SECRET = "sk-test-SECRET"
OPEN_LINE = re.compile(r"sparkwatch: run (\S+) open on (http://\S+)")


def forged_window(t_ns: int) -> dict[str, Any]:
    """What a stranger would post to make a run look faster: one window with 999 999 tokens."""
    return {"id": "forged", "phase": "timed", "t_start_ns": t_ns, "t_end_ns": t_ns + 10**9,
            "completion_tokens": 999_999}  # fmt: skip


def http(method: str, url: str, body: Any = None, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


async def test_an_embedded_coordinator_answers_only_its_own_client() -> None:
    """The coordinator `run --nodes`, `demo`, `hardware --nodes` and `nodes check` embed, started as they
    start it: a stranger on the same host is refused, its own client is not, and each has its own token."""
    async with embedded_coordinator([]) as client, embedded_coordinator([]) as other:
        url, token = client.target.url, client.target.token
        assert token and other.target.token and token != other.target.token and len(token) >= 32
        run = await client.create_run("local trust")
        windows = f"{url}/v1/runs/{run['id']}/windows"
        async with aiohttp.ClientSession() as stranger:
            wrong = ("not-the-token", other.target.token)
            for headers in ({}, *({"Authorization": f"Bearer {t}"} for t in wrong)):
                body = {"windows": [forged_window(run["t_start_ns"])]}
                async with stranger.post(windows, json=body, headers=headers) as resp:
                    assert resp.status == 401, headers
                for path in (
                    "/v1/runs",
                    f"/v1/runs/{run['id']}",
                    f"/v1/runs/{run['id']}/export",
                    "/v1/nodes",
                ):
                    async with stranger.get(f"{url}{path}", headers=headers) as resp:
                        assert resp.status == 401, path
            for path in ("/healthz", "/metrics"):  # open, as on a standing coordinator
                async with stranger.get(f"{url}{path}") as resp:
                    assert resp.status == 200, path
        assert (await client.run(run["id"]))["windows"] == 0  # nothing was stored
        t_ns = run["t_start_ns"]
        assert await client.add_windows(run["id"], [Window("own", "timed", t_ns, t_ns + 10**6)]) == 1
        await client.end_run(run["id"])
        assert [w["id"] for w in (await client.export(run["id"]))["windows"]] == ["own"]


class RunProcess:
    """`sparkwatch run` as a user starts it, its stderr read as it comes (the embedded coordinator's URL is
    on it), CMD waiting for a file to appear so that the test can look at the coordinator meanwhile."""

    def __init__(self, args: list[str], go: pathlib.Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
        self.go = go
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkwatch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def opened(self, timeout_s: float = 30) -> tuple[str, str]:
        """(run id, coordinator URL) once the run is open."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := OPEN_LINE.search(line):
                    return match[1], match[2]
            assert self.proc.poll() is None, "".join(self.lines)
            time.sleep(0.05)
        raise AssertionError("the run did not open: " + "".join(self.lines))

    def finish(self, timeout_s: float = 60) -> tuple[int, str, str]:
        """Let CMD end; (exit code, stdout, stderr)."""
        self.go.touch()
        try:
            stdout, _ = self.proc.communicate(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode, stdout, "".join(self.lines)


CLIENT = textwrap.dedent(
    """
    import json, os, sys, time, urllib.error, urllib.request
    go, proxy = sys.argv[1], sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.05)
    body = json.dumps({"model": "m", "messages": [], "max_tokens": 4}).encode()
    req = urllib.request.Request(proxy + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=30).read()
    except urllib.error.HTTPError as err:
        print("proxy answered", err.code)
    """
)


def test_run_embeds_a_coordinator_that_refuses_a_local_stranger(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """While `sparkwatch run --nodes` runs, another local process cannot read the run or forge a window
    into it, while sparkwatch's own client and the proxy it started store theirs."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    out = tmp_path / "run.json"
    proxy = f"http://127.0.0.1:{free_port()}"
    upstream = f"http://127.0.0.1:{free_port()}"  # nothing listens: the proxy's window records a 502
    args = ["run", "--nodes", str(nodes_toml(tmp_path, [agent])), "--proxy-upstream", upstream,
            "--proxy-listen", proxy.removeprefix("http://"), "-o", str(out), "--",
            sys.executable, str(script), str(tmp_path / "go"), proxy]  # fmt: skip
    run = RunProcess(args, tmp_path / "go")
    try:
        run_id, url = run.opened()
        body = {"windows": [forged_window(time.time_ns())]}
        for token in (None, "not-the-token"):
            assert http("POST", f"{url}/v1/runs/{run_id}/windows", body, token)[0] == 401
            assert http("GET", f"{url}/v1/runs/{run_id}", token=token)[0] == 401
            assert http("GET", f"{url}/v1/runs", token=token)[0] == 401
        assert http("GET", f"{url}/healthz")[0] in (200, 503)  # open (503: a node not streaming yet)
        status, metrics = http("GET", f"{url}/metrics")
        assert status == 200 and f'run_id="{run_id}"'.encode() in metrics
    finally:
        code, _stdout, stderr = run.finish()
    assert code == 0, stderr
    windows = json.loads(out.read_text())["windows"]
    assert [(w["source"].get("kind"), w["http_status"]) for w in windows] == [("proxy", 502)]
    assert all(w["completion_tokens"] != 999_999 for w in windows)


def test_a_secret_on_the_command_line_is_published_nowhere(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """`sparkwatch run -- env OPENAI_API_KEY=… CMD` with the key in every place a harness puts one: it is in
    neither the export, nor /metrics, nor the log (at debug), nor any byte of the SQLite files."""
    agent = agent_factory("--backend", "sim", "--node", "n0")
    out = tmp_path / "run.json"
    db = tmp_path / "coord.db"
    go = tmp_path / "go"
    wait = 'until [ -e "$0" ]; do sleep 0.05; done'
    command = [
        *("env", f"OPENAI_API_KEY={SECRET}", "sh", "-c", wait, str(go), "--api-key", SECRET),
        *("--target", f"http://user:{SECRET}@spark-1:8000/v1?api_key={SECRET}"),
        *("-H", f"Authorization: Bearer {SECRET}", "-d", json.dumps({"api_key": SECRET})),
    ]
    nodes = str(nodes_toml(tmp_path, [agent]))
    run = RunProcess(
        ["--log-level", "debug", "run", "--nodes", nodes, "--db", str(db), "-o", str(out), "--", *command], go
    )
    try:
        run_id, url = run.opened()
        status, metrics = http("GET", f"{url}/metrics")
        assert status == 200
        while_open = {p.name: p.read_bytes() for p in tmp_path.glob("coord.db*")}
    finally:
        code, stdout, log = run.finish()
    assert code == 0, log
    assert f'sparkwatch_coordinator_run_active{{run_id="{run_id}"}} 1.0'.encode() in metrics
    assert "coord.db-wal" in while_open and f"run {run_id} (" in log  # what was searched is real
    after = {p.name: p.read_bytes() for p in tmp_path.glob("coord.db*")}
    export = out.read_text()
    places = {"export": export.encode(), "/metrics": metrics, "log": log.encode(), "stdout": stdout.encode()}
    places |= {f"{name} while the run was open": data for name, data in while_open.items()}
    places |= {f"{name} after": data for name, data in after.items()}
    assert [where for where, data in places.items() if SECRET.encode() in data] == []
    published = json.loads(export)["run"]
    assert published["name"] == "sh"
    assert published["command"]["argv"][:2] == ["env", "OPENAI_API_KEY=***"]
    assert published["command"]["argv"][-6:] == [
        *("--target", "http://user:***@spark-1:8000/v1?api_key=***"),
        *("-H", "Authorization: Bearer ***", "-d", '{"api_key": "***"}'),
    ]
