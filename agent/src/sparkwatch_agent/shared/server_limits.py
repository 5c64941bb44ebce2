"""How many connections a sparkwatch HTTP server holds and how long it waits for a client.

Every server (agent, coordinator, proxy, sim model) starts through ``start_site`` with these limits, so a
flood of idle or slow sockets cannot use up the process's open files: 1030 idle sockets against the
systemd default of 1024 once made an agent unreachable. Each limit can be overridden from the
environment (a systemd drop-in's ``Environment=``), for all servers of a process at once.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Mapping
from dataclasses import dataclass

#: Concurrent connections a server keeps (fewer where the open-file limit is low: half of it). An agent
#: sees a coordinator or two, Prometheus and the odd curl; the proxy one connection per concurrent
#: benchmark request. The shipped units set LimitNOFILE well above twice this.
DEFAULT_MAX_CONNECTIONS = 512
#: The floor of the derived cap where the open-file limit is tiny.
MIN_MAX_CONNECTIONS = 16
#: A new connection must finish its first request's headers within this (a slowloris client never does).
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: A keep-alive connection waiting for its next request is closed after this. Above the aiohttp
#: client's 15 s, so our own clients close idle connections first and never race a server close.
DEFAULT_IDLE_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 3600.0

ENV_MAX_CONNECTIONS = "SPARKWATCH_HTTP_MAX_CONNECTIONS"
ENV_HEADER_TIMEOUT_S = "SPARKWATCH_HTTP_HEADER_TIMEOUT_S"
ENV_IDLE_TIMEOUT_S = "SPARKWATCH_HTTP_IDLE_TIMEOUT_S"


class LimitsError(ValueError):
    """An override in the environment is not a usable limit; one line for the user."""


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S


def soft_nofile() -> int | None:
    """The process's soft open-file limit, ``None`` when unlimited or unreadable."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


#: The most a process raises its own soft open-file limit to (the hard limit is often 2^20 or more).
RAISED_NOFILE = 65536


def raise_nofile(ceiling: int = RAISED_NOFILE) -> int | None:
    """Raise the soft open-file limit towards the hard one (up to ``ceiling``), as a server that holds two
    sockets per request must: a shell's soft 1024 ran the proxy out of descriptors at ~500 streams, while
    its hard limit allowed far more. Returns the soft limit now (``None``: unlimited or unreadable)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (OSError, ValueError):
        pass
    return soft_nofile()


def default_max_connections(nofile: int | None) -> int:
    """The cap when none is configured: the default, but never more than half the open files (the rest
    are the process's own: listening sockets, outgoing links, the database, /proc readers)."""
    if nofile is None:
        return DEFAULT_MAX_CONNECTIONS
    return max(MIN_MAX_CONNECTIONS, min(DEFAULT_MAX_CONNECTIONS, nofile // 2))


def limits_from_environ(environ: Mapping[str, str], nofile: int | None) -> ServerLimits:
    """The limits with the environment's overrides; a :class:`LimitsError` names a bad one. A configured
    cap is taken as given, even above half the open files (``start_site`` warns about that)."""
    raw_cap = environ.get(ENV_MAX_CONNECTIONS, "").strip()
    if raw_cap:
        try:
            cap = int(raw_cap)
        except ValueError:
            cap = 0
        if not 1 <= cap <= 1_000_000:
            raise LimitsError(f"{ENV_MAX_CONNECTIONS} must be an integer from 1 to 1000000, got {raw_cap!r}")
    else:
        cap = default_max_connections(nofile)
    return ServerLimits(
        max_connections=cap,
        header_timeout_s=_seconds(environ, ENV_HEADER_TIMEOUT_S, DEFAULT_HEADER_TIMEOUT_S),
        idle_timeout_s=_seconds(environ, ENV_IDLE_TIMEOUT_S, DEFAULT_IDLE_TIMEOUT_S),
    )


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT_S:
        raise LimitsError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {raw!r}")
    return value
