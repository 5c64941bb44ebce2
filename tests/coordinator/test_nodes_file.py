"""`nodes.toml` is checked key by key when it is loaded: a wrong type or range is one error naming the node
and the key, before anything is dialled."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sparkwatch.links.nodes_file import (
    NodesFileError,
    NodeSpec,
    check_secret_files,
    load_nodes,
    load_nodes_file,
    parse_nodes,
)
from sparkwatch.meters.spec import MeterSpec

WS = 'url = "ws://10.0.0.1:9464"\n'
SSH = 'ssh = "ubuntu@spark-2"\n'


def refusal(text: str) -> str:
    with pytest.raises(NodesFileError) as caught:
        parse_nodes(text)
    return str(caught.value)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # ports: integers (not bools, not strings) within 1–65535
        (SSH + 'port = "abc"', 'nodes.spark-2.port: must be an integer 1–65535, got "abc"'),
        (SSH + "port = true", "nodes.spark-2.port: must be an integer 1–65535, got true"),
        (SSH + "port = 0", "nodes.spark-2.port: must be an integer 1–65535, got 0"),
        (SSH + "port = 65536", "nodes.spark-2.port: must be an integer 1–65535, got 65536"),
        (SSH + "port = 22.0", "nodes.spark-2.port: must be an integer 1–65535, got 22.0"),
        (SSH + "agent_port = -1", "nodes.spark-2.agent_port: must be an integer 1–65535, got -1"),
        # url: a scheme we dial, a host, a port urlparse can read (its .port raises on the others)
        *(
            (
                'url = "' + url + '"',
                f"nodes.spark-2.url: must be ws://host[:port] (or wss, http, https) "
                f'with a port 1–65535, got "{url}"',
            )
            for url in (
                "ws://h:99999",
                "ws://h:abc",
                "ws://h:0",
                "ws://[::1",
                "ftp://h:21",
                "ws://:9464",
                "10.0.0.1:9464",
                "ws://h :9464",
            )
        ),
        (
            "url = 9464",
            "nodes.spark-2.url: must be ws://host[:port] (or wss, http, https) with a port 1–65535, got 9464",
        ),
        (
            'url = "ws://h:9464/?token=SECRETQ"',  # refused without the secret echoed
            "nodes.spark-2.url: must not have a query or fragment (not shown: it may hold a secret)",
        ),
        (
            'url = "ws://127.0.0.1:21001/v1/stream"',
            'nodes.spark-2.url: is the agent\'s base, without /v1/…: "ws://127.0.0.1:21001"',
        ),
        (
            'url = "wss://h/agents/spark-2/v1/"',
            'nodes.spark-2.url: is the agent\'s base, without /v1/…: "wss://h/agents/spark-2"',
        ),
        (
            'url = "ws://me:secret@h"',
            "nodes.spark-2.url: must not hold a user or password: the agent's token goes in token_file",
        ),
        # what only an SSH node has, beside url
        (
            WS + 'mode = "exec"',
            "nodes.spark-2.mode: exec mode only applies to ssh nodes; this node has "
            'url = "ws://10.0.0.1:9464"',
        ),
        (
            WS + "port = 9464",
            "nodes.spark-2.port: only applies to ssh nodes; this node has url (give the "
            "agent's port in the url)",
        ),
        (
            WS + 'known_hosts = "/k"',
            "nodes.spark-2.known_hosts: only applies to ssh nodes; this node has url",
        ),
        (
            WS + 'exec_command = "x"',
            'nodes.spark-2.exec_command: only applies to ssh nodes with mode = "exec"; this node has url',
        ),
        # paths and the rest
        (WS + "token_file = 5", "nodes.spark-2.token_file: must be a file path (a non-empty string), got 5"),
        (
            WS + 'token_file = ""',
            'nodes.spark-2.token_file: must be a file path (a non-empty string), got ""',
        ),
        (
            SSH + "known_hosts = false",
            "nodes.spark-2.known_hosts: must be a file path (a non-empty string), got false",
        ),
        (
            SSH + 'client_keys = ["/k", 3]',
            'nodes.spark-2.client_keys: must be a file path or a list of file paths, got ["/k", 3]',
        ),
        (
            SSH + "client_keys = {a = 1}",
            "nodes.spark-2.client_keys: must be a file path or a list of file paths, got a table",
        ),
        (SSH + 'mode = "shell"', 'nodes.spark-2.mode: must be "tunnel" or "exec", got "shell"'),
        (
            SSH + 'insecure_skip_host_key_check = "false"',
            'nodes.spark-2.insecure_skip_host_key_check: must be true or false (unquoted), got "false"',
        ),
        (
            SSH + "insecure_skip_host_key_check = 0",
            "nodes.spark-2.insecure_skip_host_key_check: must be true or false (unquoted), got 0",
        ),
        (
            SSH + 'mode = "exec"\nexec_command = "  "',
            'nodes.spark-2.exec_command: must be a non-empty command line, got "  "',
        ),
        (
            SSH + 'mode = "exec"\nexec_command = []',
            "nodes.spark-2.exec_command: must be a non-empty command line, got []",
        ),
        # a key of the other SSH mode (exec_command without mode = "exec" made a tunnel node)
        (
            SSH + 'exec_command = "agent --stdio"',
            'nodes.spark-2.exec_command: only applies to ssh nodes with mode = "exec"; this node is a tunnel',
        ),
        (
            SSH + 'mode = "exec"\nagent_port = 9000',
            'nodes.spark-2.agent_port: only applies to tunnel nodes; with mode = "exec" exec_command runs the'
            " agent",
        ),
        # ssh: "user@host" or "host"
        *(
            (f'ssh = "{ssh}"', f'nodes.spark-2.ssh: must be "user@host" or "host", got "{ssh}"')
            for ssh in ("@spark-2", "ubuntu@", "a@b@c", "ubuntu@spark 2", "")
        ),
        *(
            (
                f'ssh = "{ssh}"',
                'nodes.spark-2.ssh: must be "user@host" or "host" (the SSH port is its own key: port = N;'
                f' an IPv6 address has no brackets, u@::1), got "{ssh}"',
            )
            for ssh in ("ubuntu@spark-2:2222", "u@[::1]", "[::1]:22")  # brackets: failed only when dialled
        ),
        ("ssh = 22", 'nodes.spark-2.ssh: must be "user@host" or "host", got 22'),
        # the table as a whole
        (
            SSH + "colour = 1",
            "nodes.spark-2.colour: unknown key (the keys are agent_port, client_keys, exec_command, "
            "insecure_skip_host_key_check, known_hosts, meter, mode, port, ssh, token_file, url)",
        ),
        (WS + SSH, 'nodes.spark-2: give exactly one of url = "ws://host:9464" or ssh = "user@host"'),
        (
            "token_file = '/t'",
            'nodes.spark-2: give exactly one of url = "ws://host:9464" or ssh = "user@host"',
        ),
    ],
)
def test_each_wrong_key_is_named_with_its_node(body: str, expected: str) -> None:
    assert refusal(f"[nodes.spark-1]\n{WS}\n[nodes.spark-2]\n{body}\n") == f"nodes.toml: {expected}"


@pytest.mark.parametrize(
    ("meter", "expected"),
    [
        (
            'kind = "tasmota"\nurl = "http://p"',
            'kind: must be one of redfish, shelly, prometheus; got "tasmota"',
        ),
        ('url = "http://p"', "kind: must be one of redfish, shelly, prometheus; it is missing"),  # not None
        (
            'kind = "shelly"\nurl = "http://p:70000"',
            'url: must be http(s)://host[:port] with a port 1–65535, got "http://p:70000"',
        ),
        (
            'kind = "shelly"\nurl = "http://p:x"',
            'url: must be http(s)://host[:port] with a port 1–65535, got "http://p:x"',
        ),
        (
            'kind = "shelly"\nurl = "http://admin:pw@p"',
            "url: must not hold a user or password: use username and password_file",
        ),
        ('kind = "shelly"\nurl = "http://p"\ninterval_s = "1"', 'interval_s: must be a number, got "1"'),
        (
            'kind = "shelly"\nurl = "http://p"\ninterval_s = 0.01',
            "interval_s: must be within [0.2, 60.0] s, got 0.01",
        ),
        ('kind = "shelly"\nurl = "http://p"\nrefresh_s = nan', "refresh_s: must be a number, got nan"),
        ('kind = "shelly"\nurl = "http://p"\nrefresh_s = inf', "refresh_s: must be a number, got inf"),
        (
            'kind = "shelly"\nurl = "http://p"\nrefresh_s = 0',
            "refresh_s: must be a number of seconds in (0, 3600], got 0",
        ),
        (  # the poller died on its first reading, in silence
            'kind = "shelly"\nurl = "http://p"\nrefresh_s = 1e300',
            "refresh_s: must be a number of seconds in (0, 3600], got 1e+300",
        ),
        ('kind = "shelly"\nurl = "http://p"\nid = true', "id: must be a non-negative integer, got true"),
        (
            'kind = "shelly"\nurl = "http://p"\ncomponent = "Cover"',
            'component: must be one of Switch, PM1, got "Cover"',
        ),
        ('kind = "shelly"\nurl = "http://p"\nquery = "x"', "query: unknown key for a shelly meter"),
        (
            'kind = "redfish"\nurl = "https://b"\nverify_tls = "no"',
            'verify_tls: must be true or false (unquoted), got "no"',
        ),
        (
            'kind = "redfish"\nurl = "https://b"\nusername = 7',
            "username: must be a string of 1 to 64 characters, got 7",
        ),
        (
            'kind = "prometheus"\nurl = "http://p"',
            'query: a prometheus meter needs query = "…" (one series, in watts)',
        ),
    ],
)
def test_a_wrong_meter_key_is_named_with_its_node(meter: str, expected: str) -> None:
    text = f"[nodes.spark-2]\n{WS}[nodes.spark-2.meter]\n{meter}\n"
    assert refusal(text) == f"nodes.toml: nodes.spark-2.meter.{expected}"


def test_one_meter_named_by_two_nodes_is_refused() -> None:
    """One plug under two nodes (its URL written with and without a trailing slash) counted its whole draw
    under each: 987 J of system energy for 494 J drawn."""
    plug = '[nodes.{name}.meter]\nkind = "shelly"\nurl = "{url}"\n'
    text = (
        f"[nodes.a]\n{WS}{plug.format(name='a', url='http://127.0.0.1:18080')}"
        f"[nodes.b]\n{WS.replace('10.0.0.1', '10.0.0.2')}{plug.format(name='b', url='http://127.0.0.1:18080/')}"
    )
    assert refusal(text) == (
        "nodes.toml: nodes.b.meter: the meter of nodes.a too (shelly http://127.0.0.1:18080): its draw would"
        " be counted under both nodes"
    )
    two_plugs = text.replace("18080/", "18081")
    assert [n.meter.url for n in parse_nodes(two_plugs) if n.meter] == [
        "http://127.0.0.1:18080",
        "http://127.0.0.1:18081",
    ]
    other_switch = text.replace('18080/"\n', '18080/"\nid = 1\n')  # another switch of one device: its own
    assert len(parse_nodes(other_switch)) == 2


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [
        ('url = "ws://10.0.0.1:9464"', 'url = "http://10.0.0.1:9464/"', "(http://10.0.0.1:9464/)"),
        ('url = "wss://Spark-1:443"', 'url = "wss://spark-1"', "(wss://spark-1)"),
        ('ssh = "ops@h"', 'ssh = "ops@H"\nport = 22', "(ssh ops@H port 22, agent_port 9464)"),
        (
            'ssh = "ops@h"\nmode = "exec"',
            'ssh = "ops@h"\nmode = "exec"',
            "(ssh ops@h port 22, exec_command 'sparkwatch-agent stream --stdio')",
        ),
    ],
)
def test_one_agent_named_by_two_nodes_is_refused(a: str, b: str, said: str) -> None:
    """A table copied and its url left as it was: both links streamed the one agent, and a standing
    coordinator summed the machine twice (an operator found it; only `nodes check` said so)."""
    assert refusal(f"[nodes.a]\n{a}\n[nodes.b]\n{b}\n") == (
        f"nodes.toml: nodes.b: the agent of nodes.a too {said}: one machine would be measured, and summed,"
        " as two nodes"
    )


def test_agents_told_apart_by_port_or_command_are_two_nodes() -> None:
    text = (
        '[nodes.a]\nurl = "ws://10.0.0.1:9464"\n[nodes.b]\nurl = "ws://10.0.0.1:9465"\n'
        '[nodes.c]\nssh = "h"\n[nodes.d]\nssh = "h"\nagent_port = 9465\n'
        '[nodes.e]\nssh = "h"\nmode = "exec"\nexec_command = "sparkwatch-agent stream --stdio --node e"\n'
        '[nodes.f]\nssh = "h"\nmode = "exec"\nexec_command = "sparkwatch-agent stream --stdio --node f"\n'
    )
    assert [n.name for n in parse_nodes(text)] == ["a", "b", "c", "d", "e", "f"]


def test_odd_names_are_quoted_as_toml_writes_them() -> None:
    assert refusal('[nodes."spark 2"]\nssh = "h"\nport = "22"\n') == (
        'nodes.toml: nodes."spark 2".port: must be an integer 1–65535, got "22"'
    )
    assert refusal('[nodes.a]\nssh = "h"\n"we ird" = 1\nb = 2\n').startswith(
        'nodes.toml: nodes.a: unknown keys b, "we ird" (the keys are '
    )
    assert refusal('url = "ws://h"\n[nodes.a]\nurl = "ws://h"\n') == (
        "nodes.toml: unknown top-level keys url: each node is a [nodes.NAME] table"
    )
    long = "x" * 200
    assert refusal(f'[nodes.a]\nssh = "h"\nmode = "{long}"\n').endswith('got "' + "x" * 78 + "…")
    # a 5000-character name broke the `nodes check` table, and `report --png` on its file name
    for name in ('""', "n" * 65):
        assert refusal(f'[nodes.{name}]\nssh = "h"\n').endswith(
            ": a node name must be 1 to 64 printable characters"
        )
    assert [n.name for n in parse_nodes(f'[nodes.{"n" * 64}]\nssh = "h"\n')] == ["n" * 64]


def test_every_key_is_read_into_the_spec() -> None:
    text = (
        '[nodes.a]\nssh = "ops@fe80::1"\nport = 2222\nknown_hosts = "/etc/kh"\nclient_keys = "/k1"\n'
        'mode = "exec"\ninsecure_skip_host_key_check = true\n'
        'exec_command = "agent --stdio"\n'
        '[nodes.b]\nurl = "wss://b.example:443/base"\ntoken_file = "/etc/t"\n'
        '[nodes.b.meter]\nkind = "shelly"\nurl = "http://p:8080/"\nrefresh_s = 2\n'
        '[nodes.c]\nssh = "c"\nclient_keys = ["/k1", "/k2"]\nagent_port = 9000\n'
    )
    a, b, c = parse_nodes(text)
    assert a == NodeSpec(
        name="a",
        ssh="ops@fe80::1",  # an IPv6 host: its colons are not a port
        ssh_port=2222,
        known_hosts=Path("/etc/kh"),
        client_keys=(Path("/k1"),),
        mode="exec",
        insecure_skip_host_key_check=True,
        exec_command="agent --stdio",
    )
    meter = MeterSpec("shelly", "http://p:8080", refresh_s=2.0)
    assert b == NodeSpec(name="b", url="wss://b.example:443/base", token_file=Path("/etc/t"), meter=meter)
    assert b.http_base == "https://b.example:443/base"
    assert c == NodeSpec(name="c", ssh="c", client_keys=(Path("/k1"), Path("/k2")), agent_port=9000)


def test_a_file_is_named_by_its_path(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nodes.toml"
    path.write_text('[nodes.spark-2]\nssh = "h"\nport = "abc"\n')
    with pytest.raises(
        NodesFileError, match=f'^{path}: nodes.spark-2.port: must be an integer 1–65535, got "abc"$'
    ):
        load_nodes(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(
        NodesFileError, match=f"^{path}: not valid TOML: not UTF-8 text \\(byte 0xff at offset 0\\)$"
    ):
        load_nodes(path)
    path.write_text('[nodes.a]\nurl = "http://h:1"\n[engine]\ninterval_s = 1' + "0" * 400 + "\n")
    with pytest.raises(
        NodesFileError, match=f"^{path}: not valid TOML: an integer past 64 bits \\(1000000000…"
    ):
        load_nodes(path)  # TOML's bound, which tomllib does not apply: an OverflowError in math.isfinite
    path.write_text("[nodes.a]\nssh = " + "[" * 2000 + "]" * 2000 + "\n")  # a RecursionError in tomllib
    with pytest.raises(NodesFileError, match=f"^{path}: not valid TOML: nested too deep to read$"):
        load_nodes(path)


def test_the_cli_refuses_a_wrong_file_in_one_line_before_dialling(tmp_path: pathlib.Path) -> None:
    """The refusal comes before any coordinator is started or any node dialled."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.spark-1]\nurl = "ws://127.0.0.1:9"\n[nodes.spark-2]\nssh = "h"\nport = "abc"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    for command in (["nodes", "check"], ["hardware"]):
        t0 = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "sparkwatch", *command, "--nodes", str(nodes), "--wait", "30"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            f'sparkwatch: error: {nodes}: nodes.spark-2.port: must be an integer 1–65535, got "abc"\n'
        )
        assert result.stdout == "" and time.monotonic() - t0 < 20


def test_a_tilde_in_a_path_is_the_home_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As docs/coordinator.md writes them (`known_hosts = "~/.ssh/known_hosts"`): expanded at load time."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    text = (
        '[nodes.a]\nssh = "h"\nknown_hosts = "~/.ssh/known_hosts"\n'
        'client_keys = ["~/.ssh/id_ed25519", "/k2"]\n'
        '[nodes.b]\nurl = "ws://b"\ntoken_file = "~/agent.token"\n'
        '[nodes.b.meter]\nkind = "redfish"\nurl = "https://bmc"\nusername = "sw"\n'
        'password_file = "~/bmc.password"\n'
        '[nodes.c]\nssh = "c"\nclient_keys = "~/key"\nknown_hosts = "/etc/~kh"\n'
        '[nodes.c.meter]\nkind = "prometheus"\nurl = "http://p"\nquery = "q"\nbearer_token_file = "~/prom"\n'
    )
    a, b, c = parse_nodes(text)
    assert a.known_hosts == home / ".ssh" / "known_hosts"
    assert a.client_keys == (home / ".ssh" / "id_ed25519", Path("/k2"))
    assert b.token_file == home / "agent.token"
    assert b.meter is not None and b.meter.password_file == home / "bmc.password"
    assert c.client_keys == (home / "key",)
    assert c.known_hosts == Path("/etc/~kh")  # a ~ inside a path is a plain character
    assert c.meter is not None and c.meter.bearer_token_file == home / "prom"


def test_a_tilde_that_cannot_be_expanded_is_named_with_its_key() -> None:
    user = "no-such-user-sparkwatch-test"
    assert refusal(f'[nodes.a]\nssh = "h"\nknown_hosts = "~{user}/kh"\n') == (
        f'nodes.toml: nodes.a.known_hosts: cannot expand ~ in "~{user}/kh": no such user or home directory'
    )
    meter = (
        f'[nodes.a]\n{WS}[nodes.a.meter]\nkind = "shelly"\nurl = "http://p"\npassword_file = "~{user}/pw"\n'
    )
    assert refusal(meter) == (
        "nodes.toml: nodes.a.meter.password_file: "
        f'cannot expand ~ in "~{user}/pw": no such user or home directory'
    )


def test_the_cli_reads_a_token_file_under_the_home_directory(
    tmp_path: pathlib.Path, agent_factory: Any
) -> None:
    """`sparkwatch nodes check` with token_file = "~/agent.token" sends the token in $HOME/agent.token."""
    token = tmp_path / "agent.token"
    token.write_text("the-agents-own-token-0123456789")
    token.chmod(0o600)
    agent = agent_factory("--backend", "sim", "--node", "sim-1", "--token-file", str(token))
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.spark-1]\nurl = "ws://127.0.0.1:{agent.port}"\ntoken_file = "~/agent.token"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")} | {"HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "sparkwatch", "nodes", "check", "--nodes", str(nodes), "--wait", "30"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 of 1 node(s) ready to measure" in result.stdout
    assert "HTTP 401" not in result.stdout + result.stderr


def test_relative_paths_are_the_nodes_files_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user's `nodes check --nodes /tmp/t/good.toml` run from /tmp read `cannot read token file
    agent.token`: a relative path is taken from the file's folder, as Prometheus takes its config's."""
    folder = tmp_path / "site"
    folder.mkdir()
    nodes = folder / "nodes.toml"
    nodes.write_text(
        '[engine]\nurl = "http://127.0.0.1:8000/metrics"\nbearer_token_file = "secrets/engine.token"\n'
        '[nodes.a]\nurl = "ws://a:9464"\ntoken_file = "agent.token"\n'
        '[nodes.a.meter]\nkind = "shelly"\nurl = "http://p:8080/"\npassword_file = "shelly.pw"\n'
        '[nodes.b]\nssh = "sw@b"\nknown_hosts = "ssh/known_hosts"\nclient_keys = ["ssh/id", "/etc/k"]\n'
        '[nodes.c]\nurl = "ws://c:9464"\ntoken_file = "/etc/sparkwatch/agent.token"\n'
    )
    monkeypatch.chdir(tmp_path)  # another working folder than the file's
    loaded = load_nodes_file(Path("site/nodes.toml"))
    a, b, c = loaded.nodes
    base = Path("site")
    assert a.token_file == base / "agent.token" and a.meter is not None
    assert a.meter.password_file == base / "shelly.pw"
    assert loaded.engine is not None and loaded.engine.bearer_token_file == base / "secrets/engine.token"
    assert b.known_hosts == base / "ssh/known_hosts" and b.client_keys == (base / "ssh/id", Path("/etc/k"))
    assert c.token_file == Path("/etc/sparkwatch/agent.token")  # an absolute path as written
    with pytest.raises(NodesFileError, match=r"engine\.bearer_token_file: .* site/secrets/engine\.token"):
        check_secret_files("site/nodes.toml", loaded)  # a missing one named by its key, where it was looked
    (folder / "secrets").mkdir()
    for name in ("secrets/engine.token", "agent.token"):
        (folder / name).write_text("a-token-of-enough-length\n")
        (folder / name).chmod(0o600)
    with pytest.raises(NodesFileError, match=r"nodes\.a\.meter\.password_file: .*site/shelly\.pw"):
        check_secret_files("site/nodes.toml", loaded)  # those two found from another working folder


async def test_a_command_that_scrapes_no_engine_does_not_ask_for_its_token_file(tmp_path: Path) -> None:
    """`hardware --nodes` was refused over the [engine]'s missing bearer token file, which it never reads;
    `nodes check`, which scrapes the engine, is still refused with the key named."""
    from sparkwatch.commands.embedded import nodes_now

    nodes = tmp_path / "nodes.toml"
    nodes.write_text(
        '[engine]\nurl = "http://127.0.0.1:9/metrics"\nbearer_token_file = "missing.token"\n'
        '[nodes.a]\nurl = "ws://127.0.0.1:9"\n'
    )

    async def settle(client: Any) -> str:
        return "settled"

    assert await nodes_now(None, nodes, settle) == "settled"
    with pytest.raises(NodesFileError, match=r"engine\.bearer_token_file: .*missing\.token"):
        await nodes_now(None, nodes, settle, with_engine=True)


def test_a_client_key_ssh_cannot_use_is_named_with_its_node_before_dialling(tmp_path: Path) -> None:
    """A junk file or a key that needs a passphrase (nodes.toml gives none) failed every dial with
    "KeyImportError: Invalid private key", naming no file; now the nodes file is refused, naming it."""
    from sparkwatch.links.asyncssh_quiet import asyncssh

    good, junk, locked = tmp_path / "id_ed25519", tmp_path / "id_junk", tmp_path / "id_locked"
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(good)
    key.write_private_key(locked, passphrase="secret")
    armour = "-----{} OPENSSH PRIVATE KEY-----\n"
    junk.write_text(armour.format("BEGIN") + "not base64 at all\n" + armour.format("END"))
    nodes = tmp_path / "nodes.toml"
    for path in (good, junk, locked):
        path.chmod(0o600)
        nodes.write_text(f'[nodes.a]\nssh = "sw@a"\nclient_keys = ["{good}", "{path}"]\n')
        loaded = load_nodes_file(nodes)
        if path == good:
            check_secret_files(str(nodes), loaded)
            continue
        with pytest.raises(NodesFileError) as refused:
            check_secret_files(str(nodes), loaded)
        said = str(refused.value)
        assert said.startswith(f"{nodes}: nodes.a.client_keys: {path} is not a private key SSH can use: ")
        assert ("assphrase" in said) == (path == locked) and "\n" not in said


def test_a_client_key_others_may_read_is_refused_as_ssh_refuses_it(tmp_path: Path) -> None:
    """A 0644 key streamed (asyncssh takes it; OpenSSH says "UNPROTECTED PRIVATE KEY FILE" and will not),
    where a token file in that mode is refused: now the key is too, with the command that mends it."""
    from sparkwatch.links.asyncssh_quiet import asyncssh

    key = tmp_path / "id_ed25519"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(key)
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(f'[nodes.a]\nssh = "sw@a"\nclient_keys = ["{key}"]\n')
    for mode in (0o644, 0o640, 0o604):
        key.chmod(mode)
        with pytest.raises(NodesFileError) as refused:
            check_secret_files(str(nodes), load_nodes_file(nodes))
        assert str(refused.value) == (
            f"{nodes}: nodes.a.client_keys: {key} is readable by group or others (mode {mode:04o});"
            f" run: chmod 600 {key}"
        )
    for mode in (0o600, 0o400):
        key.chmod(mode)
        check_secret_files(str(nodes), load_nodes_file(nodes))
