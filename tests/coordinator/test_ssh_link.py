"""The SSH tunnel link through a real OpenSSH server (Debian openssh-server) started on a loopback port."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import numpy as np
import pytest

from helpers.processes import free_port, wait_listening
from sparkwatch.core.clock import ClockOffset
from sparkwatch.links import ssh_link
from sparkwatch.links.factory import make_link
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.ssh_link import (
    PROBE_TIMEOUT_S,
    SshExecLink,
    SshTunnelLink,
    _LineCutter,
    host_key_reason,
)
from sparkwatch.links.ws_link import LinkError
from sparkwatch.store import Store
from sparkwatch.wire import MAX_LINE_CHARS
from sparkwatch_agent.shared.backoff import ExponentialBackoff

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def keygen(path: pathlib.Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@pytest.fixture
def sshd(tmp_path: pathlib.Path) -> Iterator[dict[str, Any]]:
    if not os.path.exists(SSHD):
        pytest.fail("sshd missing: install the Debian package openssh-server (.ci/run does)")
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
    host_key, client_key = tmp_path / "host_ed25519", tmp_path / "client_ed25519"
    keygen(host_key)
    keygen(client_key)
    authorized = tmp_path / "authorized_keys"
    authorized.write_text((tmp_path / "client_ed25519.pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {authorized}\n"
        f"PidFile {tmp_path / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nAllowTcpForwarding yes\n"
    )
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    try:  # (it fell through in silence when sshd never listened: the test failed later, far from why)
        wait_listening(port)
    except AssertionError:
        proc.kill()
        pytest.fail(f"sshd never listened on {port}: {proc.communicate()[1].strip()[-500:]}")
    known = tmp_path / "known_hosts"
    known.write_text(
        f"[127.0.0.1]:{port} {(tmp_path / 'host_ed25519.pub').read_text().split(' ', 2)[0]} "
        f"{(tmp_path / 'host_ed25519.pub').read_text().split(' ', 2)[1]}\n"
    )
    other = tmp_path / "other_known_hosts"
    keygen(tmp_path / "other_ed25519")
    other.write_text(f"[127.0.0.1]:{port} {(tmp_path / 'other_ed25519.pub').read_text().rsplit(' ', 1)[0]}\n")
    yield {"port": port, "key": client_key, "known_hosts": known, "wrong_known_hosts": other}
    proc.terminate()
    proc.wait(5)


def spec(sshd: dict[str, Any], agent_port: int, known_hosts: pathlib.Path) -> NodeSpec:
    return NodeSpec(
        name="spark-ssh",
        ssh=f"{os.environ.get('USER', 'root')}@127.0.0.1",
        ssh_port=sshd["port"],
        client_keys=(sshd["key"],),
        known_hosts=known_hosts,
        agent_port=agent_port,
    )


async def _tunnel_for(
    sshd: dict[str, Any], agent_port: int, store: Store, session: aiohttp.ClientSession, seconds: float
) -> SshTunnelLink:
    """A tunnel link to the agent at ``agent_port`` on the node, run for ``seconds`` (probing every 0.5 s,
    redialling within 0.5 s), then stopped."""
    link = SshTunnelLink(
        spec(sshd, agent_port, sshd["known_hosts"]),
        store,
        session,
        holder="t",
        desired_interval=lambda: None,
        probe_every_s=0.5,
        probes=4,
        backoff=ExponentialBackoff(initial_s=0.1, maximum_s=0.5),
    )
    task = asyncio.create_task(link.run())
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return link


async def test_tunnel_streams_samples_with_host_key_checked(
    sshd: dict[str, Any], agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    agent = agent_factory("--backend", "sim", "--node", "spark-ssh", "--interval", "0.05")
    store = Store(tmp_path / "c.db")
    async with aiohttp.ClientSession() as session:
        link = await _tunnel_for(sshd, agent.port, store, session, 3.0)
    _, last = store.latest_boot("spark-ssh") or ("", 0)
    assert last >= 10 and store.count_samples("spark-ssh") == last
    assert link.state.transport == "ssh" and link.state.offset is not None
    store.close()


@pytest.mark.parametrize("opened", ["agent", "other"])
async def test_tunnel_mode_runs_under_the_key_restriction_the_docs_give(
    sshd: dict[str, Any], agent_factory: Any, tmp_path: pathlib.Path, opened: str
) -> None:
    """docs/operations.md's ``authorized_keys`` line for a tunnel node: ``restrict`` (no pty, no forwarding)
    and ``command=`` (no command), then forwarding to the agent's port alone. The tunnel streams under
    it; a line that opens another port leaves the agent unreachable, so the line is what lets it through."""
    agent = agent_factory("--backend", "sim", "--node", "spark-ssh", "--interval", "0.05")
    port = agent.port if opened == "agent" else free_port()
    key = (tmp_path / "client_ed25519.pub").read_text()
    options = f'restrict,command="/usr/sbin/nologin",port-forwarding,permitopen="127.0.0.1:{port}"'
    (tmp_path / "authorized_keys").write_text(f"{options} {key}")
    store = Store(tmp_path / "c.db")
    async with aiohttp.ClientSession() as session:
        link = await _tunnel_for(sshd, agent.port, store, session, 3.0)
        if opened == "other":  # refused by the key's line, said as one of the two things to check
            with pytest.raises(LinkError, match=rf'permit it \(permitopen="127\.0\.0\.1:{agent.port}"\)\?$'):
                await link._connected_session()
    assert store.count_samples("spark-ssh") >= 10 if opened == "agent" else store.count_samples() == 0
    store.close()


async def test_wrong_host_key_is_refused(
    sshd: dict[str, Any], agent_factory: Any, tmp_path: pathlib.Path
) -> None:
    """A key that changed (a reinstalled node, or someone in between) and a host not yet known were said
    alike, "checked against FILE; nodes.toml's known_hosts names another" (it named that very file). Each
    now says what the file holds and what to do."""
    agent = agent_factory("--backend", "sim", "--node", "spark-ssh", "--interval", "0.5")
    store = Store(tmp_path / "c.db")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    entry = f"[127.0.0.1]:{sshd['port']}"
    said = {}
    async with aiohttp.ClientSession() as session:
        for known in (sshd["wrong_known_hosts"], empty):
            link = SshTunnelLink(
                spec(sshd, agent.port, known), store, session, holder="t", desired_interval=lambda: None
            )
            with pytest.raises(LinkError, match="ssh") as refused:
                await link._connected_session()
            said[known] = str(refused.value)
    assert said[sshd["wrong_known_hosts"]].endswith(
        f"({sshd['wrong_known_hosts']} holds another key for {entry}: the host's key changed (a reinstalled"
        f" node, or someone in between); once its new key's fingerprint is checked: ssh-keygen -R '{entry}'"
        f" -f {sshd['wrong_known_hosts']})"
    ), said
    assert said[empty].endswith(
        f"({empty} has no key for {entry}: add it once its fingerprint is checked (ssh-keyscan -p"
        f" {sshd['port']} 127.0.0.1 shows it))"
    ), said
    assert store.count_samples() == 0
    store.close()


Offers = list[tuple[int, ClockOffset | None]]


def _exec_link(
    sshd: dict[str, Any], store: Store, session: aiohttp.ClientSession, offers: Offers, before: str = ""
) -> SshExecLink:
    """An exec link to a sim agent (1 s configured, leased to 20 Hz) whose remote-write offers land in
    ``offers`` as (samples, estimate); ``before``: a shell command run first, in the same session."""
    command = (
        f"{sys.executable} -m sparkwatch_agent stream --stdio --backend sim --node spark-exec --interval 1"
    )
    if before:
        command = f"sh -c '{before}; exec {command}'"
    node = NodeSpec(
        name="spark-exec",
        ssh=f"{os.environ.get('USER', 'root')}@127.0.0.1",
        ssh_port=sshd["port"],
        client_keys=(sshd["key"],),
        known_hosts=sshd["known_hosts"],
        mode="exec",
        exec_command=command,
    )
    link = make_link(
        node,
        store,
        session,
        holder="t",
        sample_sink=lambda _node, _hello, frames, offset: offers.append((len(frames), offset)),
        desired_interval=lambda: 0.05,
        probe_every_s=0.5,
        probes=4,
        backoff=ExponentialBackoff(initial_s=0.1, maximum_s=0.5),
    )
    assert isinstance(link, SshExecLink)
    return link


async def _run_for(link: SshExecLink, seconds: float, until: Any = None) -> None:
    """Run the link ``seconds``; with ``until``, until ``until()`` holds instead, ``seconds`` at most."""
    task = asyncio.create_task(link.run())
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline and not (until is not None and until()):
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_exec_mode_runs_the_agent_over_ssh(sshd: dict[str, Any], tmp_path: pathlib.Path) -> None:
    """`mode = "exec"`: the coordinator starts `sparkwatch-agent stream --stdio` through sshd, probes the
    clock over stdin/stdout and raises the interval with a lease command. Nothing is stored before the
    session's first probe (slowed here to 1 s, a probe over a slow network), so every stored sample goes to
    remote write with a clock estimate."""
    store = Store(tmp_path / "c.db")
    offers: Offers = []
    async with aiohttp.ClientSession() as session:
        link = _exec_link(sshd, store, session, offers)
        probe = link.probe_clock

        async def slow_first_probe() -> tuple[ClockOffset, str]:
            if link.state.offset is None:
                await asyncio.sleep(1.0)
            return await probe()

        link.probe_clock = slow_first_probe  # type: ignore[method-assign]
        # until 20 samples (an agent started over ssh on a loaded machine can take seconds to come up)
        await _run_for(link, 30.0, until=lambda: (store.latest_boot("spark-exec") or ("", 0))[1] >= 20)
    boot, last = store.latest_boot("spark-exec") or ("", 0)
    assert last >= 20
    # 1 s configured; the lease over stdin made it 20 Hz: the newest samples' stamps 50 ms apart
    t_mono = store.boot_samples("spark-exec", boot).read("t_mono_ns", 0, 2**62).columns["t_mono_ns"]
    apart_ms = np.diff(np.sort(t_mono)[-10:]) / 1e6
    assert np.median(apart_ms) == pytest.approx(50, abs=5), apart_ms
    assert store.count_samples("spark-exec") == last == sum(n for n, _ in offers)
    assert all(offset is not None for _, offset in offers), offers
    assert link.state.offset is not None and abs(link.state.offset.offset_ns) < 100_000_000
    assert link.state.transport == "ssh-exec" and link.state.error is None
    store.close()


async def test_an_exec_session_whose_first_probe_fails_stores_its_samples_but_offers_none(
    sshd: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """Its agent's boot has no clock estimate: what it sent is stored (as every sample is), never handed to
    remote write, which would have no clock to stamp it with; the next session's samples are offered."""
    store = Store(tmp_path / "c.db")
    offers: Offers = []
    async with aiohttp.ClientSession() as session:
        link = _exec_link(sshd, store, session, offers)
        probe, failed = link.probe_clock, []

        async def first_probe_fails() -> tuple[ClockOffset, str]:
            if not failed:
                await asyncio.sleep(1.0)  # the agent streams meanwhile
                failed.append(True)
                raise LinkError("clock probe over stdio timed out")
            return await probe()

        link.probe_clock = first_probe_fails  # type: ignore[method-assign]
        await _run_for(link, 4.0)
    offered = sum(n for n, _ in offers)
    assert failed and 0 < offered < store.count_samples("spark-exec"), (offered, offers)
    assert all(offset is not None for _, offset in offers), offers
    store.close()


async def test_an_exec_agent_that_writes_much_on_stderr_still_streams(
    sshd: dict[str, Any], tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """asyncssh counts unread stderr against the channel's window with stdout: past 2 MiB unread (an agent
    that logs a traceback at every tick), its frames stopped, and each session ended as a stalled one."""
    store = Store(tmp_path / "c.db")
    offers: Offers = []
    caplog.set_level("INFO", logger="sparkwatch.links.ssh_link")
    three_mib = 'head -c 3145728 /dev/zero | tr "\\0" x >&2'
    async with aiohttp.ClientSession() as session:
        link = _exec_link(sshd, store, session, offers, before=f"echo starting >&2; {three_mib}")
        await _run_for(link, 30.0, until=lambda: (store.latest_boot("spark-exec") or ("", 0))[1] >= 10)
    assert (store.latest_boot("spark-exec") or ("", 0))[1] >= 10
    assert "node spark-exec: agent says: starting" in caplog.text
    store.close()


def test_exec_lines_are_cut_from_chunks_and_an_endless_line_is_dropped() -> None:
    """The exec link reads the agent's stdout in chunks: lines that span chunks come out whole, and a line
    that never ends is dropped as it arrives rather than held in memory."""
    cutter = _LineCutter()
    assert cutter.cut('{"a": 1}\n{"b"') == ('{"a": 1}', False)
    assert cutter.cut(": 2}\n") == ('{"b": 2}', False)
    assert cutter.cut("x" * (MAX_LINE_CHARS + 1)) == ("", True)
    assert cutter.cut("x" * 1000) == ("", False)  # still the same long line: dropped, counted once
    assert cutter.cut('xx\n{"c": 3}\n') == ('{"c": 3}', False)


class _BusyStdout:
    """An agent's stdout that always has the next line ready: every read completes on the next turn."""

    async def read(self, _n: int) -> str:
        await asyncio.sleep(0)
        return "\n"


class _BusyProcess:
    def __init__(self) -> None:
        self.stdout = _BusyStdout()
        self.exit_status = None


async def test_the_exec_reader_ends_when_cancelled_while_lines_keep_arriving(tmp_path: pathlib.Path) -> None:
    """A cancel that lands in the turn a read completes must still end the reader (3.11's wait_for lost
    such a cancel, and the link's `run()` then never returned: a CI hang)."""
    node = NodeSpec(name="spark-exec", ssh="root@127.0.0.1", mode="exec", exec_command="agent")
    store = Store(tmp_path / "c.db")
    async with aiohttp.ClientSession() as session:
        link = make_link(node, store, session, holder="t", desired_interval=lambda: None)
        assert isinstance(link, SshExecLink)
        for delay_turns in range(40):  # cancel at every phase of the read's turn
            process = _BusyProcess()
            reader = asyncio.create_task(link._read_frames(process))  # type: ignore[arg-type]
            for _ in range(delay_turns):
                await asyncio.sleep(0)
            reader.cancel()
            done, _ = await asyncio.wait([reader], timeout=2.0)
            assert done == {reader} and reader.cancelled(), f"reader outlived its cancel ({delay_turns})"
    store.close()


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("/opt/not-there/sparkwatch-agent stream --stdio", "(exit 127): "),  # the shell's words after it
        (f"{sys.executable} -m sparkwatch_agent stream --stdio --bogus", "unrecognized arguments: --bogus"),
        (  # what nologin says, on stdout: the user the sysusers file makes has no login shell
            "echo 'This account is currently not available.'; exit 1",
            "(exit 1): it wrote 'This account is currently not available.' before any frame (does the SSH"
            " user have a login shell?)",
        ),
        (  # a long log, then its end: the reason is the end (it was 300 characters from the log's middle)
            f"{sys.executable} -c \"import sys; [print('INFO tick', i, 'ok', file=sys.stderr) for i in"
            " range(500)]; raise RuntimeError('the reader broke')\"",
            "ok INFO tick 499 ok Traceback (most recent call last): File",
        ),
    ],
)
async def test_an_exec_command_that_ends_at_once_says_why(
    sshd: dict[str, Any], tmp_path: pathlib.Path, command: str, words: str
) -> None:
    """Not "clock probe over stdio timed out" 5 s later: the exit status and the agent's own words."""
    store = Store(tmp_path / "c.db")
    async with aiohttp.ClientSession() as session:
        link = _exec_link(sshd, store, session, [])
        link.spec = dataclasses.replace(link.spec, exec_command=command)
        started = time.monotonic()
        with pytest.raises(LinkError) as ended:
            await link._connected_session()
    assert time.monotonic() - started < PROBE_TIMEOUT_S
    assert str(ended.value).startswith("agent process ended (exit ") and words in str(ended.value)
    assert "Traceback" not in words or str(ended.value).endswith("RuntimeError: the reader broke")
    store.close()


def test_a_crash_looping_agents_stderr_is_logged_once_until_one_streams(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each redial's agent printed its usage again, and each session logged its 20 lines afresh."""
    caplog.set_level("INFO", logger="sparkwatch.links.ssh_link")
    lines = ssh_link._StderrLog("n")
    for _session in range(3):  # three agents that each print a 12-line usage and exit
        for k in range(12):
            lines.say(f"usage line {k}")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == ssh_link.STDERR_LOG_LINES + 1
    assert said[-1] == "node n: the agent's further stderr is not logged until one streams"
    lines.renew()  # a session streamed
    lines.say("started again")
    assert caplog.records[-1].getMessage() == "node n: agent says: started again"


async def test_a_session_whose_probes_keep_failing_ends_as_stalled(
    sshd: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """A stopped SSH session streams nothing and answers no probe: three failed rounds in a row end it (the
    link then says it is down and redials), where it stayed "streaming" with a growing lag."""
    store = Store(tmp_path / "c.db")
    async with aiohttp.ClientSession() as session:
        link = _exec_link(sshd, store, session, [])
        probe, calls = link.probe_clock, []

        async def then_silence() -> tuple[ClockOffset, str]:
            calls.append(True)
            if len(calls) == 1:
                return await probe()
            raise LinkError("clock probe over stdio timed out")

        link.probe_clock = then_silence  # type: ignore[method-assign]
        started = time.monotonic()
        with pytest.raises(
            LinkError, match=r"^stalled: 3 clock probes in a row failed, the last: clock probe over"
        ):
            await link._connected_session()
    assert len(calls) == 4 and time.monotonic() - started < 10  # 3 rounds 0.5 s apart after the first
    store.close()


async def test_a_tunnel_to_a_port_nothing_listens_on_says_so(
    sshd: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """The node's sshd refuses the forward's far end and the local socket closes: "Server disconnected"
    said nothing of why."""
    port = free_port()
    store = Store(tmp_path / "c.db")
    async with aiohttp.ClientSession() as session:
        link = SshTunnelLink(
            spec(sshd, port, sshd["known_hosts"]), store, session, holder="t", desired_interval=lambda: None
        )
        with pytest.raises(LinkError, match=rf"the forward to 127\.0\.0\.1:{port} on the node was closed"):
            await link._connected_session()
    store.close()


def test_a_host_key_listed_by_address_or_not_at_all_is_named_as_it_is(tmp_path: pathlib.Path) -> None:
    """A node named by host name whose known_hosts line lists it by address (as ssh writes it when it was
    first reached by address) with another key was told "has no key: add it"; an IPv6 host on port 22 was
    named ``[::1]``, which ssh does not write; a missing default file said nothing of its absence."""
    keygen(tmp_path / "k")
    key = (tmp_path / "k.pub").read_text().rsplit(" ", 1)[0]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:2222 {key}\n::1 {key}\n")
    by_name = NodeSpec(name="n", ssh="u@spark-1.lan", ssh_port=2222, known_hosts=known)
    assert host_key_reason(by_name, ["127.0.0.1"]).startswith(
        f"{known} holds another key for [spark-1.lan]:2222"
    )
    assert host_key_reason(by_name, ["10.0.0.9"]).startswith(f"{known} has no key for [spark-1.lan]:2222")
    v6 = NodeSpec(name="n", ssh="u@[::1]", known_hosts=known)
    assert host_key_reason(v6).startswith(f"{known} holds another key for ::1:")
    absent = dataclasses.replace(v6, known_hosts=tmp_path / "nowhere")
    assert host_key_reason(absent).startswith(f"{tmp_path / 'nowhere'} does not exist")


async def test_an_ssh_config_cannot_turn_the_host_key_check_off(
    sshd: dict[str, Any], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nodes.toml names no known_hosts, and ~/.ssh/config says ``UserKnownHostsFile none``: asyncssh took
    that for "check nothing" and the link connected to a host it had no key for, without a word. Only
    ``insecure_skip_host_key_check`` turns the check off; ~/.ssh/known_hosts is what it checks."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host *\n  UserKnownHostsFile none\n")
    monkeypatch.setenv("HOME", str(home))
    store = Store(tmp_path / "c.db")
    unchecked = dataclasses.replace(spec(sshd, free_port(), sshd["known_hosts"]), known_hosts=None)
    entry = f"[127.0.0.1]:{sshd['port']}"
    async with aiohttp.ClientSession() as session:
        link = SshTunnelLink(unchecked, store, session, holder="t", desired_interval=lambda: None)
        with pytest.raises(LinkError) as missing:
            await link._connected_session()
        (home / ".ssh" / "known_hosts").write_text(sshd["wrong_known_hosts"].read_text())
        with pytest.raises(LinkError) as changed:
            await link._connected_session()
    assert str(missing.value).endswith(
        "(~/.ssh/known_hosts does not exist: nothing to check the host's key against; set known_hosts in"
        " nodes.toml)"
    ), missing.value
    assert f"~/.ssh/known_hosts holds another key for {entry}" in str(changed.value)
    store.close()


async def test_a_node_that_never_answers_is_given_up_on_in_seconds(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node that is off, or a firewall that drops the connection: a dial hung for the system's TCP
    timeout (about 2 min); an sshd that never sent its banner held it for asyncssh's 2 min to log in.
    (The 10 s limit is 1 s here.)"""
    monkeypatch.setattr(ssh_link, "CONNECT_TIMEOUT_S", 1.0)
    silent = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)  # takes the TCP, never speaks
    port = silent.sockets[0].getsockname()[1]
    (tmp_path / "kh").write_text("")
    node = NodeSpec(name="n", ssh="u@127.0.0.1", ssh_port=port, known_hosts=tmp_path / "kh")
    store = Store(tmp_path / "c.db")
    try:
        async with aiohttp.ClientSession() as session:
            link = SshTunnelLink(node, store, session, holder="t", desired_interval=lambda: None)
            t0 = time.monotonic()
            with pytest.raises(LinkError) as refused:
                await link._connected_session()
            took = time.monotonic() - t0
    finally:
        silent.close()
        store.close()
    assert str(refused.value) == (
        f"ssh u@127.0.0.1: no SSH session within 1 s (the node is off, a firewall drops port {port}, or its"
        " login is that slow)"
    )
    assert 0.9 < took < 10
