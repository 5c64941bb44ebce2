"""A coordinator of the command's own: `run --nodes`, `demo`, `hardware --nodes` and `nodes check` start one
for their nodes, on a loopback port and a temporary database, and talk to it through the same client as to
a standing coordinator.

Loopback is not a trust boundary: any local process could read the runs or post windows that land in the
export. So each embedded coordinator requires a random token made for it, which only this process holds
(its client, and the proxy `run` starts, which posts through that client); it is never written down,
logged or handed to CMD. /healthz and /metrics stay open, as on a standing coordinator."""

from __future__ import annotations

import contextlib
import logging
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from sparkwatch.client import CoordinatorClient, CoordinatorTarget
from sparkwatch.coordinator.serve import nodes_counted, running_coordinator
from sparkwatch.engines.spec import EngineSpec
from sparkwatch.links.nodes_file import NodeSpec, check_secret_files, load_nodes_file

log = logging.getLogger(__name__)
#: What a refusal's line calls the embedded coordinator: its URL, a loopback port of the moment, is no help.
EMBEDDED_LABEL = "the command's own coordinator"
T = TypeVar("T")


@contextlib.asynccontextmanager
async def embedded_coordinator(
    nodes: Sequence[NodeSpec],
    db: Path | None = None,
    engine: EngineSpec | None = None,
    *,
    kept: bool = True,
) -> AsyncIterator[CoordinatorClient]:
    """A client of a coordinator that runs until the block ends; ``db`` keeps its SQLite file (``kept``
    False: the caller removes it, as the demo does); ``engine``: the serving engine it scrapes (`run
    --engine-metrics URL`, or ``[engine]`` of the nodes file). The client carries the coordinator's token
    (``client.target.token``), a fresh one per coordinator."""
    token = secrets.token_urlsafe(32)
    with contextlib.ExitStack() as stack:  # a folder only when no file is given: a quit at once left it
        path = (
            db
            or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sparkwatch-"))) / "sparkwatch.db"
        )
        async with running_coordinator(nodes, path, "127.0.0.1", 0, token, engine=engine) as url:
            gone = "" if db is not None and kept else ", removed at the end"  # not for `export --db` later
            log.info("embedded coordinator on %s (%s, db %s%s)", url, nodes_counted(nodes), path, gone)
            target = CoordinatorTarget(url, token, label=EMBEDDED_LABEL)
            async with CoordinatorClient(target) as client:
                yield client


async def nodes_now(
    target: CoordinatorTarget | None,
    nodes_file: Path | None,
    settle: Callable[[CoordinatorClient], Awaitable[T]],
    *,
    now: Callable[[CoordinatorClient], Awaitable[T]] | None = None,
    with_engine: bool = False,
) -> T:
    """What ``now`` reads of the standing coordinator at ``target`` (default: its nodes), or, without one,
    what ``settle`` (a wait on the client) answers of a coordinator embedded for ``nodes_file`` (default
    ``nodes.toml``); ``with_engine``: that coordinator also scrapes the file's ``[engine]``."""
    if target is not None:
        async with CoordinatorClient(target) as client:
            return await (now or _nodes)(client)
    path = nodes_file or Path("nodes.toml")
    spec = load_nodes_file(path)
    if not with_engine:  # its engine is not scraped here: its token file is no concern of this command
        spec = replace(spec, engine=None)
    check_secret_files(str(path), spec)  # a missing token file named with its key, before any link dials
    async with embedded_coordinator(spec.nodes, engine=spec.engine) as client:
        return await settle(client)


async def _nodes(client: CoordinatorClient) -> Any:
    return await client.nodes()
