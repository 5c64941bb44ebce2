"""`sparkwatch run -- CMD…`: open a run, (optionally) put the proxy in front of the endpoint, run the
benchmark, import its result files, end the run, write the export and print the summary.

The export is written whatever CMD does — it records CMD's argv and exit code — and our exit code is
CMD's. A coordinator is embedded from ``--nodes`` when no ``--coordinator`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget
from sparkwatch.coordinator_serve import running_coordinator
from sparkwatch.importers import FORMATS, ClockAnchor, ImportFormatError, load_windows
from sparkwatch.integrations.proxy import ProxyConfig
from sparkwatch.integrations.proxy_serve import running_proxy
from sparkwatch.integrations.window_sinks import RunPoster
from sparkwatch.nodes_file import load_nodes
from sparkwatch.summary import live_line, summary_table

log = logging.getLogger(__name__)

LMX_STATUS_STREAM = "-"  # --import lmx-status:- reads CMD's own stderr, where lmx writes --json-status


class RunCommandError(Exception):
    """A mistake in the run's arguments, reported before anything starts."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    command: Sequence[str]
    nodes_file: Path | None = None
    target: CoordinatorTarget | None = None
    name: str | None = None
    interval_s: float = 0.1
    proxy_upstream: str | None = None
    proxy_listen: tuple[str, int] = ("127.0.0.1", 8899)
    warmup: int = 0
    imports: Sequence[tuple[str, str]] = ()
    clock_anchor: ClockAnchor | None = None
    output: Path | None = None
    db: Path | None = None
    wait_nodes_s: float = 15.0
    status_every_s: float | None = None  # None: 1 s on a TTY, 5 s otherwise
    stderr: TextIO = field(default=sys.stderr)


def parse_import(text: str) -> tuple[str, str]:
    fmt, sep, path = text.partition(":")
    if not sep or not fmt or not path:
        raise RunCommandError(f"--import takes FORMAT:FILE (e.g. guidellm:benchmarks.json), not {text!r}")
    return fmt, path


@contextlib.asynccontextmanager
async def _coordinator(opts: RunOptions) -> AsyncIterator[CoordinatorTarget]:
    if opts.nodes_file is None:
        assert opts.target is not None
        yield opts.target
        return
    nodes = load_nodes(opts.nodes_file)
    with tempfile.TemporaryDirectory(prefix="sparkwatch-run-") as tmp:
        db = opts.db or Path(tmp) / "run.db"
        async with running_coordinator(nodes, db, "127.0.0.1", 0, None) as running:
            log.info("embedded coordinator on %s (%d nodes, db %s)", running.url, len(nodes), db)
            yield CoordinatorTarget(running.url, None)


async def _live(client: CoordinatorClient, out: TextIO, every_s: float, tty: bool) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            line = live_line(await client.nodes())
        except CoordinatorError as exc:
            line = f"coordinator: {exc}"
        out.write(f"\r\x1b[K{line}" if tty else f"{line}\n")
        out.flush()


async def _tee_status(stream: asyncio.StreamReader, capture: TextIO) -> None:
    """Pass CMD's stderr through; stamp every JSON-object line on arrival into the lmx-status capture."""
    while line := await stream.readline():
        t_arrival = time.time_ns()
        sys.stderr.buffer.write(line)
        sys.stderr.flush()
        try:
            status = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(status, dict):
            capture.write(json.dumps({"t_arrival_ns": t_arrival, "status": status}) + "\n")


async def _run_cmd(opts: RunOptions, capture: TextIO | None) -> int:
    try:
        proc = await asyncio.create_subprocess_exec(
            *opts.command, stderr=asyncio.subprocess.PIPE if capture is not None else None
        )
    except OSError as exc:
        opts.stderr.write(f"sparkwatch: cannot start {opts.command[0]}: {exc.strerror or exc}\n")
        return 127
    loop = asyncio.get_running_loop()
    interrupted = 0

    def forward(sig: signal.Signals) -> None:  # CMD decides how to stop; a second Ctrl-C exits us too
        nonlocal interrupted
        interrupted += 1
        if interrupted > 1:
            os._exit(130)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, forward, sig)
    try:
        if capture is not None:
            assert proc.stderr is not None
            await _tee_status(proc.stderr, capture)
        code = await proc.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return code if code >= 0 else 128 - code


async def _import(client: CoordinatorClient, run_id: str, opts: RunOptions, fmt: str, path: Path) -> None:
    try:
        windows = load_windows(fmt, path, clock_anchor=opts.clock_anchor)
    except ImportFormatError as exc:
        opts.stderr.write(f"sparkwatch: import skipped: {exc}\n")
        return
    stored = await client.add_windows(run_id, windows)
    log.info("imported %d window(s) from %s (%s)", stored, path, fmt)


async def run_command(opts: RunOptions) -> int:
    """The whole run; returns CMD's exit code (or 127 when it could not start)."""
    for fmt, path in opts.imports:
        if fmt not in FORMATS:
            raise RunCommandError(f"unknown import format {fmt!r} (one of: {', '.join(sorted(FORMATS))})")
        if path == LMX_STATUS_STREAM and fmt != "lmx-status":
            raise RunCommandError(f"only lmx-status can read CMD's stderr ({fmt}:- given)")
    if opts.clock_anchor is None:
        opts = replace(opts, clock_anchor=_anchor_now())
    async with _coordinator(opts) as target, CoordinatorClient(target) as client:
        run = await client.create_run(opts.name or _default_name(opts.command), interval_s=opts.interval_s)
        run_id = run["id"]
        opts.stderr.write(f"sparkwatch: run {run_id} open on {target.url}\n")
        await wait_caught_up(client, time.time_ns(), opts.wait_nodes_s, interval_s=opts.interval_s)
        tty = opts.stderr.isatty()
        every_s = opts.status_every_s or (1.0 if tty else 5.0)
        live = asyncio.create_task(_live(client, opts.stderr, every_s, tty))
        poster = RunPoster(client, run_id)
        poster.start()
        with tempfile.TemporaryDirectory(prefix="sparkwatch-status-") as tmp:
            capture_path = Path(tmp) / "lmx-status.jsonl"
            wants_capture = any(p == LMX_STATUS_STREAM for _f, p in opts.imports)
            try:
                with capture_path.open("w") if wants_capture else contextlib.nullcontext() as capture:
                    code = await _with_proxy(opts, poster, capture)
            finally:
                live.cancel()
                await asyncio.gather(live, return_exceptions=True)
                if tty:
                    opts.stderr.write("\r\x1b[K")
                lost = await poster.close()
            if lost:
                opts.stderr.write(f"sparkwatch: {len(lost)} proxy window(s) could not be stored\n")
            for fmt, path in opts.imports:
                await _import(
                    client, run_id, opts, fmt, capture_path if path == LMX_STATUS_STREAM else Path(path)
                )
        await wait_caught_up(client, time.time_ns(), timeout_s=5.0)
        await client.end_run(run_id, {"argv": list(opts.command), "exit_code": code})
        export = await client.export(run_id)
    output = opts.output or Path(f"sparkwatch-{run_id}.json")
    write_export(output, export)
    print(summary_table(export))
    opts.stderr.write(f"sparkwatch: export written to {output}\n")
    if code != 0:
        opts.stderr.write(f"sparkwatch: the command exited with {code}; the export says so\n")
    return code


async def _with_proxy(opts: RunOptions, poster: RunPoster, capture: TextIO | None) -> int:
    if opts.proxy_upstream is None:
        return await _run_cmd(opts, capture)
    host, port = opts.proxy_listen
    config = ProxyConfig(opts.proxy_upstream, warmup=opts.warmup)
    async with running_proxy(host, port, config, poster) as running:
        opts.stderr.write(f"sparkwatch: proxy {running.url} -> {opts.proxy_upstream}\n")
        return await _run_cmd(opts, capture)


def _anchor_now() -> ClockAnchor:
    """A (wall, monotonic) pair read here, where CMD runs: what a vLLM result file's perf_counter times
    need. Python's perf_counter is CLOCK_MONOTONIC on Linux, the same clock for every process."""
    best: tuple[int, int, int] | None = None
    for _ in range(5):
        m0 = time.monotonic_ns()
        wall = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[2]:
            best = (wall, (m0 + m1) // 2, m1 - m0)
    assert best is not None
    return ClockAnchor(wall_ns=best[0], mono_ns=best[1], uncertainty_ns=max(1, best[2] // 2))


def _default_name(command: Sequence[str]) -> str:
    return " ".join(Path(command[0]).name if i == 0 else a for i, a in enumerate(command))[:200]


async def wait_caught_up(
    client: CoordinatorClient, t_wall_ns: int, timeout_s: float, interval_s: float | None = None
) -> bool:
    """Until every node's newest stored sample is from ``t_wall_ns`` or later (and, given ``interval_s``,
    was taken at that interval): a run's last window is covered only once its samples have arrived."""
    deadline = time.monotonic() + timeout_s
    while True:
        behind = []
        for n in await client.nodes():
            latest = n.get("latest") or {}
            stamp = latest.get("t_wall_ns")
            fast = interval_s is None or (latest.get("interval_s") or 1e9) <= interval_s
            if not n["connected"] or stamp is None or stamp < t_wall_ns or not fast:
                behind.append(n["node"])
        if not behind:
            return True
        if time.monotonic() > deadline:
            log.warning("nodes %s have not caught up after %.0f s", behind, timeout_s)
            return False
        await asyncio.sleep(0.1)


async def wait_for_hellos(client: CoordinatorClient, timeout_s: float) -> list[dict[str, Any]]:
    """The nodes once every one has said hello (or as they are when the time is up)."""
    return await _wait_for(client, timeout_s, lambda n: bool(n.get("hardware")))


async def wait_for_clocks(client: CoordinatorClient, timeout_s: float) -> list[dict[str, Any]]:
    """The nodes once every one has said hello and had its clock probed (or when the time is up)."""
    return await _wait_for(client, timeout_s, lambda n: bool(n.get("hardware") and n.get("clock")))


async def _wait_for(
    client: CoordinatorClient, timeout_s: float, ready: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = await client.nodes()
        if all(ready(n) for n in nodes) or time.monotonic() > deadline:
            return nodes
        await asyncio.sleep(0.1)


def write_text_atomically(path: Path, text: str) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_export(path: Path, export: dict[str, Any]) -> None:
    write_text_atomically(path, json.dumps(export, indent=2) + "\n")
