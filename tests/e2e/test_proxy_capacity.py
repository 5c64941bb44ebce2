"""The proxy under many concurrent streams: each request holds two descriptors (the client's socket and
the upstream's), so a shell's soft open-file limit (1024) ran it out of them at ~500 streams, and its cap
(half the soft limit) turned streams away with 503 before any request was read, leaving no window and no
word at the end. It raises its soft limit towards the hard one, derives its cap for two descriptors a
request, and says at its end how many connections the cap turned away."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from helpers.processes import free_port, wait_listening

STREAMS = 40
#: A shell's soft limit, scaled down to what 40 streams need: 64 left a cap of 32.
SOFT_NOFILE = 64


def _stream(port: int) -> int:
    """One streamed chat completion of about half a second at the sim model's 200 tokens/s; its status."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, "stream": True}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except urllib.error.URLError:  # the 503 came, and the socket closed, while the body was still sent
        return 0


#: Runs the rest of argv with the open-file limits argv[1] (soft) and argv[2] (hard, or "keep"), as
#: `ulimit -Sn` / `ulimit -Hn` would.
WITH_NOFILE = (
    "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1];"
    " resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard if sys.argv[2] == 'keep' else"
    " int(sys.argv[2]))); os.execv(sys.executable, [sys.executable, *sys.argv[3:]])"
)


def _proxy(sim_model: str, env: dict[str, str] | None = None, nofile: tuple[int, str] | None = None) -> Any:
    """`sparkwatch proxy` to the sim model on a free port, with ``nofile`` (soft, hard) when given."""
    port = free_port()
    limited = [sys.executable, "-c", WITH_NOFILE, str(nofile[0]), nofile[1]] if nofile else [sys.executable]
    proc = subprocess.Popen(
        [*limited, "-m", "sparkwatch", "proxy", "--upstream", sim_model, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_listening(port)
    # a whole request, so that wait_listening's bare connection is gone before the streams come: still
    # waiting for its request, it was the oldest and pushed out to make room (once in 30 loaded trials:
    # 37 turned away for 36 failed clients)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as answer:
        answer.read()
    return proc, port


def _streams(port: int) -> list[int]:
    with ThreadPoolExecutor(STREAMS) as pool:
        return list(pool.map(_stream, [port] * STREAMS))


def _stop(proc: Any) -> tuple[str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return str(out), str(err)


def test_a_low_soft_open_file_limit_turns_no_stream_away(sim_model: str) -> None:
    proc, port = _proxy(sim_model, nofile=(SOFT_NOFILE, "keep"))
    try:
        statuses = _streams(port)
    finally:
        out, err = _stop(proc)
    assert statuses == [200] * STREAMS, err
    assert len(out.splitlines()) == STREAMS  # a window each, printed by the proxy without a coordinator
    assert "turned away" not in err


def test_connections_the_cap_turns_away_are_said_at_the_end(sim_model: str) -> None:
    env = {**os.environ, "SPARKWATCH_HTTP_MAX_CONNECTIONS": "4"}
    proc, port = _proxy(sim_model, env=env)
    try:
        statuses = _streams(port)
    finally:
        out, err = _stop(proc)
    refused = STREAMS - statuses.count(200)
    assert refused > 0 and set(statuses) <= {200, 503, 408, 0}, statuses  # 408: pushed out for a newer one
    assert len(out.splitlines()) == STREAMS - refused
    line = r"the proxy turned away (\d+) connection\(s\) before a request was read \((.*)\): a request"
    said = re.search(line, err)
    assert said is not None, err
    ways = {what: int(n) for n, _, what in (part.partition(" ") for part in said[2].split("; "))}
    cap = "at the cap of 4 (SPARKWATCH_HTTP_MAX_CONNECTIONS)"
    pushed_out = f"closed with 408 {cap} to make room, no request yet"
    assert set(ways) <= {f"refused with 503 {cap}", pushed_out}, ways
    assert sum(ways.values()) == int(said[1]), said[0]
    # every 503 and 408 is the cap's; a client that saw its socket close (0) may be one of them or not
    # (CI once counted 37 failed clients, 36 turned away)
    assert statuses.count(503) <= ways.get(f"refused with 503 {cap}", 0), (said[0], statuses)
    assert statuses.count(503) + statuses.count(408) <= int(said[1]) <= refused, (said[0], statuses)


def test_a_connection_closed_at_the_header_deadline_is_said_at_the_end(sim_model: str) -> None:
    """A client whose request headers never finish gets a 408 at the deadline: no window, and it was
    said nowhere."""
    env = {**os.environ, "SPARKWATCH_HTTP_HEADER_TIMEOUT_S": "0.5"}
    proc, port = _proxy(sim_model, env=env)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            reply = slow.recv(4096)
    finally:
        _out, err = _stop(proc)
    assert reply.startswith(b"HTTP/1.1 408 "), reply
    assert (
        "the proxy turned away 1 connection(s) before a request was read (1 closed with 408 when no request"
        " headers came within 0.5 s (SPARKWATCH_HTTP_HEADER_TIMEOUT_S)): a request on them made no window"
        in err
    ), err


def test_a_cap_that_leaves_too_few_descriptors_for_two_a_request_is_warned_of(sim_model: str) -> None:
    """40 connections of two descriptors each under a hard limit of 128: the warning compared the cap
    alone with half the open files, and said nothing."""
    env = {**os.environ, "SPARKWATCH_HTTP_MAX_CONNECTIONS": "40"}
    proc, _port = _proxy(sim_model, env=env, nofile=(128, "128"))
    _out, err = _stop(proc)
    assert "up to 40 connections leave few of the 128 open files" in err, err
