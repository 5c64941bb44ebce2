"""`nodes.toml`: which agents the coordinator dials, in the order used everywhere (exports, tables, lmx).

Every key's type and range is checked when the file is loaded, before anything is dialled, so a mistake is
one line naming the file, the node and the key (``nodes.toml: nodes.spark-2.port: must be an integer
1–65535, got "abc"``) instead of a link that fails later or a value quietly coerced (``bool("false")``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlparse

from sparkwatch.engines.spec import EngineSpec, EngineSpecError, parse_engine
from sparkwatch.links.nodes_shared import SharedError, one_node_per_agent, one_node_per_meter, toml_key
from sparkwatch.links.ssh_files import ssh_file_problem
from sparkwatch.meters.spec import MeterSpec, MeterSpecError, parse_meter, toml_shown
from sparkwatch_agent.shared.strict_text import TextFormatError, loads_toml
from sparkwatch_agent.shared.user_files import read_file_bytes

#: SSH's port unless a node's ``port`` says otherwise (known_hosts lists a host on another as [host]:port).
DEFAULT_SSH_PORT = 22
MAX_NODE_NAME_CHARS = 64


class NodesFileError(Exception):
    """A malformed nodes file; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    url: str | None = None  # ws://host:port (the agent's HTTP base)
    token_file: Path | None = None
    ssh: str | None = None  # user@host
    ssh_port: int = DEFAULT_SSH_PORT
    known_hosts: Path | None = None
    client_keys: tuple[Path, ...] = ()
    mode: Literal["tunnel", "exec"] = "tunnel"
    agent_port: int = 9464  # the agent's loopback port on the node (ssh tunnel mode)
    insecure_skip_host_key_check: bool = False
    exec_command: str = "sparkwatch-agent stream --stdio"  # ssh exec mode: what runs on the node
    meter: MeterSpec | None = None  # a wall/BMC/PDU meter the coordinator polls for this node

    @property
    def http_base(self) -> str:
        """http:// form of ``url`` for /v1/time and /v1/interval (SSH links find theirs when connected)."""
        if self.url is None:
            return ""
        parsed = urlparse(self.url)
        scheme = {"ws": "http", "wss": "https"}.get(parsed.scheme, parsed.scheme)
        return parsed._replace(scheme=scheme).geturl().rstrip("/")


#: Keys that only mean something for a node reached over SSH.
_SSH_ONLY = ("port", "known_hosts", "client_keys", "mode", "agent_port", "insecure_skip_host_key_check")
_KEYS = frozenset({"url", "token_file", "ssh", "exec_command", "meter", *_SSH_ONLY})
_URL_SCHEMES = ("ws", "wss", "http", "https")


class _Invalid(Exception):
    """One key of a node (``key`` None: its table as a whole) is wrong; ``problem`` says how."""

    def __init__(self, key: str | None, problem: str) -> None:
        super().__init__(problem)
        self.key, self.problem = key, problem


@dataclass(frozen=True, slots=True)
class NodesFile:
    """The whole file: the nodes, and the serving engine whose /metrics the coordinator scrapes."""

    nodes: list[NodeSpec]
    engine: EngineSpec | None = None


def parse_nodes(text: str, origin: str = "nodes.toml") -> list[NodeSpec]:
    return parse_nodes_file(text, origin).nodes


def parse_nodes_file(text: str | bytes, origin: str = "nodes.toml") -> NodesFile:
    """The file's text (or bytes, read as UTF-8), checked; its relative paths as written
    (:func:`load_nodes_file` anchors them to the file's folder: read a file through it)."""
    try:
        data = loads_toml(text)
    except TextFormatError as exc:
        raise NodesFileError(f"{origin}: not valid TOML: {exc}") from None
    stray = sorted(set(data) - {"nodes", "engine", "engine_metrics"})
    if stray:
        keys = ", ".join(toml_key(k) for k in stray)
        raise NodesFileError(f"{origin}: unknown top-level keys {keys}: each node is a [nodes.NAME] table")
    engine = _engine(origin, data)
    nodes = data.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise NodesFileError(f"{origin}: needs at least one [nodes.NAME] table")
    specs = []
    for name, table in nodes.items():
        try:
            specs.append(_node(name, table))
        except _Invalid as exc:
            where = f"nodes.{toml_key(name)}" + (f".{exc.key}" if exc.key else "")
            raise NodesFileError(f"{origin}: {where}: {exc.problem}") from None
    try:
        one_node_per_meter(origin, specs)
        one_node_per_agent(origin, specs)
    except SharedError as exc:
        raise NodesFileError(str(exc)) from None
    return NodesFile(specs, engine)


def _engine(origin: str, data: dict[str, Any]) -> EngineSpec | None:
    """``[engine]``, or its shorthand ``engine_metrics = "URL"`` (the URL alone, defaults for the rest)."""
    if "engine_metrics" in data and "engine" in data:
        raise NodesFileError(f"{origin}: engine_metrics: give it or an [engine] table, not both")
    if "engine_metrics" in data:
        table, where = {"url": data["engine_metrics"]}, "engine_metrics"
    elif "engine" in data:
        table, where = data["engine"], "engine"
    else:
        return None
    try:
        return parse_engine(table)
    except EngineSpecError as exc:
        key = "" if where == "engine_metrics" or not exc.key else f".{exc.key}"
        raise NodesFileError(f"{origin}: {where}{key}: {exc.problem}") from None


def load_nodes(path: Path) -> list[NodeSpec]:
    return load_nodes_file(path).nodes


def load_nodes_file(path: Path) -> NodesFile:
    try:
        text = read_file_bytes(path)
    except OSError as exc:
        raise NodesFileError(f"cannot read nodes file {path}: {exc.strerror}") from None
    return anchored(parse_nodes_file(text, str(path)), path.parent)


def anchored(nodes_file: NodesFile, base: Path) -> NodesFile:
    """The file's relative paths (token, password and key files, known_hosts) taken from ``base``, the nodes
    file's folder, as Prometheus takes those of its config: the same file read from another working folder,
    or by a service, names the same files."""

    def at(path: Path | None) -> Path | None:
        return path if path is None or path.is_absolute() else base / path

    def node(spec: NodeSpec) -> NodeSpec:
        meter = spec.meter
        if meter is not None:
            meter = replace(
                meter,
                password_file=at(meter.password_file),
                bearer_token_file=at(meter.bearer_token_file),
            )
        return replace(
            spec,
            token_file=at(spec.token_file),
            known_hosts=at(spec.known_hosts),
            client_keys=tuple(k if k.is_absolute() else base / k for k in spec.client_keys),
            meter=meter,
        )

    engine = nodes_file.engine
    if engine is not None:
        engine = replace(engine, bearer_token_file=at(engine.bearer_token_file))
    return NodesFile([node(n) for n in nodes_file.nodes], engine)


def check_secret_files(origin: str, nodes_file: NodesFile) -> None:
    """Every secret file the file names can be used now (an agent's token file, a meter's password or bearer
    token file, the serving engine's bearer token file): a coordinator that starts is not told of a missing
    one first by a link's, a meter's or the scrape's failures. Each is read again where it is used (a
    rotated secret is picked up); never shown."""
    from sparkwatch.meters.credentials import SecretFileError, first_line  # noqa: PLC0415 (aiohttp)
    from sparkwatch_agent.shared.auth import TokenFileError, load_token  # noqa: PLC0415

    engine = nodes_file.engine
    try:
        if engine is not None and engine.bearer_token_file is not None:
            first_line(engine.bearer_token_file, "the engine's bearer token", in_header=True)
    except SecretFileError as exc:
        raise NodesFileError(f"{origin}: engine.bearer_token_file: {exc}") from None
    for node in nodes_file.nodes:
        where = f"{origin}: nodes.{toml_key(node.name)}"
        try:
            if node.token_file is not None:
                load_token(node.token_file)
        except TokenFileError as exc:
            raise NodesFileError(f"{where}.token_file: {exc}") from None
        meter = node.meter
        secrets = (
            {"password_file": meter.password_file, "bearer_token_file": meter.bearer_token_file}
            if meter
            else {}
        )
        for key, path in secrets.items():
            try:
                if path is not None:
                    first_line(path, "the meter's secret", in_header=key == "bearer_token_file")
            except SecretFileError as exc:
                raise NodesFileError(f"{where}.meter.{key}: {exc}") from None
        _check_ssh_files(where, node)


def _check_ssh_files(where: str, node: NodeSpec) -> None:
    """An SSH node's known_hosts and client keys can be used now (links/ssh_files.py)."""
    if node.ssh is None:
        return
    problem = ssh_file_problem(node.known_hosts, node.client_keys, node.insecure_skip_host_key_check)
    if problem is not None:
        raise NodesFileError(f"{where}.{problem[0]}: {problem[1]}")


def _node(name: str, table: Any) -> NodeSpec:
    if not isinstance(table, dict):
        raise _Invalid(None, f'must be a table with url = "ws://host:9464" or ssh, got {toml_shown(table)}')
    if not name or not name.isprintable() or len(name) > MAX_NODE_NAME_CHARS:  # 5000 broke tables, file names
        raise _Invalid(None, f"a node name must be 1 to {MAX_NODE_NAME_CHARS} printable characters")
    _known_keys(table)
    url, ssh = table.get("url"), table.get("ssh")
    if (url is None) == (ssh is None):
        raise _Invalid(None, 'give exactly one of url = "ws://host:9464" or ssh = "user@host"')
    if url is not None:
        _check_url(url)
        _no_ssh_keys(table)
    else:
        _check_ssh(ssh)
        _mode_keys(table)
    return NodeSpec(
        name=name,
        url=url,
        token_file=_path(table, "token_file"),
        ssh=ssh,
        ssh_port=_port(table, "port", DEFAULT_SSH_PORT),
        known_hosts=_path(table, "known_hosts"),
        client_keys=_client_keys(table),
        mode=_mode(table),
        agent_port=_port(table, "agent_port", 9464),
        insecure_skip_host_key_check=_flag(table, "insecure_skip_host_key_check"),
        exec_command=_command(table),
        meter=_meter(table),
    )


def _known_keys(table: dict[str, Any]) -> None:
    unknown = sorted(set(table) - _KEYS)
    known = ", ".join(sorted(_KEYS))
    if len(unknown) == 1:
        raise _Invalid(toml_key(unknown[0]), f"unknown key (the keys are {known})")
    if unknown:
        raise _Invalid(None, f"unknown keys {', '.join(map(toml_key, unknown))} (the keys are {known})")


def _check_url(url: Any) -> None:
    """ws(s)/http(s)://host[:port][/path] with a port 1–65535 if given; ``urlparse(...).port`` raises on a
    bad one, which would otherwise surface as a link error long after loading."""
    shape = "must be ws://host[:port] (or wss, http, https) with a port 1–65535"
    if not isinstance(url, str) or any(c.isspace() or not c.isprintable() for c in url):
        raise _Invalid("url", f"{shape}, got {toml_shown(url)}")
    try:
        parsed = urlparse(url)
        port = parsed.port
    except ValueError:
        raise _Invalid("url", f"{shape}, got {toml_shown(url)}") from None
    if "@" in parsed.netloc:  # not repeated: it may hold a password
        raise _Invalid("url", "must not hold a user or password: the agent's token goes in token_file")
    if parsed.scheme not in _URL_SCHEMES or not parsed.hostname or port == 0:
        raise _Invalid("url", f"{shape}, got {toml_shown(url)}")
    if parsed.query or parsed.fragment:
        raise _Invalid("url", "must not have a query or fragment (not shown: it may hold a secret)")
    if parsed.path.rstrip("/").endswith(("/v1/stream", "/v1")):  # the links add /v1/… to the base
        base = parsed._replace(path=parsed.path.rstrip("/").removesuffix("/stream").removesuffix("/v1"))
        raise _Invalid("url", f"is the agent's base, without /v1/…: {toml_shown(base.geturl())}")


def _no_ssh_keys(table: dict[str, Any]) -> None:
    """A node reached by ``url`` ignores the SSH keys: one there is a mistake, not something to skip."""
    for key in _SSH_ONLY:
        if key not in table:
            continue
        if key == "mode":
            what = f"{table[key]} mode" if table[key] in ("tunnel", "exec") else "mode"
            url = toml_shown(table["url"])
            raise _Invalid(key, f"{what} only applies to ssh nodes; this node has url = {url}")
        hint = " (give the agent's port in the url)" if key in ("port", "agent_port") else ""
        raise _Invalid(key, f"only applies to ssh nodes; this node has url{hint}")
    if "exec_command" in table:
        raise _Invalid("exec_command", 'only applies to ssh nodes with mode = "exec"; this node has url')


def _mode_keys(table: dict[str, Any]) -> None:
    """A key of the other SSH mode is a mistake: ``exec_command`` without ``mode = "exec"`` made a tunnel
    node that told of an agent not listening, not of the missing mode."""
    if _mode(table) == "exec" and "agent_port" in table:
        raise _Invalid(
            "agent_port", 'only applies to tunnel nodes; with mode = "exec" exec_command runs the agent'
        )
    if _mode(table) == "tunnel" and "exec_command" in table:
        raise _Invalid("exec_command", 'only applies to ssh nodes with mode = "exec"; this node is a tunnel')


def _check_ssh(ssh: Any) -> None:
    shape = 'must be "user@host" or "host"'
    if not isinstance(ssh, str) or any(c.isspace() or not c.isprintable() for c in ssh):
        raise _Invalid("ssh", f"{shape}, got {toml_shown(ssh)}")
    user, at, host = ssh.rpartition("@")
    if not host or (at and not user) or "@" in user:
        raise _Invalid("ssh", f"{shape}, got {toml_shown(ssh)}")
    if host.count(":") == 1 or host.startswith("["):  # host:port, [v6] (it failed when dialled); v6 has 2+ :
        why = "the SSH port is its own key: port = N; an IPv6 address has no brackets, u@::1"
        raise _Invalid("ssh", f"{shape} ({why}), got {toml_shown(ssh)}")


def _port(table: dict[str, Any], key: str, default: int) -> int:
    value = table.get(key, default)
    if type(value) is not int or not 1 <= value <= 65535:  # type(): a bool is an int to isinstance
        raise _Invalid(key, f"must be an integer 1–65535, got {toml_shown(value)}")
    return value


def _path(table: dict[str, Any], key: str) -> Path | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise _Invalid(key, f"must be a file path (a non-empty string), got {toml_shown(value)}")
    return _expanded(key, value)


def _client_keys(table: dict[str, Any]) -> tuple[Path, ...]:
    keys = table.get("client_keys", [])
    paths = [keys] if isinstance(keys, str) else keys
    if not isinstance(paths, list) or not all(isinstance(p, str) and p and "\0" not in p for p in paths):
        shown = toml_shown(keys)
        raise _Invalid("client_keys", f"must be a file path or a list of file paths, got {shown}")
    return tuple(_expanded("client_keys", p) for p in paths)


def _expanded(key: str, value: str) -> Path:
    """``~`` and ``~user`` expanded now (as a shell would, and as docs/coordinator.md shows), so a file is
    looked for where the user meant, not under a directory literally named ``~``."""
    try:
        return Path(value).expanduser()
    except RuntimeError:  # HOME unset, or no such user
        raise _Invalid(
            key, f"cannot expand ~ in {toml_shown(value)}: no such user or home directory"
        ) from None


def _mode(table: dict[str, Any]) -> Literal["tunnel", "exec"]:
    mode = table.get("mode", "tunnel")
    if mode in ("tunnel", "exec"):
        return cast(Literal["tunnel", "exec"], mode)
    raise _Invalid("mode", f'must be "tunnel" or "exec", got {toml_shown(mode)}')


def _flag(table: dict[str, Any], key: str) -> bool:
    value = table.get(key, False)
    if type(value) is not bool:
        raise _Invalid(key, f"must be true or false (unquoted), got {toml_shown(value)}")
    return value


def _command(table: dict[str, Any]) -> str:
    value = table.get("exec_command", "sparkwatch-agent stream --stdio")
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise _Invalid("exec_command", f"must be a non-empty command line, got {toml_shown(value)}")
    return value


def _meter(table: dict[str, Any]) -> MeterSpec | None:
    if "meter" not in table:
        return None
    try:
        return parse_meter(table["meter"])
    except MeterSpecError as exc:
        raise _Invalid(f"meter.{toml_key(exc.key)}" if exc.key else "meter", exc.problem) from None
