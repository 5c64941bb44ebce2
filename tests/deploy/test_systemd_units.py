"""The systemd units in deploy/systemd, checked with systemd's own tools and against the real processes.

- `systemd-analyze verify` accepts both units (on a copy whose ExecStart points at the installed console
  script, since verify insists that the executable exists) and `systemd-analyze security --offline=yes`
  rates both at an exposure of at most 2.5;
- the ExecStart lines parse with the real command-line parsers, the example config files with the real
  config and nodes parsers, and the sysusers snippet with systemd-sysusers;
- the agent and the coordinator, started as their units start them (console script, NOTIFY_SOCKET,
  WATCHDOG_USEC), send READY=1, then WATCHDOG=1 within the watchdog period, and STOPPING=1 on SIGTERM,
  all from the main PID (NotifyAccess=main);
- both run under a seccomp filter equal to the one systemd installs for MemoryDenyWriteExecute=yes (the
  agent with the real nvidia-ml-py over the fake libnvidia-ml.so.1).

There is no systemd manager here (PID 1 is not systemd), so the sandbox itself is not exercised: see
docs/operations.md for what was verified where. A missing systemd-analyze FAILS these tests, it does not
skip them: `.ci/run` installs Debian's `systemd` package when the tool is absent.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from helpers.processes import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYSTEMD_DIR = ROOT / "deploy" / "systemd"
AGENT_UNIT = "sparkwatch-agent.service"
COORDINATOR_UNIT = "sparkwatch-coordinator.service"
UNITS = (AGENT_UNIT, COORDINATOR_UNIT)
VENV_BIN = "/opt/sparkwatch/venv/bin/"
MAX_EXPOSURE = 2.5
WATCHDOG_USEC = 1_000_000
#: Linux's SO_TIMESTAMPNS (asm-generic, x86 and arm64 alike; Python's socket module does not name it), the
#: control message's type too (SCM_TIMESTAMPNS): a struct timespec of two 64-bit integers.
SO_TIMESTAMPNS = 35


# ---- tools -----------------------------------------------------------------------------------------------


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: the systemd unit tests need systemd's tools"
            " (Debian/Ubuntu: apt-get install systemd; .ci/run installs it when missing)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    path = _require_tool("systemd-analyze")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.match(r"systemd (\d+)", out)
    if m is None or int(m.group(1)) < 250:
        pytest.fail(
            f"systemd-analyze {out.splitlines()[0] if out else '?'} is too old:"
            " `security --offline=` needs systemd >= 250",
            pytrace=False,
        )
    return path


def console_script(name: str) -> str:
    """The installed console script (the file a venv's bin/ holds), as ExecStart runs it."""
    beside = pathlib.Path(sysconfig.get_path("scripts")) / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: python3 -m pip install -e ./agent -e .", pytrace=False)
    return found


# ---- unit files ------------------------------------------------------------------------------------------


def unit_settings(unit: str) -> dict[str, list[str]]:
    """Key → values (in file order) over all sections; our units use no line continuations."""
    settings: dict[str, list[str]] = {}
    for raw in (SYSTEMD_DIR / unit).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{unit}: not a Key=Value line: {raw!r}"
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def one(settings: dict[str, list[str]], key: str) -> str:
    values = settings.get(key, [])
    assert len(values) == 1, f"{key}= should be set exactly once, found {values}"
    return values[0]


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|min|m)?", value)
    assert m, f"unsupported time span {value!r}"
    return float(m.group(1)) * (60 if m.group(2) in ("min", "m") else 1)


def installed_copy(unit: str, directory: pathlib.Path, extra: str = "") -> pathlib.Path:
    """The unit with /opt/sparkwatch/venv/bin/ replaced by where the console scripts really are."""
    text = (SYSTEMD_DIR / unit).read_text()
    assert VENV_BIN in text
    script = console_script("sparkwatch-agent" if unit == AGENT_UNIT else "sparkwatch")
    text = text.replace(VENV_BIN, str(pathlib.Path(script).parent) + "/")
    if extra:
        text = text.replace("[Service]\n", f"[Service]\n{extra}\n", 1)
    copy = directory / unit
    copy.write_text(text)
    return copy


# ---- systemd-analyze -------------------------------------------------------------------------------------


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_analyze_verify_accepts_the_unit(
    systemd_analyze: str, unit: str, tmp_path: pathlib.Path
) -> None:
    copy = installed_copy(unit, tmp_path)
    result = subprocess.run(
        [systemd_analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    ours = [line for line in (result.stdout + result.stderr).splitlines() if unit in line]
    assert result.returncode == 0, result.stdout + result.stderr
    assert ours == [], "\n".join(ours)


def test_systemd_analyze_verify_reports_mistakes(systemd_analyze: str, tmp_path: pathlib.Path) -> None:
    """The control for the test above: an unknown setting and a missing executable are reported."""
    copy = installed_copy(AGENT_UNIT, tmp_path, extra="ProtectSystm=strict")
    result = subprocess.run(
        [systemd_analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert "Unknown key" in result.stderr and "ProtectSystm" in result.stderr, result.stderr
    result = subprocess.run(
        [systemd_analyze, "verify", str(SYSTEMD_DIR / AGENT_UNIT)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "/opt/sparkwatch/venv/bin/sparkwatch-agent is not executable" in result.stderr, result.stderr


def exposure(systemd_analyze: str, path: pathlib.Path) -> tuple[float, str]:
    result = subprocess.run(
        [systemd_analyze, "security", "--offline=yes", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", result.stdout)
    assert m, f"no overall exposure in the output (rc {result.returncode}):\n{result.stdout}{result.stderr}"
    return float(m.group(1)), result.stdout


@pytest.mark.parametrize("unit", UNITS)
def test_security_exposure_is_at_most_2_5(systemd_analyze: str, unit: str) -> None:
    level, table = exposure(systemd_analyze, SYSTEMD_DIR / unit)
    exposed = "\n".join(line for line in table.splitlines() if line.startswith("✗"))
    assert level <= MAX_EXPOSURE, f"{unit}: exposure {level} > {MAX_EXPOSURE}; exposed settings:\n{exposed}"


def test_security_exposure_measures_the_sandbox(systemd_analyze: str, tmp_path: pathlib.Path) -> None:
    """The control: the same unit with its sandbox removed scores far worse."""
    bare = [
        line
        for line in (SYSTEMD_DIR / AGENT_UNIT).read_text().splitlines()
        if line.startswith(("[", "Type=", "ExecStart=", "Description="))
    ]
    path = tmp_path / AGENT_UNIT
    path.write_text("\n".join(bare) + "\n")
    level, _ = exposure(systemd_analyze, path)
    assert level > 8.0


# ---- what the units say ----------------------------------------------------------------------------------

COMMON = {
    "Type": "notify",
    "NotifyAccess": "main",
    "Restart": "on-failure",
    "User": "sparkwatch",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "SystemCallArchitectures": "native",
    "CapabilityBoundingSet": "",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "RemoveIPC": "yes",
    "UMask": "0077",
    "ProtectProc": "invisible",
}


@pytest.mark.parametrize("unit", UNITS)
def test_unit_settings(unit: str) -> None:
    s = unit_settings(unit)
    for key, want in COMMON.items():
        assert one(s, key) == want, f"{unit}: {key}={one(s, key)}, want {want}"
    assert s["SystemCallFilter"] == ["@system-service", "~@privileged @resources"]
    # Both heartbeats wake about once a second (the agent's sampler at most MAX_WAIT_S = 1 s apart, the
    # coordinator's task every 1 s), so a watchdog shorter than a few seconds would kill healthy processes.
    assert seconds(one(s, "WatchdogSec")) >= 3
    assert "Environment" in s and "PYTHONFAULTHANDLER=1" in s["Environment"]
    assert "StandardOutput" not in s and "StandardError" not in s  # stderr goes to the journal


@pytest.mark.parametrize("unit", UNITS)
def test_unit_lets_journald_read_the_log_priority_prefix(unit: str) -> None:
    """Both CLIs start each log line with `<N>` when stderr is the journal (shared/journal_log.py);
    journald honours it only while SyslogLevelPrefix= stays on (the default): `journalctl -p warning`."""
    s = unit_settings(unit)
    assert s.get("SyslogLevelPrefix", ["yes"]) == ["yes"], (
        f"{unit}: SyslogLevelPrefix={s['SyslogLevelPrefix']}"
    )


def test_agent_unit_keeps_gpu_and_proc_access() -> None:
    s = unit_settings(AGENT_UNIT)
    assert s.get("PrivateDevices", ["no"]) == ["no"]  # would hide /dev/nvidia*
    assert "ProcSubset" not in s  # /proc/meminfo, /proc/cpuinfo, /proc/driver/nvidia are read
    assert one(s, "DevicePolicy") == "closed"
    assert sorted(s["DeviceAllow"]) == ["char-nvidia rw", "char-nvidia-caps r", "char-nvidia-frontend rw"]
    assert one(s, "SupplementaryGroups") == "video"
    assert "StateDirectory" not in s  # the agent keeps no state; the ring lives in memory


def test_coordinator_unit_has_no_devices_and_a_state_directory() -> None:
    s = unit_settings(COORDINATOR_UNIT)
    assert one(s, "PrivateDevices") == "yes"
    assert one(s, "StateDirectory") == "sparkwatch"
    assert one(s, "ProcSubset") == "pid"


def test_exec_start_lines_parse_with_the_real_command_lines() -> None:
    from sparkwatch.cli_parser import make_parser as coordinator_parser
    from sparkwatch_agent.cli import make_parser as agent_parser

    argv = shlex.split(one(unit_settings(AGENT_UNIT), "ExecStart"))
    assert argv[0] == VENV_BIN + "sparkwatch-agent"
    args = agent_parser().parse_args(argv[1:])
    assert args.command == "serve"
    assert args.config == pathlib.Path("/etc/sparkwatch/agent.toml")

    s = unit_settings(COORDINATOR_UNIT)
    argv = shlex.split(one(s, "ExecStart"))
    assert argv[0] == VENV_BIN + "sparkwatch"
    args = coordinator_parser().parse_args(argv[1:])
    assert args.command == "coordinator"
    assert args.nodes == pathlib.Path("/etc/sparkwatch/nodes.toml")
    assert args.db == pathlib.Path("/var/lib") / one(s, "StateDirectory") / "coordinator.sqlite"
    assert args.token_file is not None and args.token_file.parent == pathlib.Path("/etc/sparkwatch")


def test_sysusers_snippet_creates_the_units_user(tmp_path: pathlib.Path) -> None:
    sysusers = _require_tool("systemd-sysusers")
    snippet = SYSTEMD_DIR / "sparkwatch.sysusers"
    (tmp_path / "etc").mkdir()
    result = subprocess.run(
        [sysusers, "--dry-run", f"--root={tmp_path}", str(snippet)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Creating user 'sparkwatch'" in result.stdout + result.stderr
    for unit in UNITS:
        assert one(unit_settings(unit), "User") == "sparkwatch"


# ---- example config files --------------------------------------------------------------------------------


def test_agent_toml_example_loads_with_the_real_parser() -> None:
    from sparkwatch_agent.config import build_config, load_toml

    config = build_config({}, load_toml(SYSTEMD_DIR / "agent.toml.example"))
    assert (config.host, config.port) == ("0.0.0.0", 9464)
    assert config.token_file == pathlib.Path("/etc/sparkwatch/agent.token")
    assert config.backend == "nvml"
    assert not config.insecure_no_auth


def test_nodes_toml_example_loads_with_the_real_parser() -> None:
    from sparkwatch.links.nodes_file import load_nodes

    nodes = load_nodes(SYSTEMD_DIR / "nodes.toml.example")
    assert [n.name for n in nodes] == ["spark-1", "spark-2", "spark-3", "spark-4"]
    ws = [n for n in nodes if n.url]
    assert ws and all(n.token_file == pathlib.Path("/etc/sparkwatch/agent.token") for n in ws)
    ssh = [n for n in nodes if n.ssh]
    assert ssh and all(n.known_hosts and n.client_keys for n in ssh)  # no ~ under ProtectHome=yes
    for n in ssh:
        paths = [n.known_hosts, *n.client_keys]
        assert all(p is not None and p.is_relative_to("/etc/sparkwatch") for p in paths)


# ---- the notify protocol, against the real processes -----------------------------------------------------


@dataclass
class Datagram:
    at: float  # when the kernel queued it (SO_TIMESTAMPNS, wall clock s): not when this test read it
    pid: int  # sender's PID from SCM_CREDENTIALS: what NotifyAccess=main compares with the main PID
    fields: list[str]


@dataclass
class NotifySocket:
    """What systemd's manager listens on: an AF_UNIX datagram socket, sender credentials on."""

    path: pathlib.Path
    sock: socket.socket
    received: list[Datagram] = field(default_factory=list)

    def wait_for(
        self, done: Callable[[list[Datagram]], bool], proc: subprocess.Popen[str], timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        ucred, stamp = struct.calcsize("iII"), struct.calcsize("qq")
        while not done(self.received):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; received {[d.fields for d in self.received]}")
            self.sock.settimeout(min(left, 0.2))
            try:
                data, ancdata, _, _ = self.sock.recvmsg(
                    4096, socket.CMSG_SPACE(ucred) + socket.CMSG_SPACE(stamp)
                )
            except TimeoutError:
                if proc.poll() is not None:  # queued datagrams are read first: this is after the last
                    raise AssertionError(
                        f"process exited ({proc.returncode}) after {[d.fields for d in self.received]}"
                    ) from None
                continue
            pid, at = -1, None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", payload[:ucred])[0]
                elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    seconds, nanoseconds = struct.unpack("qq", payload[:stamp])
                    at = seconds + nanoseconds / 1e9
            assert at is not None, "no receive time on a datagram (SO_TIMESTAMPNS)"
            self.received.append(Datagram(at, pid, data.decode().split("\n")))

    def index(self, name: str) -> int | None:
        for i, d in enumerate(self.received):
            if name in d.fields:
                return i
        return None


@pytest.fixture
def notify_socket() -> Iterator[NotifySocket]:
    directory = pathlib.Path(tempfile.mkdtemp(prefix="sw-notify-"))  # short: sun_path holds 108 bytes
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    # each datagram's arrival from the kernel: the watchdog gaps were measured when this test got round to
    # reading them, after a blocking /healthz request, so a loaded machine stretched them
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    path = directory / "notify"
    sock.bind(str(path))
    yield NotifySocket(path, sock)
    sock.close()
    shutil.rmtree(directory, ignore_errors=True)


def has(name: str, after: str | None = None, count: int = 1) -> Callable[[list[Datagram]], bool]:
    def check(received: list[Datagram]) -> bool:
        start = 0
        if after is not None:
            first = next((i for i, d in enumerate(received) if after in d.fields), None)
            if first is None:
                return False
            start = first + 1
        return sum(name in d.fields for d in received[start:]) >= count

    return check


def http_get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def service_env(notify: NotifySocket, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML", "NOTIFY_SOCKET"))}
    env.update(NOTIFY_SOCKET=str(notify.path), WATCHDOG_USEC=str(WATCHDOG_USEC), **extra)
    return env


def run_notify_cycle(
    notify: NotifySocket,
    argv: list[str],
    env: dict[str, str],
    health_url: str,
    watchdogs: int,
    max_watchdog_gap_s: float,
) -> tuple[int, Any]:
    """Start like systemd does, expect READY=1 (and /healthz answering), `watchdogs` WATCHDOG=1 after it
    no further apart than `max_watchdog_gap_s`, then SIGTERM → STOPPING=1 and exit 0 within 2 s."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        try:
            notify.wait_for(has("READY=1"), proc, timeout_s=30)
            ready = notify.index("READY=1")
            assert ready is not None
            assert any(f.startswith("STATUS=") for f in notify.received[ready].fields)
            health = http_get(health_url)  # READY=1 promises a listening server
            if watchdogs:
                notify.wait_for(has("WATCHDOG=1", after="READY=1", count=watchdogs), proc, timeout_s=10)
                beats = [notify.received[ready].at] + [
                    d.at for d in notify.received[ready + 1 :] if "WATCHDOG=1" in d.fields
                ]
                gaps = [b - a for a, b in itertools.pairwise(beats)]
                assert max(gaps) < max_watchdog_gap_s, f"watchdog gaps {gaps}"
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            notify.wait_for(has("STOPPING=1"), proc, timeout_s=2)
            rc = proc.wait(timeout=max(0.1, 2.0 - (time.monotonic() - sent)))
            took = time.monotonic() - sent
        except BaseException:
            proc.kill()
            proc.wait()
            print(proc.stderr.read() if proc.stderr else "", file=sys.stderr)
            raise
        assert rc == 0, proc.stderr.read() if proc.stderr else ""
        assert took <= 2.0, f"took {took:.2f} s to exit after SIGTERM"
        assert {d.pid for d in notify.received} == {proc.pid}, "a datagram came from another PID"
        last = notify.index("STOPPING=1")
        assert last is not None and last > (notify.index("READY=1") or 0)
        return health
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_agent_notifies_ready_watchdog_and_stopping(notify_socket: NotifySocket) -> None:
    port = free_port()
    argv = [console_script("sparkwatch-agent"), "serve", "--backend", "sim", "--interval", "0.1"]
    argv += ["--listen", f"127.0.0.1:{port}", "--node", "notify-test"]
    status, body = run_notify_cycle(
        notify_socket,
        argv,
        service_env(notify_socket),
        f"http://127.0.0.1:{port}/healthz",
        watchdogs=3,
        # sent every WATCHDOG_USEC/2 from the sampler thread: never as far apart as systemd's limit
        max_watchdog_gap_s=WATCHDOG_USEC / 1e6,
    )
    assert status == 200 and body["status"] == "ok", body


def coordinator_argv(tmp: pathlib.Path, agent_port: int, port: int) -> list[str]:
    nodes = tmp / "nodes.toml"
    nodes.write_text(f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent_port}"\n')
    argv = [console_script("sparkwatch"), "coordinator", "--nodes", str(nodes)]
    return [*argv, "--db", str(tmp / "coordinator.sqlite"), "--listen", f"127.0.0.1:{port}"]


def test_coordinator_notifies_ready_watchdog_and_stopping(
    notify_socket: NotifySocket, agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-1", "--interval", "0.1")
    port = free_port()
    status, body = run_notify_cycle(
        notify_socket,
        coordinator_argv(tmp_path, agent.port, port),
        service_env(notify_socket),
        f"http://127.0.0.1:{port}/healthz",
        watchdogs=2,
        # The coordinator's heartbeat task sleeps a fixed 1 s whatever WATCHDOG_USEC says, so its pings
        # are ~1 s apart: fine for the unit's WatchdogSec=30s, too slow for a WatchdogSec of 1 s.
        max_watchdog_gap_s=1.5,
    )
    assert status in (200, 503) and body["nodes"] == 1, body


# ---- MemoryDenyWriteExecute=yes --------------------------------------------------------------------------

#: The filter systemd installs for MemoryDenyWriteExecute=yes (seccomp_memory_deny_write_execute()):
#: mmap with PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect with PROT_EXEC and shmat with SHM_EXEC fail
#: with EPERM. Newer systemd uses prctl(PR_SET_MDWE) where the kernel has it, which is no stricter.
MDWE_EXEC_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "add this architecture's AUDIT_ARCH"
#endif
#define ARG2 (offsetof(struct seccomp_data, args) + 2 * sizeof(__u64))
#define DENY (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA))

int main(int argc, char **argv) {
    struct sock_filter f[] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        /* 2 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* 3 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 4, 0),
        /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 6, 0),
        /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pkey_mprotect, 5, 0),
        /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_shmat, 7, 0),
        /* 8 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* 9: mmap */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2),
        /* 10 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, PROT_WRITE | PROT_EXEC),
        /* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_WRITE | PROT_EXEC, 7, 6),
        /* 12: mprotect, pkey_mprotect */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2),
        /* 13 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, PROT_EXEC),
        /* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROT_EXEC, 4, 3),
        /* 15: shmat */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG2),
        /* 16 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, SHM_EXEC),
        /* 17 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SHM_EXEC, 1, 0),
        /* 18 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* 19 */ BPF_STMT(BPF_RET | BPF_K, DENY),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (argc < 2) {
        fprintf(stderr, "usage: %s COMMAND [ARG...]\n", argv[0]);
        return 2;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("seccomp");
        return 2;
    }
    execvp(argv[1], argv + 1);
    perror("execvp");
    return 127;
}
"""

MDWE_PROBE_PY = r"""
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
rw = mmap.PROT_READ | mmap.PROT_WRITE
anon = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
wx = libc.mmap(None, 4096, rw | mmap.PROT_EXEC, anon, -1, 0)
print("mmap-wx", "refused" if wx in (None, ctypes.c_void_p(-1).value) else "allowed")
page = libc.mmap(None, 4096, rw, anon, -1, 0)
print("mmap-rw", "allowed" if page not in (None, ctypes.c_void_p(-1).value) else "refused")
print("mprotect-x", "refused" if libc.mprotect(page, 4096, mmap.PROT_READ | mmap.PROT_EXEC) else "allowed")
print("ctypes-callback", ctypes.CFUNCTYPE(ctypes.c_int)(lambda: 7)())
"""


@pytest.fixture(scope="module")
def mdwe_exec(tmp_path_factory: pytest.TempPathFactory) -> str:
    gcc = _require_tool("gcc")
    out = tmp_path_factory.mktemp("mdwe")
    source = out / "mdwe_exec.c"
    source.write_text(MDWE_EXEC_C)
    binary = out / "mdwe_exec"
    result = subprocess.run(
        [gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-o", str(binary), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return str(binary)


def test_mdwe_filter_refuses_writable_executable_memory(mdwe_exec: str) -> None:
    """The control: outside the filter W+X is allowed here, inside it is refused; ctypes still works."""
    plain = subprocess.run([sys.executable, "-c", MDWE_PROBE_PY], capture_output=True, text=True, timeout=60)
    assert "mmap-wx allowed" in plain.stdout, plain.stdout + plain.stderr
    result = subprocess.run(
        [mdwe_exec, sys.executable, "-c", MDWE_PROBE_PY], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:4] == [
        "mmap-wx refused",
        "mmap-rw allowed",
        "mprotect-x refused",
        "ctypes-callback 7",
    ], result.stdout


def test_agent_samples_real_pynvml_under_mdwe(
    notify_socket: NotifySocket, mdwe_exec: str, fake_nvml_dir: pathlib.Path
) -> None:
    """nvidia-ml-py's ctypes path over the fake libnvidia-ml.so.1 (GB10), aiohttp, psutil, all under MDWE."""
    port = free_port()
    argv = [mdwe_exec, console_script("sparkwatch-agent"), "serve", "--interval", "0.1"]
    argv += ["--listen", f"127.0.0.1:{port}", "--node", "mdwe"]
    env = service_env(notify_socket, LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_PROFILE="gb10")
    status, body = run_notify_cycle(
        notify_socket, argv, env, f"http://127.0.0.1:{port}/healthz", watchdogs=1, max_watchdog_gap_s=1.0
    )
    assert status == 200 and body["gpu_ok"] is True, body


def test_coordinator_runs_under_mdwe(
    notify_socket: NotifySocket, mdwe_exec: str, agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-1", "--interval", "0.1")
    port = free_port()
    status, body = run_notify_cycle(
        notify_socket,
        [mdwe_exec, *coordinator_argv(tmp_path, agent.port, port)],
        service_env(notify_socket),
        f"http://127.0.0.1:{port}/healthz",
        watchdogs=0,
        max_watchdog_gap_s=0,
    )
    assert status in (200, 503) and body["nodes"] == 1, body


# ---- tokens delivered with LoadCredential= ---------------------------------------------------------------


def test_load_token_accepts_a_credential_delivered_with_an_acl(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkwatch_agent.shared.auth import TokenFileError, load_token

    directory = pathlib.Path(tempfile.mkdtemp(prefix="sw-cred-", dir="/dev/shm"))
    try:
        token = directory / "token"
        token.write_text("0123456789abcdef0123456789abcdef\n")
        token.chmod(0o400)  # systemd: write the copy 0600, then fchmod 0400, then add the ACL below
        entry = struct.Struct("<HHI")  # POSIX ACL xattr: tag, permissions, id
        acl = struct.pack("<I", 2) + b"".join(
            entry.pack(tag, perm, ident)
            for tag, perm, ident in (
                (0x01, 4, 0xFFFFFFFF),  # ACL_USER_OBJ r--
                (0x02, 4, 61234),  # ACL_USER <service uid> r--
                (0x04, 0, 0xFFFFFFFF),  # ACL_GROUP_OBJ ---
                (0x10, 4, 0xFFFFFFFF),  # ACL_MASK r--  (calc_acl_mask_if_needed)
                (0x20, 0, 0xFFFFFFFF),  # ACL_OTHER ---
            )
        )
        try:
            os.setxattr(token, "system.posix_acl_access", acl)
        except OSError as exc:
            pytest.skip(f"/dev/shm does not take POSIX ACLs here: {exc}")
        assert stat.S_IMODE(token.stat().st_mode) == 0o440  # what load_token sees
        monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
        with pytest.raises(TokenFileError, match="accessible by group or others"):
            load_token(token)  # an ordinary 0440 file stays refused
        monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(directory))  # as systemd sets it
        assert load_token(token) == "0123456789abcdef0123456789abcdef"
        token.chmod(0o444)  # readable by others: refused even there
        with pytest.raises(TokenFileError, match="accessible by group or others"):
            load_token(token)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_agent_status_follows_what_it_is_doing(notify_socket: NotifySocket) -> None:
    """`systemctl status` must not keep saying what was true at start: a new interval shows up."""
    port = free_port()
    argv = [console_script("sparkwatch-agent"), "serve", "--backend", "sim", "--interval", "1"]
    argv += ["--listen", f"127.0.0.1:{port}", "--node", "status-test"]
    proc = subprocess.Popen(
        argv, env=service_env(notify_socket), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        notify_socket.wait_for(has("STATUS=sampling every 1 s; gpu ok"), proc, timeout_s=30)
        lease = json.dumps({"holder": "test", "interval_s": 0.05}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/interval", data=lease, method="PUT")
        urllib.request.urlopen(req, timeout=5).read()
        notify_socket.wait_for(has("STATUS=sampling every 0.05 s; gpu ok"), proc, timeout_s=5)
    finally:
        proc.terminate()
        proc.wait(5)
        if proc.stderr:
            proc.stderr.close()
