"""Agent configuration: command-line flags over an optional TOML file, validated into a frozen object."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkwatch_agent.sampling.leases import validate_interval
from sparkwatch_agent.shared.strict_text import TextFormatError, cut_short, loads_toml, quoted_number
from sparkwatch_agent.shared.user_files import read_file_bytes

DEFAULT_LISTEN = "127.0.0.1:9464"
DEFAULT_INTERVAL_S = 1.0
DEFAULT_RING_SIZE = 36_000  # one hour at 10 Hz
#: The most frames a ring keeps: ≈ 0.3 GB for a GB10 at ≈ 30 B a compressed sample, more with sensor
#: channels or several GPUs (a day at 100 Hz, eleven days at 10 Hz). A size past it is a zero too many,
#: not a plan: the ring would grow for as long as the agent runs.
MAX_RING_SIZE = 10_000_000
#: The longest node name the agent takes (it labels every series and names the node in exports).
NODE_MAX_CHARS = 128
BACKENDS = ("nvml", "sim")


class ConfigError(Exception):
    """A user mistake in flags or the config file; printed as one line, never a traceback."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node: str
    host: str
    port: int
    interval_s: float
    backend: str
    token_file: Path | None
    insecure_no_auth: bool
    ring_size: int
    meminfo_path: Path
    hwmon_root: Path
    sim_sensors: bool = True  # the sim backend's spbm-shaped system power channels


#: TOML key → (type, flag name) for everything a config file may set.
_KEYS: dict[str, type] = {
    "node": str,
    "listen": str,
    "interval": float,
    "backend": str,
    "token_file": str,
    "insecure_no_auth": bool,
    "ring_size": int,
    "meminfo_path": str,
    "hwmon_root": str,
    "sim_sensors": bool,
}


def parse_listen(text: str, named: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` or ``[v6]:PORT`` → (host, port); ``named``: where it was set, as a refusal says it."""
    host, sep, port_text = text.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]") and len(host) > 2
    # "[::1]" (no port), "h:1:2" (a v6 address, or a typo, read as host "h:1" and port 2): not one address
    if not sep or not host or ((":" in host or host.startswith("[")) and not bracketed):
        raise ConfigError(f"{named} must be HOST:PORT or [IPV6]:PORT, got {cut_short(text)!r}")
    host = host[1:-1] if bracketed else host
    if not (port_text.isascii() and port_text.isdigit()):  # int() took "+80", " 80" and other scripts' digits
        raise ConfigError(f"{named} port must be a number, got {cut_short(port_text)!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"{named} port must be within 0..65535, got {quoted_number(port)}")
    return host, port


#: Settings that name files or folders: relative ones in a config file are taken from the file's folder.
_FILE_PATHS = frozenset({"token_file", "meminfo_path", "hwmon_root"})


def load_toml(path: Path) -> dict[str, Any]:
    try:
        data = loads_toml(read_file_bytes(path))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except TextFormatError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    section = data.get("agent", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [agent] must be a table")
    if section is not data and len(data) > 1:  # one form or the other: the keys beside it were dropped
        beside = ", ".join(sorted(set(data) - {"agent"}))
        raise ConfigError(
            f"config file {path}: keys {beside} at top level beside an [agent] table: put them in it"
        )
    unknown = sorted(set(section) - set(_KEYS))
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown keys {', '.join(unknown)} (known: {', '.join(_KEYS)})"
        )
    for key, value in section.items():
        want = _KEYS[key]
        ok = (
            isinstance(value, int | float) and not isinstance(value, bool)
            if want is float
            else (isinstance(value, want) and not (want is int and isinstance(value, bool)))
        )
        if not ok:
            raise ConfigError(f"config file {path}: {key} must be of type {want.__name__}")
    # a relative path in the file is the file's folder's, as in the coordinator's nodes file: under
    # systemd the working directory is /, and `token_file = "agent.token"` beside the file was not found
    anchored = {k: _anchored(v, path, k) for k, v in section.items() if k in _FILE_PATHS and v}
    return {**section, **anchored}


def _anchored(value: str, config: Path, key: str) -> str:
    """A path from the config file: ``~`` expanded, then a relative one taken from the file's folder."""
    try:
        return str(config.parent / Path(value).expanduser())
    except RuntimeError:  # HOME unset and no passwd entry, or no such user: one line, as nodes.toml says it
        raise ConfigError(
            f"config file {config}: {key}: cannot expand ~ in {value!r}: no such user or home directory"
        ) from None


#: Settings that name host files the sim backend never reads: its memory and sensors are simulated.
_HOST_PATHS = (("meminfo_path", "--meminfo-path"), ("hwmon_root", "--hwmon-root"))


def _refuse_host_paths_with_sim(flags: dict[str, Any], file_values: dict[str, Any]) -> None:
    """A host path with the sim backend would be ignored silently, so a user who meant to read it would
    take simulated numbers for their machine's; refused, naming where each setting came from."""
    for key, flag in _HOST_PATHS:
        if flags.get(key) is not None or file_values.get(key) is not None:
            backend = "--backend sim" if flags.get("backend") is not None else "backend = 'sim' (config file)"
            raise ConfigError(
                f"{_origin(flags, key, flag)} cannot be combined with {backend}: the simulated GB10 has its"
                " own memory and sensors and reads no host files; drop one of them"
            )


def _origin(flags: dict[str, Any], key: str, flag: str) -> str:
    """Where a setting came from, as its refusal names it: the flag, else the config file's key."""
    return flag if flags.get(key) is not None else f"{key} (config file)"


def build_config(flags: dict[str, Any], file_values: dict[str, Any]) -> AgentConfig:
    """Flags (``None`` = not given) win over the file, the file over defaults."""

    def pick(key: str, default: Any) -> Any:
        value = flags.get(key)
        if value is not None:
            return value
        return file_values.get(key, default)

    host, port = parse_listen(pick("listen", DEFAULT_LISTEN), _origin(flags, "listen", "--listen"))
    try:
        interval_s = validate_interval(float(pick("interval", DEFAULT_INTERVAL_S)))
    except ValueError as exc:
        raise ConfigError(f"{_origin(flags, 'interval', '--interval')}: {exc}") from None
    backend = pick("backend", "nvml")
    if backend not in BACKENDS:
        named = _origin(flags, "backend", "--backend")
        raise ConfigError(f"{named} must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "sim":
        _refuse_host_paths_with_sim(flags, file_values)
    elif pick("sim_sensors", None) is not None:  # else ignored in silence: the user meant something by it
        named = _origin(flags, "sim_sensors", "--sim-sensors/--no-sim-sensors")
        raise ConfigError(f"{named} applies to --backend sim only; this agent reads {backend}")
    for key in sorted(_FILE_PATHS):
        if file_values.get(key) == "" and flags.get(key) is None:  # "" read as "not set": a default taken
            raise ConfigError(f"{key} (config file) is empty: leave it out for the default, or name a file")
    ring_size = int(pick("ring_size", DEFAULT_RING_SIZE))
    if not 10 <= ring_size <= MAX_RING_SIZE:
        named = _origin(flags, "ring_size", "--ring-size")
        raise ConfigError(f"{named} must be 10 to {MAX_RING_SIZE} samples, got {quoted_number(ring_size)}")
    given = pick("node", None)
    node = socket.gethostname() if given is None else given  # an empty --node is a mistake, not "default"
    if not node or len(node) > NODE_MAX_CHARS or any(c.isspace() or not c.isprintable() for c in node):
        raise ConfigError(
            f"{_origin(flags, 'node', '--node')} must be a name of 1 to {NODE_MAX_CHARS} printable characters"
            " without spaces,"
            f" got {node[: NODE_MAX_CHARS + 8]!r}{'…' if len(node) > NODE_MAX_CHARS + 8 else ''}"
        )
    token_file = pick("token_file", None)
    hwmon_root = pick("hwmon_root", None)
    if hwmon_root is not None and not Path(hwmon_root).is_dir():
        # the default may be absent (a container): no sensors; a root someone named must exist
        named = _origin(flags, "hwmon_root", "--hwmon-root")
        raise ConfigError(f"{named} {hwmon_root}: not a directory (a hwmon class dir holds hwmonN/)")
    return AgentConfig(
        node=node,
        host=host,
        port=port,
        interval_s=interval_s,
        backend=backend,
        token_file=Path(token_file) if token_file else None,
        insecure_no_auth=bool(pick("insecure_no_auth", False)),
        ring_size=ring_size,
        meminfo_path=Path(pick("meminfo_path", "/proc/meminfo")),
        hwmon_root=Path(hwmon_root or "/sys/class/hwmon"),
        sim_sensors=bool(pick("sim_sensors", True)),
    )
