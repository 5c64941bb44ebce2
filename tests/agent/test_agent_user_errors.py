"""What a user of the agent meets when something is wrong: an unreadable meminfo file (one warning, null
memory with a reason), host paths given to the sim backend (a one-line usage error), a probe that reads no
GPU (exit 1, the report still printed), and refusals on the HTTP server (JSON, whatever went wrong)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from doubles.fake_nvml import write_control
from doubles.nvml_fake import FakeNvml
from helpers.loopback import wait_http
from helpers.processes import free_port
from sparkwatch_agent.config import ConfigError, build_config, load_toml
from sparkwatch_agent.hardware.meminfo import MeminfoReader
from sparkwatch_agent.hardware.nvml.backend import NvmlBackend
from sparkwatch_agent.sampling.leases import IntervalLeases
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sampler import Sampler
from sparkwatch_agent.serving.probe import EXIT_GPU_UNREAD, probe
from sparkwatch_agent.shared.http import json_refusals, start_site
from sparkwatch_agent.shared.protocol import CLOSE_TOKEN_ROTATED
from sparkwatch_agent.shared.server_limits import ServerLimits

AGENT = [sys.executable, "-m", "sparkwatch_agent"]
MEMINFO = b"MemTotal: 125000000 kB\nMemFree: 100 kB\nMemAvailable: 100000000 kB\n"
TOKEN = "user-errors-token-0123456789"


def run_agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=30, env=env)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY_SOCKET"))}
    return env | extra


def sampler_reading(memory: MeminfoReader, gpu: NvmlBackend | None = None) -> Sampler:
    return Sampler(
        node="n",
        boot_id="b",
        gpu=gpu,
        memory=memory,
        sensors=None,
        leases=IntervalLeases(1.0),
        ring=SampleRing(100),
    )


# ---- 1. an unreadable meminfo file ---------------------------------------------------------------------
def _meminfo_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sparkwatch_agent.hardware.meminfo"]


def test_unreadable_meminfo_is_one_warning_and_null_memory_with_a_reason(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "meminfo"
    sampler = sampler_reading(MeminfoReader(path))
    caplog.set_level(logging.DEBUG, logger="sparkwatch_agent")
    samples = [sampler.tick() for _ in range(5)]
    assert all(s.memory is None for s in samples)
    assert all(s.memory_error == "FileNotFoundError: No such file or directory" for s in samples)
    assert sampler.snapshot.host_memory_ok is False
    assert sampler.snapshot.counters.read_errors[("host_memory", "FileNotFoundError")] == 5
    (warning,) = _meminfo_records(caplog)
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert str(path) in warning.getMessage() and "No such file or directory" in warning.getMessage()

    path.write_bytes(MEMINFO)  # readable again: values, one info line
    back = sampler.tick()
    assert back.memory is not None and back.memory.total_bytes == 125_000_000 * 1024
    assert back.memory_error is None and sampler.snapshot.host_memory_ok is True
    assert [r.levelno for r in _meminfo_records(caplog)] == [logging.WARNING, logging.INFO]

    path.write_bytes(b"")  # an empty file is unreadable too, not a sample of unknowns without a reason
    gone = [sampler.tick() for _ in range(3)]
    assert all(s.memory is None and "not a meminfo file" in (s.memory_error or "") for s in gone)
    levels = [r.levelno for r in _meminfo_records(caplog)]
    assert levels == [logging.WARNING, logging.INFO, logging.WARNING]
    sampler.stop()


def test_a_file_that_is_not_meminfo_is_unreadable(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "hostname"
    path.write_text("spark-1\n")
    sample = sampler_reading(MeminfoReader(path)).tick()
    assert sample.memory is None
    assert sample.memory_error == "OSError: no MemTotal line, not a meminfo file"


def test_cli_probe_with_a_missing_meminfo_path_warns_once(fake_nvml_dir: pathlib.Path) -> None:
    env = clean_env(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_PROFILE="gb10")
    result = run_agent("probe", "--meminfo-path", "/nonexistent/meminfo", env=env)
    assert result.returncode == 0, result.stderr  # the GPU was read: memory is not what probe checks
    out = json.loads(result.stdout)
    assert out["sample"]["memory"] is None
    assert "FileNotFoundError" in out["sample"]["memory_error"]
    warnings = [line for line in result.stderr.splitlines() if "/nonexistent/meminfo" in line]
    assert len(warnings) == 1 and warnings[0].startswith("WARNING ")
    assert "Traceback" not in result.stderr


def test_cli_serve_with_a_missing_meminfo_path_warns_once_not_per_sample(
    agent_factory: Any, fake_nvml_dir: pathlib.Path
) -> None:
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": "gb10"}
    agent = agent_factory("--interval", "0.05", "--meminfo-path", "/nonexistent/meminfo", env=env)
    with pytest.raises(urllib.error.HTTPError) as health:
        urllib.request.urlopen(f"{agent.url}/healthz", timeout=5)
    assert health.value.code == 503
    assert "host memory unreadable" in json.loads(health.value.read())["reason"]
    time.sleep(1.0)  # ~20 more samples
    with urllib.request.urlopen(f"{agent.url}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "sparkwatch_memory_total_bytes{" not in text  # unknown: an absent series, never 0
    assert 'sparkwatch_agent_read_errors_total{field="host_memory"' in text
    stderr = agent.stop()
    lines = [line for line in stderr.splitlines() if "/nonexistent/meminfo" in line]
    assert len(lines) == 1 and lines[0].startswith("WARNING "), stderr
    assert "Traceback" not in stderr


# ---- 2. host paths with the sim backend ----------------------------------------------------------------
@pytest.mark.parametrize("command", ["probe", "serve"])
@pytest.mark.parametrize(("flag", "value"), [("--meminfo-path", "/proc/meminfo"), ("--hwmon-root", "/sys")])
def test_host_paths_with_the_sim_backend_are_a_usage_error(command: str, flag: str, value: str) -> None:
    result = run_agent(command, "--backend", "sim", flag, value)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("sparkwatch-agent: error: ")
    assert f"{flag} cannot be combined with --backend sim" in line


def test_host_paths_with_the_sim_backend_from_a_config_file(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\nbackend = "sim"\nmeminfo_path = "/proc/meminfo"\n')
    result = run_agent("probe", "--config", str(config))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "meminfo_path (config file) cannot be combined with backend = 'sim' (config file)" in line
    config.write_text('[agent]\nmeminfo_path = "/proc/meminfo"\n')  # the flag picks sim
    result = run_agent("probe", "--config", str(config), "--backend", "sim")
    assert result.returncode == 2 and "meminfo_path (config file) cannot be combined with --backend sim" in (
        result.stderr
    )
    assert run_agent("probe", "--config", str(config), "--backend", "nvml").returncode != 2


@pytest.mark.parametrize("where", ["missing", "file"])
def test_a_named_hwmon_root_that_is_not_a_directory_is_a_usage_error(
    tmp_path: pathlib.Path, where: str
) -> None:
    root = tmp_path / where
    if where == "file":
        root.write_text("hwmon0\n")
    result = run_agent("probe", "--hwmon-root", str(root))
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert (
        line
        == f"sparkwatch-agent: error: --hwmon-root {root}: not a directory (a hwmon class dir holds hwmonN/)"
    )


def test_a_hwmon_root_from_the_config_file_is_named_as_the_files(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nhwmon_root = "{tmp_path / "nope"}"\n')
    result = run_agent("probe", "--config", str(config))
    assert result.returncode == 2
    assert f"error: hwmon_root (config file) {tmp_path / 'nope'}: not a directory" in result.stderr


@pytest.mark.parametrize("size", ["9", "10000001", "100000000000000000000"])
def test_a_ring_size_out_of_bounds_is_a_usage_error(tmp_path: pathlib.Path, size: str) -> None:
    """Too small to replay anything, or a zero too many: a ring that grows for as long as the agent runs."""
    result = run_agent("probe", "--backend", "sim", "--ring-size", size)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line == f"sparkwatch-agent: error: --ring-size must be 10 to 10000000 samples, got {size}"
    config = tmp_path / "agent.toml"
    config.write_text(f'[agent]\nbackend = "sim"\nring_size = {size}\n')
    result = run_agent("probe", "--config", str(config))
    assert result.returncode == 2
    # past 64 bits it is no TOML integer at all (TOML's bound): the file's error, not the setting's
    past = int(size) >= 2**63
    said = f"an integer past 64 bits ({size})" if past else f"must be 10 to 10000000 samples, got {size}"
    assert said in result.stderr and ("ring_size (config file)" in result.stderr) != past, result.stderr
    config.write_text('[agent]\nbackend = "sim"\nring_size = 10000000\n')
    assert run_agent("probe", "--config", str(config)).returncode == 0


# ---- 3. the probe's exit code ---------------------------------------------------------------------------
def test_probe_exits_zero_when_the_gpu_was_read(fake_nvml_dir: pathlib.Path) -> None:
    result = run_agent("probe", env=clean_env(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_PROFILE="gb10"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["gpu_ok"] is True
    assert run_agent("probe", "--backend", "sim").returncode == 0


def _assert_unread_probe(result: subprocess.CompletedProcess[str], reason: str) -> None:
    assert result.returncode == EXIT_GPU_UNREAD == 1
    out = json.loads(result.stdout)  # still the whole report: what could be read
    assert out["gpu_ok"] is False and reason in out["gpu_reason"]
    assert out["hardware"]["lmx"]["hwClass"] is None  # unknown while the backend is down: not CPU_ONLY
    assert out["sample"]["memory"]["total_bytes"] > 0 and out["hardware"]["host"]["hostname"]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sparkwatch-agent: probe: no GPU read: ") and reason in last
    assert "Traceback" not in result.stderr


def test_probe_exits_one_when_nvml_init_fails(fake_nvml_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    control = tmp_path / "nvml.control"
    write_control(control, init_error=9)
    env = clean_env(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_CONTROL=str(control))
    _assert_unread_probe(run_agent("probe", env=env), "DRIVER_NOT_LOADED")


def test_probe_exits_one_without_the_nvml_library() -> None:
    env = clean_env(LD_LIBRARY_PATH="/nonexistent")
    loads = [sys.executable, "-c", "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"]
    if subprocess.run(loads, env=env, capture_output=True).returncode == 0:
        pytest.skip("this machine has an NVIDIA driver: NVML cannot be made absent")
    _assert_unread_probe(run_agent("probe", env=env), "LIBRARY_NOT_FOUND")


def test_probe_of_a_backend_with_no_gpus_reports_a_problem(tmp_path: pathlib.Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_bytes(MEMINFO)
    result = probe(sampler_reading(MeminfoReader(meminfo), NvmlBackend(lib=FakeNvml(gpus=[]))))
    assert result.report["gpu_ok"] is True  # NVML answered ...
    assert result.gpu_problem == "GPU backend nvml found no GPU"  # ... with no device: nothing read
    assert result.report["hardware"]["lmx"]["hwClass"] == "CPU_ONLY"  # which it knows for sure
    one = probe(sampler_reading(MeminfoReader(meminfo), NvmlBackend(lib=FakeNvml())))
    assert one.gpu_problem is None


# ---- 4. refusals on the HTTP server ------------------------------------------------------------------------
def raw_request(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection (closed after the answer): status, headers, body."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


def http(method: str, path: str, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n".encode()


def _refusal(answer: tuple[int, dict[str, str], bytes], status: int, error: str) -> str:
    got, headers, body = answer
    assert got == status and headers["content-type"].startswith("application/json"), answer
    refusal = json.loads(body)
    assert set(refusal) == {"error", "reason"} and refusal["error"] == error, refusal
    assert isinstance(refusal["reason"], str) and refusal["reason"]
    return str(refusal["reason"])


@pytest.fixture
def token_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o600)
    return path


def test_a_rotated_token_closes_the_streams_the_old_one_opened(
    agent_factory: Any, token_file: pathlib.Path
) -> None:
    """A stream let in with a token stayed open after the token was rotated (a leaked token's stream went
    on for as long as the agent ran). It is closed within about a second, with its own code and reason;
    the new token opens a stream, the old one does not."""
    agent = agent_factory("--backend", "sim", "--interval", "0.5", "--token-file", str(token_file))
    url, new = f"ws://127.0.0.1:{agent.port}/v1/stream", "rotated-token-" + "y" * 20

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def scenario() -> tuple[int | None, str, float]:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(url, headers=bearer(TOKEN)) as ws:
                assert json.loads((await ws.receive(timeout=5)).data.splitlines()[0])["type"] == "hello"
                staged = token_file.with_name("token.new")
                staged.write_text(new + "\n")
                staged.chmod(0o600)
                staged.replace(token_file)
                t0 = time.monotonic()
                async with asyncio.timeout(5):
                    while (msg := await ws.receive()).type == aiohttp.WSMsgType.TEXT:
                        pass
                closed = (ws.close_code, str(msg.extra), time.monotonic() - t0)
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await session.ws_connect(url, headers=bearer(TOKEN))
            assert refused.value.status == 401
            async with session.ws_connect(url, headers=bearer(new)) as ws:
                assert json.loads((await ws.receive(timeout=5)).data.splitlines()[0])["type"] == "hello"
        return closed

    code, reason, took_s = asyncio.run(scenario())
    assert (
        code == CLOSE_TOKEN_ROTATED
        and reason == "the agent's API token changed: connect again with the new one"
    )
    assert took_s < 3.0  # looked at once a second (and at the next frame's poll)
    assert "Traceback" not in agent.stop()


def test_unknown_paths_and_wrong_methods_are_json_on_a_real_agent(
    agent_factory: Any, token_file: pathlib.Path
) -> None:
    agent = agent_factory("--backend", "sim", "--interval", "0.5", "--token-file", str(token_file))
    for path in ("/nope", "/v1/nope", "/", "/metrics/", "/v1/time/extra", "//nope"):
        reason = _refusal(raw_request(agent.port, http("GET", path, TOKEN)), 404, "not_found")
        assert reason == f"no route for GET {path}"
    status, headers, body = raw_request(agent.port, http("HEAD", "/nope", TOKEN))
    assert status == 404 and headers["content-type"].startswith("application/json") and body == b""
    # /v1/ is behind the token: without it, the same JSON shape says so before any route is looked up
    _refusal(raw_request(agent.port, http("GET", "/v1/nope")), 401, "unauthorized")
    # a token of bytes that are not UTF-8 is a wrong token, not a 500 (any client can send one)
    garbage = http("GET", "/v1/time", TOKEN).replace(TOKEN.encode(), b"\xff\xfe")
    _refusal(raw_request(agent.port, garbage), 401, "unauthorized")
    for method, path in (("POST", "/metrics"), ("DELETE", "/healthz"), ("PATCH", "/v1/interval")):
        answer = raw_request(agent.port, http(method, path, TOKEN))
        reason = _refusal(answer, 405, "method_not_allowed")
        assert reason.startswith(f"{method} is not allowed here; allowed: ") and "Allow" not in reason
        assert answer[1]["allow"] and answer[1]["allow"] in reason
    assert "Traceback" not in agent.stop()


def test_a_query_parameter_a_route_does_not_take_is_refused_not_ignored(
    agent_factory: Any, token_file: pathlib.Path
) -> None:
    """``?interval_s=0.01`` on ``GET /v1/interval`` answered 200 with the interval unchanged, as if taken."""
    agent = agent_factory("--backend", "sim", "--interval", "0.5", "--token-file", str(token_file))
    for method, path, said in (
        ("GET", "/v1/interval?interval_s=0.01", "parameter 'interval_s': this route takes none"),
        ("GET", "/v1/capabilities?a=1&b=2", "parameters 'a', 'b': this route takes none"),
        ("DELETE", "/v1/interval?holder=x&ttl_s=5", "parameter 'ttl_s': this route takes holder"),
        ("GET", "/v1/stream?after=0&since=1", "parameter 'since': this route takes after"),
    ):
        answer = raw_request(agent.port, http(method, path, TOKEN))
        assert _refusal(answer, 400, "invalid_query") == f"unknown query {said}"
    status, _, body = raw_request(agent.port, http("DELETE", "/v1/interval?holder=nobody", TOKEN))
    assert status == 200 and json.loads(body)["released"] is False  # the route's own parameter is taken
    assert raw_request(agent.port, http("GET", "/metrics?name[]=x"))[0] == 200  # not /v1/: a scrape's params
    for after in ("1_0", "%2B7", "%207", "-1", "x"):  # int() took the first three as 10, 7 and 7
        answer = raw_request(agent.port, http("GET", f"/v1/stream?after={after}", TOKEN))
        assert _refusal(answer, 400, "bad_request") == "after must be a non-negative integer seq", after
    assert _refusal(raw_request(agent.port, http("GET", "/v1/nope?x=1", TOKEN)), 404, "not_found")
    assert "Traceback" not in agent.stop()


def test_a_rotated_token_is_in_force_at_the_next_request_and_a_bad_one_changes_nothing(
    agent_factory: Any, token_file: pathlib.Path
) -> None:
    """The agent read its token once at start: rotating one meant a restart of every agent (and a gap in
    their samples). The file is read again when it changes; a file that is no longer a valid token (here
    readable by others) keeps the token in force and says why in the log."""
    agent = agent_factory("--backend", "sim", "--interval", "0.5", "--token-file", str(token_file))
    new = "rotated-token-" + "x" * 20
    staged = token_file.with_name("token.new")
    staged.write_text(new + "\n")
    staged.chmod(0o600)
    staged.replace(token_file)  # as an operator's `install -m 0600` or an atomic rename would
    assert raw_request(agent.port, http("GET", "/v1/time", new))[0] == 200
    _refusal(raw_request(agent.port, http("GET", "/v1/time", TOKEN)), 401, "unauthorized")
    token_file.chmod(0o644)  # a mistake: the file is refused, the token in force stays
    for _ in range(3):
        assert raw_request(agent.port, http("GET", "/v1/time", new))[0] == 200
    logged = agent.stop()
    # under the agent's own logger (the shared module's name was said for the coordinator's file too)
    assert f"INFO sparkwatch_agent.serving.serve: token file {token_file} read again" in logged
    assert f"token file {token_file} is accessible by group or others (mode 0644)" in logged
    assert logged.count("the token read before stays in force") == 1 and "Traceback" not in logged


@pytest.mark.parametrize(
    ("request_bytes", "what"),
    [
        (b"FOO /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "Invalid method encountered"),
        (b"GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", "Invalid char in url path"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "Got more than 8190 bytes when reading"),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", "Received HTTPS traffic on an HTTP port"),
    ],
    ids=["unknown-method", "raw-utf8-path", "long-line", "tls-hello"],
)
def test_requests_aiohttp_cannot_parse_are_json_too(
    agent_factory: Any, request_bytes: bytes, what: str
) -> None:
    agent = agent_factory("--backend", "sim", "--interval", "0.5")
    answer = raw_request(agent.port, request_bytes)
    reason = _refusal(answer, 400, "bad_request")
    assert reason == f"cannot parse the request: {what}"  # what went wrong, not the request's bytes
    assert answer[1]["server"] == "sparkwatch-agent"  # as on every other answer: not Python's and aiohttp's
    stderr = agent.stop()
    assert "Traceback" not in stderr and "Error handling request" not in stderr


async def boom(_request: web.Request) -> web.Response:
    raise RuntimeError("a handler bug")


async def test_a_handler_bug_is_a_json_500_and_a_logged_traceback(caplog: pytest.LogCaptureFixture) -> None:
    app = web.Application(middlewares=[json_refusals])
    app.router.add_get("/boom", boom)
    runner = web.AppRunner(app, access_log=None)
    url = await start_site(runner, "127.0.0.1", 0, ServerLimits(max_connections=8))
    try:
        answer = await asyncio.to_thread(raw_request, int(url.rsplit(":", 1)[1]), http("GET", "/boom"))
    finally:
        await runner.cleanup()
    reason = _refusal(answer, 500, "internal_server_error")
    assert "a handler bug" not in reason  # the details go to the log, not to the client
    (record,) = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert record.levelno == logging.ERROR and record.exc_info is not None


def test_a_hangup_stops_the_agent_in_order(agent_factory: Any) -> None:
    """SIGHUP (the terminal that ran it gone) ended `serve` on the spot: exit 129, nothing logged, no
    stream closed. It stops as SIGTERM stops it."""
    agent = agent_factory("--backend", "sim", "--interval", "0.5")
    agent.proc.send_signal(signal.SIGHUP)
    assert agent.proc.wait(10) == 0
    stderr = agent.stop()
    assert "SIGHUP: stopping" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            'node = "top"\nbackend = "sim"\n[agent]\nnode = "x"\n',
            "keys backend, node at top level beside an [agent] table",
        ),
        ('token_file = ""\n', "token_file (config file) is empty"),
        ('[agent]\nhwmon_root = ""\n', "hwmon_root (config file) is empty"),
        (
            'backend = "nvml"\nsim_sensors = false\n',
            "sim_sensors (config file) applies to --backend sim only",
        ),
        ('listen = "127.0.0.1:+9464"\n', "port must be a number, got '+9464'"),
        ('listen = "127.0.0.1:٩٤٦٤"\n', "port must be a number"),
    ],
)
def test_a_config_a_setting_of_which_would_be_dropped_or_misread_is_refused(
    tmp_path: pathlib.Path, text: str, said: str
) -> None:
    """Each was taken in silence: the top-level keys dropped (the nvml backend ran, not the sim), an empty
    path read as "not set", sim_sensors ignored, "+9464" bound."""
    config = tmp_path / "agent.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(said)):
        build_config({}, load_toml(config))


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_bytes(b'\xef\xbb\xbf[agent]\nnode = "spark-1"\nbackend = "sim"\n')
    assert build_config({}, load_toml(config)).node == "spark-1"  # was "Invalid statement (at line 1, …)"


def test_an_empty_path_flag_is_a_usage_error_not_the_working_folder() -> None:
    result = run_agent("serve", "--backend", "sim", "--token-file", "")
    assert result.returncode == 2 and "--token-file: an empty path names no file" in result.stderr
    result = run_agent("probe", "--no-sim-sensors")  # the nvml backend: the flag would mean nothing
    assert result.returncode == 2
    assert "--sim-sensors/--no-sim-sensors applies to --backend sim only" in result.stderr, result.stderr


def test_an_agent_started_under_nohup_outlives_the_hangup(tmp_path: pathlib.Path) -> None:
    """`nohup` ignores SIGHUP so that a closed terminal leaves the service running; the stop handler put
    over SIG_IGN would have stopped it all the same."""
    port = free_port()
    command = [*AGENT, "serve", "--backend", "sim", "--interval", "0.5", "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(["nohup", *command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None  # still serving
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["probe"], "sparkwatch-agent: error: cannot write the probe to stdout: No space left on device"),
        (["stream", "--stdio"], "cannot write the stream to stdout: No space left on device; stopping"),
    ],
)
def test_stdout_on_a_full_disk_is_one_line_and_exit_74(command: list[str], said: str) -> None:
    """`> /dev/full` (every write: ENOSPC): probe and the stdio stream stopped with a traceback (a sweep).
    Now one line and sysexits' EX_IOERR, whatever the interpreter flushes at exit going nowhere."""
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [*AGENT, *command, "--backend", "sim"],
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    lines = [line for line in result.stderr.splitlines() if not line.startswith("INFO ")]
    assert result.returncode == 74 and len(lines) == 1 and lines[0].endswith(said), result.stderr


def test_a_probe_whose_reader_left_exits_quietly_as_a_shells_tools_do() -> None:
    """`probe | true`: a traceback ending in BrokenPipeError (a sweep); now no word and 128 + SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the probe writes
    result = subprocess.run(
        [*AGENT, "probe", "--backend", "sim"], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=30
    )
    os.close(write_end)
    assert result.returncode == 128 + signal.SIGPIPE, result.stderr
    assert [line for line in result.stderr.splitlines() if not line.startswith("INFO ")] == []


def test_a_stdio_stream_with_stdout_closed_is_refused_not_run_for_nobody() -> None:
    """`stream --stdio >&-`: stdout became /dev/null (std_streams) and the stream ran until killed,
    writing nothing, where agent.md says it exits when stdout closes (a sweep)."""
    result = subprocess.run(
        [*AGENT, "stream", "--stdio", "--backend", "sim"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=30,
        preexec_fn=lambda: os.close(1),
    )
    assert result.returncode == 2
    said = "sparkwatch-agent: error: stream --stdio: stdout is closed: nowhere to stream to\n"
    assert result.stderr == said


def test_a_probe_with_stdout_closed_says_it_cannot_write_it() -> None:
    """`probe >&-` printed to /dev/null and exited 0: a probe no one could read, reported as done."""
    result = subprocess.run(
        [*AGENT, "probe", "--backend", "sim"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=30,
        preexec_fn=lambda: os.close(1),
    )
    assert result.returncode == 74  # EX_IOERR, as for a stdout that takes no writes
    assert result.stderr == "sparkwatch-agent: error: cannot write the probe to stdout: it is closed\n"


def test_relative_paths_in_a_config_file_are_the_files_folders(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`token_file = "agent.token"` beside /etc/sparkwatch/agent.toml was looked for in the working
    directory, which under systemd is / (a sweep), where the coordinator's nodes file has always taken
    its relative paths from its own folder. A flag's relative path stays the working directory's."""
    folder = tmp_path / "etc"
    (folder / "hw").mkdir(parents=True)
    config = folder / "agent.toml"
    config.write_text(
        '[agent]\ntoken_file = "agent.token"\nhwmon_root = "hw"\nmeminfo_path = "/proc/meminfo"\n'
    )
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    built = build_config({}, load_toml(config))
    assert (built.token_file, built.hwmon_root) == (folder / "agent.token", folder / "hw")
    assert built.meminfo_path == pathlib.Path("/proc/meminfo")
    (elsewhere / "mine").mkdir()
    assert build_config({"hwmon_root": "mine"}, load_toml(config)).hwmon_root == pathlib.Path("mine")
    config.write_text('[agent]\ntoken_file = "~/agent.token"\n')  # a home folder's, as the nodes file's
    assert build_config({}, load_toml(config)).token_file == pathlib.Path.home() / "agent.token"
    config.write_text('[agent]\ntoken_file = "~nosuchuser-sw/agent.token"\n')  # one line, no traceback
    with pytest.raises(ConfigError) as caught:
        load_toml(config)
    assert str(caught.value) == (
        f"config file {config}: token_file: cannot expand ~ in '~nosuchuser-sw/agent.token':"
        " no such user or home directory"
    )
