"""SSH links. "tunnel" (default): an asyncssh connection forwards a local loopback port to the agent's own
loopback port on the node and the WebSocket link runs through it — no port is opened on the node. "exec":
runs ``sparkwatch-agent stream --stdio`` on the node and reads its frames from stdout; clock probes and
interval leases travel as command lines on stdin. Host keys are checked against known_hosts; skipping that
takes the loudly named ``insecure_skip_host_key_check = true`` in nodes.toml.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from sparkwatch.core.clock import ClockOffset, TimeProbe, estimate_offset
from sparkwatch.links.asyncssh_quiet import asyncssh
from sparkwatch.links.nodes_file import DEFAULT_SSH_PORT, NodeSpec
from sparkwatch.links.ssh_files import DEFAULT_KNOWN_HOSTS, known_hosts_option, known_hosts_path
from sparkwatch.links.state import LinkError
from sparkwatch.links.ws_link import PROBE_TIMEOUT_S, WsLink
from sparkwatch.wire import MAX_LINE_CHARS, HelloFrame, Rejected, TimeFrame
from sparkwatch_agent.shared.protocol import FRAME_TIME, LEASE_TTL_S

log = logging.getLogger(__name__)

EXEC_BATCH = 200
READ_CHARS = 65536
EXEC_FLUSH_S = 0.2
#: How long an SSH connection may take to be made: TCP, key exchange and authentication (asyncssh has no
#: limit of its own but the system's TCP one, about 2 min to a node that is off, and 2 min to log in).
CONNECT_TIMEOUT_S = 10.0
#: Of an ended agent's stderr, this much goes into the link's error (one line, whitespace folded).
STDERR_CHARS = 300
#: ... kept of its stderr's end to find it in (a subcommand's usage comes before argparse's error line).
STDERR_READ_CHARS = 4096
#: Of a link's exec agents' stderr lines, this many go to the coordinator's log until a session streams
#: again (an agent that fails at every tick writes a traceback each time; one that cannot start, its usage).
STDERR_LOG_LINES = 20


def connect_options(spec: NodeSpec) -> dict[str, Any]:
    """asyncssh.connect arguments for a node."""
    assert spec.ssh is not None
    user, _, host = spec.ssh.rpartition("@")
    options: dict[str, Any] = {"host": host, "port": spec.ssh_port}
    if user:
        options["username"] = user
    if spec.client_keys:
        options["client_keys"] = [str(k) for k in spec.client_keys]
    if spec.insecure_skip_host_key_check:
        log.warning("node %s: SSH HOST KEY CHECK DISABLED (insecure_skip_host_key_check = true)", spec.name)
        options["known_hosts"] = None
    else:  # always named: ~/.ssh/config's UserKnownHostsFile none turned the check off (ssh_files.py)
        options["known_hosts"] = known_hosts_option(spec.known_hosts)
    options["connect_timeout"] = CONNECT_TIMEOUT_S
    return options


async def ssh_error(spec: NodeSpec, exc: Exception) -> LinkError:
    """An SSH failure in one line; a host key not trusted says what the known_hosts file it was checked in
    holds for the host (nothing, or another key) and what to do."""
    said = f"ssh {spec.ssh}: {exc}"
    if isinstance(exc, ValueError) and "known hosts" in str(exc):  # a file changed since nodes.toml was read
        said += f" (known_hosts: {known_hosts_path(spec.known_hosts) or DEFAULT_KNOWN_HOSTS})"
    if isinstance(exc, asyncssh.KeyImportError):  # changed since nodes.toml was read (checked there)
        said += f" (client_keys: {', '.join(map(str, spec.client_keys))})"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        said += f" ({host_key_reason(spec, await _addresses(_host(spec), spec.ssh_port))})"
    return LinkError(said)


def host_key_reason(spec: NodeSpec, addresses: Sequence[str] = ()) -> str:
    """Why the host's key was not trusted: the known_hosts file is missing, has no entry for the host (a
    new node: add its key, having checked its fingerprint), or has another key for it by name or by one of
    ``addresses`` (a reinstalled node, or someone in between: never to be added blindly). asyncssh says
    "not trusted" of each alike."""
    host = _host(spec)
    entry = host if spec.ssh_port == DEFAULT_SSH_PORT else f"[{host}]:{spec.ssh_port}"  # as ssh writes it
    shown = str(spec.known_hosts or DEFAULT_KNOWN_HOSTS)
    path = known_hosts_path(spec.known_hosts) or Path(shown)
    try:
        known = asyncssh.read_known_hosts(str(path))
        found = [known.match(host, address, spec.ssh_port)[:2] for address in (*addresses, "")]
    except FileNotFoundError:
        return (
            f"{shown} does not exist: nothing to check the host's key against; set known_hosts in nodes.toml"
        )
    except (OSError, ValueError, asyncssh.Error):
        return f"checked against {shown}"
    if any(keys or cas for keys, cas in found):
        return (
            f"{shown} holds another key for {entry}: the host's key changed (a reinstalled node, or someone"
            f" in between); once its new key's fingerprint is checked: ssh-keygen -R '{entry}' -f {shown}"
        )
    return (
        f"{shown} has no key for {entry}: add it once its fingerprint is checked"
        f" (ssh-keyscan -p {spec.ssh_port} {host} shows it)"
    )


async def _connect(spec: NodeSpec) -> asyncssh.SSHClientConnection:
    """The node's SSH connection, logged in; one not made within :data:`CONNECT_TIMEOUT_S` is a
    LinkError that says so (a timeout later, inside a session, is that session's)."""
    try:
        return await asyncssh.connect(**connect_options(spec))
    except TimeoutError:
        why = f"the node is off, a firewall drops port {spec.ssh_port}, or its login is that slow"
        raise LinkError(f"ssh {spec.ssh}: no SSH session within {CONNECT_TIMEOUT_S:g} s ({why})") from None


def _host(spec: NodeSpec) -> str:
    """The node's SSH host as known_hosts names it: an IPv6 address without its brackets."""
    assert spec.ssh is not None
    return spec.ssh.rpartition("@")[2].removeprefix("[").removesuffix("]")


async def _addresses(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (known_hosts may list a node by address), none when it cannot."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return sorted({str(info[4][0]) for info in found})


class SshTunnelLink(WsLink):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state.transport = "ssh"

    async def _connected_session(self) -> None:
        try:
            async with await _connect(self.spec) as conn:
                listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", self.spec.agent_port)
                try:
                    self._base = f"http://127.0.0.1:{listener.get_port()}"
                    await super()._connected_session()
                except aiohttp.ServerDisconnectedError:  # the node refused the forward's far end
                    far = f"127.0.0.1:{self.spec.agent_port}"
                    raise LinkError(
                        f"ssh {self.spec.ssh}: the forward to {far} on the node was closed at once: is the"
                        " agent listening there (agent_port), and does the key's line in the node's"
                        f' authorized_keys permit it (permitopen="{far}")?'
                    ) from None
                finally:
                    listener.close()
        except (asyncssh.Error, asyncssh.KeyImportError, OSError, ValueError) as exc:
            raise await ssh_error(self.spec, exc) from exc


class SshExecLink(WsLink):
    """Each session starts a fresh agent on the node (a new boot): nothing to resume, nothing replayed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state.transport = "ssh-exec"
        self._process: asyncssh.SSHClientProcess[str] | None = None
        self._pending: dict[int, asyncio.Future[TimeFrame]] = {}
        self._ids = itertools.count(1)
        self._probed = False  # this session's first clock probe is done (stored samples wait for it)
        self._stderr_log = _StderrLog(self.spec.name)
        self._stderr = _Stderr(self._stderr_log)

    async def _connected_session(self) -> None:
        try:
            async with await _connect(self.spec) as conn:
                # not `async with` for the process: its exit waits for the remote end to close the channel,
                # which an agent busy writing samples never does; closing the connection ends the session
                process = await conn.create_process(self.spec.exec_command)
                self._process = process
                self._probed = False
                self._stderr = _Stderr(self._stderr_log)
                drain = asyncio.create_task(self._stderr.drain(process.stderr))
                reader = asyncio.create_task(self._read_frames(process))
                try:
                    await self._first_probe(reader)
                    self._probed = True
                    await self._run_helpers(reader)
                finally:
                    reader.cancel()
                    drain.cancel()
                    await asyncio.gather(reader, drain, return_exceptions=True)
                    self._process = None
                    process.close()
                    conn.abort()
        except (asyncssh.Error, asyncssh.KeyImportError, OSError, ValueError) as exc:
            raise await ssh_error(self.spec, exc) from exc

    async def _first_probe(self, reader: asyncio.Task[None]) -> None:
        """The session's first clock probe, unless the agent ends first: a command that is not installed,
        or refuses its flags, exits at once, and its own words say why (a probe would time out 5 s later
        and say only that)."""
        probe = asyncio.create_task(self.probe_clock())
        await asyncio.wait({probe, reader}, return_when=asyncio.FIRST_COMPLETED)
        if not probe.done():
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
            reader.result()  # the agent's end, as a LinkError
        await probe

    async def _send(self, command: dict[str, Any]) -> None:
        if self._process is None:
            raise LinkError("no agent process")
        self._process.stdin.write(orjson.dumps(command).decode() + "\n")
        await self._process.stdin.drain()

    async def _read_frames(self, process: asyncssh.SSHClientProcess[str]) -> None:
        def on_hello(_hello: HelloFrame) -> None:
            self._stderr_log.renew()
            self._streaming()

        ingest = self._ingest(on_hello, hold_s=EXEC_FLUSH_S, batch=EXEC_BATCH)
        lines = _LineCutter()
        first_line = ""  # what the process wrote first, while no hello came: a login shell's refusal
        try:
            while True:
                chunk = None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(EXEC_FLUSH_S):
                        chunk = await process.stdout.read(READ_CHARS)
                if chunk == "":
                    raise LinkError(await _ended(process, self._stderr, "" if ingest.boot else first_line))
                text, overlong = lines.cut(chunk or "")
                if not first_line and ingest.boot is None and text.strip():
                    first_line = text.strip().splitlines()[0][:STDERR_CHARS]
                if overlong:
                    ingest.reject(Rejected("too_long", f"a line of over {MAX_LINE_CHARS} characters", None))
                for reply in ingest.feed(text):
                    future = self._pending.pop(reply.id, None)
                    if future is not None and not future.done():
                        future.set_result(reply)
                # not before the session's clock probe: what is stored goes on to remote write, stamped
                # by the clock estimate for its boot, and each session's agent is a boot with none until then
                if self._probed:
                    ingest.settle(self._promptly())
        finally:  # each exec session is a new boot: what we hold is not replayable
            ingest.flush_held(offer=self._probed)

    async def probe_clock(self) -> tuple[ClockOffset, str]:
        probes: list[TimeProbe] = []
        boot = ""
        loop = asyncio.get_running_loop()
        for _ in range(self._probes):
            probe_id = next(self._ids)
            future: asyncio.Future[TimeFrame] = loop.create_future()
            self._pending[probe_id] = future
            t_send = self._now()
            try:
                await self._send({"type": FRAME_TIME, "id": probe_id})
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    reply = await future
            except TimeoutError:
                raise LinkError("clock probe over stdio timed out") from None
            finally:
                self._pending.pop(probe_id, None)
            probes.append(TimeProbe(t_send, reply.t_wall_ns, self._now(), reply.t_mono_ns))
            boot = reply.boot_id
        offset = estimate_offset(probes)
        self._record_offset(boot, offset)
        return offset, boot

    async def _put_lease(self, interval_s: float) -> None:
        await self._send(
            {"type": "interval", "holder": self._holder, "interval_s": interval_s, "ttl_s": LEASE_TTL_S}
        )

    async def _release_lease(self) -> None:
        await self._send({"type": "release", "holder": self._holder})


class _Stderr:
    """An exec agent's stderr, read for its whole session: asyncssh counts what is unread of it against
    the channel's window with stdout, so an agent that kept writing there (a traceback at every tick)
    stalled its frames once 2 MiB were unread, and the session ended as a stalled one, over and over.
    Its lines go to the link's :class:`_StderrLog`; its last whole lines are kept for why the agent
    ended."""

    def __init__(self, lines: _StderrLog) -> None:
        self.text = ""  # the last whole lines written, STDERR_READ_CHARS at most
        self.closed = asyncio.Event()
        self._lines = lines
        self._partial = ""  # a line not ended yet

    async def drain(self, stream: asyncssh.SSHReader[str]) -> None:
        try:
            while chunk := await stream.read(READ_CHARS):
                kept = self.text + chunk
                if len(kept) > STDERR_READ_CHARS:  # from a line's start: not the middle of one
                    kept = kept[-STDERR_READ_CHARS:]
                    kept = kept[kept.find("\n") + 1 :]
                self.text = kept
                *whole, partial = (self._partial + chunk).split("\n")
                self._partial = partial[:STDERR_CHARS]
                for line in whole:
                    self._lines.say(line)
        except (asyncssh.Error, OSError):
            pass
        finally:
            self._lines.say(self._partial)
            self.closed.set()


class _StderrLog:
    """A link's exec agents' stderr lines in the coordinator's log: :data:`STDERR_LOG_LINES` of them until
    a session streams again (a crash-looping agent's usage was logged again at every redial)."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._left = STDERR_LOG_LINES

    def say(self, line: str) -> None:
        if not line.strip() or self._left <= 0:
            return
        self._left -= 1
        log.info("node %s: agent says: %s", self._node, line.strip()[:STDERR_CHARS])
        if self._left == 0:
            log.info("node %s: the agent's further stderr is not logged until one streams", self._node)

    def renew(self) -> None:
        self._left = STDERR_LOG_LINES


async def _ended(process: asyncssh.SSHClientProcess[str], stderr: _Stderr, stdout_line: str = "") -> str:
    """Why the agent's process ended: its exit status, what it wrote on stderr last (a shell's "not found",
    argparse's usage error) and ``stdout_line``, the first line it wrote instead of frames (nologin's
    "This account is currently not available.": a user with no login shell)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(1.0):
            await stderr.closed.wait()
    said = _gist(stderr.text)
    with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
        async with asyncio.timeout(1.0):  # the exit status may come a moment after stderr's end
            await process.wait_closed()
    status = "no exit status" if process.exit_status is None else f"exit {process.exit_status}"
    if stdout_line:
        said = f"{said}; " if said else ""
        said += f"it wrote {stdout_line!r} before any frame (does the SSH user have a login shell?)"
    return f"agent process ended ({status})" + (f": {said}" if said else "")


def _gist(stderr: str) -> str:
    """What a process that ended said on stderr (its last lines, :class:`_Stderr`), on one line: an
    argparse error's own line (after a usage that can run over many lines), else the end of it (a
    traceback's last line)."""
    errors = [line.strip() for line in stderr.splitlines() if ": error: " in line]
    return errors[-1][:STDERR_CHARS] if errors else " ".join(stderr.split())[-STDERR_CHARS:]


class _LineCutter:
    """Whole lines out of a stream read in chunks, never holding more than ``MAX_LINE_CHARS`` of a line
    that does not end: the rest of such a line is dropped as it arrives."""

    def __init__(self) -> None:
        self._pending = ""
        self._dropping = False

    def cut(self, chunk: str) -> tuple[str, bool]:
        """The complete lines the chunk finishes, and whether a line was found too long."""
        overlong = False
        if self._dropping:
            end = chunk.find("\n")
            if end < 0:
                return "", False
            chunk, self._dropping = chunk[end + 1 :], False
        data = self._pending + chunk
        cut = data.rfind("\n")
        text, self._pending = (data[:cut], data[cut + 1 :]) if cut >= 0 else ("", data)
        if len(self._pending) > MAX_LINE_CHARS:
            self._pending, self._dropping, overlong = "", True, True
        return text, overlong
