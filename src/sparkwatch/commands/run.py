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
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from sparkwatch.client import CoordinatorClient, CoordinatorError, CoordinatorTarget
from sparkwatch.commands.embedded import embedded_coordinator
from sparkwatch.commands.redaction import default_name, redact_argv, redact_text
from sparkwatch.commands.summary import live_line, summary_table
from sparkwatch.core.run_spec import DEFAULT_INTERVAL_S
from sparkwatch.importers import FORMATS, ClockAnchor, ImportFormatError, read_windows
from sparkwatch.links.nodes_file import load_nodes
from sparkwatch.outputs import check_output, write_export
from sparkwatch.proxy.proxy import ProxyConfig
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sinks import RunPoster
from sparkwatch_agent.shared.lifecycle import StopPolicy

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
    interval_s: float = DEFAULT_INTERVAL_S
    proxy_upstream: str | None = None
    proxy_listen: tuple[str, int] = ("127.0.0.1", 8899)
    warmup: int = 0
    imports: Sequence[tuple[str, str]] = ()
    clock_anchor: ClockAnchor | None = None
    output: Path | None = None
    db: Path | None = None
    wait_nodes_s: float = 15.0
    status_every_s: float | None = None  # None: 1 s on a TTY, 5 s otherwise
    capture_dir: Path | None = None  # set by run_command: a temporary folder for the lmx-status capture
    stderr: TextIO = field(default=sys.stderr)


def parse_import(text: str) -> tuple[str, str]:
    fmt, sep, path = text.partition(":")
    if not sep or not fmt or not path:
        raise RunCommandError(f"--import takes FORMAT:FILE (e.g. guidellm:benchmarks.json), not {text!r}")
    return fmt, path


@contextlib.asynccontextmanager
async def _client(opts: RunOptions) -> AsyncIterator[CoordinatorClient]:
    """The standing coordinator the options name, or one embedded for ``--nodes``."""
    if opts.nodes_file is None:
        assert opts.target is not None
        async with CoordinatorClient(opts.target) as client:
            yield client
        return
    async with embedded_coordinator(load_nodes(opts.nodes_file), opts.db) as client:
        yield client


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
    """Pass CMD's stderr through as it comes (progress bars without newlines included) and stamp every
    JSON-object line on arrival into the lmx-status capture."""
    pending = b""
    t_arrival = time.time_ns()
    while chunk := await stream.read(65536):
        t_arrival = time.time_ns()
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            _capture_line(line, t_arrival, capture)
        if len(pending) > MAX_STATUS_LINE_BYTES:
            pending = b""  # a progress bar redrawn with \r, not a status line
    _capture_line(pending, t_arrival, capture)


def _capture_line(line: bytes, t_arrival_ns: int, capture: TextIO) -> None:
    if not line.lstrip().startswith(b"{"):
        return
    try:
        status = orjson.loads(line)
    except orjson.JSONDecodeError:
        return
    if isinstance(status, dict):
        capture.write(json.dumps({"t_arrival_ns": t_arrival_ns, "status": status}) + "\n")


class Interrupts:
    """One SIGINT/SIGTERM policy for the whole run, so no signal can cut off the export.

    Ctrl-C: the terminal already sent it to CMD (same foreground group), so it is not passed on — that
    would make it a second Ctrl-C, which harnesses read as "quit now, skip the results". The first one
    only stops sparkwatch from starting CMD if it has not yet; the run is then ended and exported. A
    second one exits at once. SIGTERM is passed on to CMD while it runs, and otherwise counts as Ctrl-C.
    """

    def __init__(self, out: TextIO) -> None:
        self.requested = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None
        self._out = out
        self._policy = StopPolicy(self._first)  # the second request exits at once, as everywhere

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self._on_signal, False)
        loop.add_signal_handler(signal.SIGTERM, self._on_signal, True)

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)

    @property
    def _running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def _on_signal(self, term: bool) -> None:
        if term and self._running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            return
        self._policy.request("SIGTERM" if term else "SIGINT")

    def _first(self, _why: str) -> None:
        self.requested.set()
        what = "the command to stop" if self._running else "the run to be ended and exported"
        self._out.write(f"sparkwatch: waiting for {what} (Ctrl-C again to quit at once)\n")


#: After CMD exits, how long its stderr may still be read (a background child can hold the pipe open).
TEE_DRAIN_S = 2.0


async def _run_cmd(opts: RunOptions, capture: TextIO | None, interrupts: Interrupts) -> int:
    if interrupts.requested.is_set():
        opts.stderr.write("sparkwatch: interrupted before the command started\n")
        return 130
    # CMD's stderr goes to a pipe of our own, not asyncio's: asyncio's Process.wait() also waits for its
    # pipes to close, which a background child of CMD holding stderr would put off indefinitely
    read_fd, write_fd = os.pipe() if capture is not None else (-1, -1)
    try:
        proc = await asyncio.create_subprocess_exec(*opts.command, stderr=write_fd if capture else None)
    except OSError as exc:
        if capture is not None:
            os.close(read_fd)
        opts.stderr.write(f"sparkwatch: cannot start {opts.command[0]}: {exc.strerror or exc}\n")
        return 127
    finally:
        if capture is not None:
            os.close(write_fd)
    interrupts.proc = proc
    tee = pipe = None
    if capture is not None:
        reader = asyncio.StreamReader()
        pipe, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        tee = asyncio.create_task(_tee_status(reader, capture))
    try:
        code = await proc.wait()
        if tee is not None:
            try:
                await asyncio.wait_for(asyncio.shield(tee), TEE_DRAIN_S)
            except TimeoutError:
                log.warning("the command's stderr is still open (a background process?); capture stopped")
    finally:
        if tee is not None and not tee.done():
            tee.cancel()
            await asyncio.gather(tee, return_exceptions=True)
        if pipe is not None:
            pipe.close()
        if proc.returncode is None:  # we are failing: never leave the benchmark running behind us
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 5)
    return code if code >= 0 else 128 - code


async def _import(client: CoordinatorClient, run_id: str, opts: RunOptions, fmt: str, path: Path) -> None:
    """One import; a bad file or a refusal is reported and the run goes on (its export still comes)."""
    try:
        windows = read_windows(fmt, path, clock_anchor=opts.clock_anchor)
        stored = await client.import_windows(run_id, windows)
    except (ImportFormatError, CoordinatorError) as exc:
        opts.stderr.write(f"sparkwatch: import of {path} ({fmt}) skipped: {exc}\n")
        return
    log.info("imported %d window(s) from %s (%s)", stored, path, fmt)


def check_command(command: Sequence[str]) -> None:
    """A command that cannot start is a mistake to report before a run is opened for it."""
    program = command[0]
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise RunCommandError(f"cannot run {program}: no such executable file")
    elif shutil.which(program) is None:
        raise RunCommandError(f"cannot run {program}: not found on PATH")


async def run_command(opts: RunOptions) -> int:
    """The whole run; returns CMD's exit code (or 127 when it could not start)."""
    for fmt, path in opts.imports:
        if fmt not in FORMATS:
            raise RunCommandError(f"unknown import format {fmt!r} (one of: {', '.join(sorted(FORMATS))})")
        if path == LMX_STATUS_STREAM and fmt != "lmx-status":
            raise RunCommandError(f"only lmx-status can read CMD's stderr ({fmt}:- given)")
    check_output(opts.output or Path("sparkwatch-run.json"))
    check_command(opts.command)
    if opts.clock_anchor is None:
        opts = replace(opts, clock_anchor=_anchor_now())
    interrupts = Interrupts(opts.stderr)
    async with (
        _client(opts) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        opts = replace(opts, capture_dir=Path(stack.enter_context(tempfile.TemporaryDirectory())))
        proxy_stack = await stack.enter_async_context(contextlib.AsyncExitStack())
        poster = RunPoster(client)
        if opts.proxy_upstream is not None:  # bind first: a port in use must not leave a run behind
            host, port = opts.proxy_listen
            config = ProxyConfig(opts.proxy_upstream, warmup=opts.warmup)
            proxy = running_proxy(host, port, config, poster, client)
            proxy_url = await proxy_stack.enter_async_context(proxy)
            opts.stderr.write(f"sparkwatch: proxy {proxy_url} -> {redact_text(opts.proxy_upstream)}\n")
        run = await client.create_run(_run_name(opts), interval_s=opts.interval_s)
        run_id = run["id"]
        poster.run_id = run_id
        poster.start()
        opts.stderr.write(f"sparkwatch: run {run_id} open on {client.target.url}\n")
        code: int | None = None
        interrupts.install()
        try:
            code = await _measure(opts, client, interrupts)
        finally:
            await proxy_stack.aclose()  # requests still in flight end (and make their windows) first
            export = await _finish(opts, client, poster, run_id, code)
            interrupts.remove()
    output = opts.output or Path(f"sparkwatch-{run_id}.json")
    if export is None:
        return code if code is not None else 1
    try:
        write_export(output, export)
    except OSError as exc:
        fallback = Path(tempfile.gettempdir()) / f"sparkwatch-{run_id}.json"
        try:
            write_export(fallback, export)
        except OSError as again:
            opts.stderr.write(f"sparkwatch: cannot write {output} nor {fallback}: {again.strerror}\n")
            return code if code is not None else 1
        opts.stderr.write(
            f"sparkwatch: cannot write {output} ({exc.strerror}); the export is in {fallback}\n"
        )
        output = fallback
    print(summary_table(export))
    opts.stderr.write(f"sparkwatch: export written to {output}\n")
    assert code is not None
    if code != 0:
        opts.stderr.write(f"sparkwatch: the command exited with {code}; the export says so\n")
    return code


async def _measure(opts: RunOptions, client: CoordinatorClient, interrupts: Interrupts) -> int:
    """Wait for the nodes, then run CMD with the live line going; returns CMD's exit code."""
    waiting = asyncio.create_task(
        client.wait_caught_up(time.time_ns(), opts.wait_nodes_s, interval_s=opts.interval_s)
    )
    stopped = asyncio.create_task(interrupts.requested.wait())
    await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not waiting.done():
        waiting.cancel()
    outcome, _ = await asyncio.gather(waiting, stopped, return_exceptions=True)
    if isinstance(outcome, CoordinatorError):
        raise outcome
    tty = opts.stderr.isatty()
    every_s = opts.status_every_s or (1.0 if tty else 5.0)
    live = asyncio.create_task(_live(client, opts.stderr, every_s, tty))
    try:
        if any(p == LMX_STATUS_STREAM for _f, p in opts.imports):
            with _capture_path(opts).open("w") as capture:
                return await _run_cmd(opts, capture, interrupts)
        return await _run_cmd(opts, None, interrupts)
    finally:
        live.cancel()
        await asyncio.gather(live, return_exceptions=True)
        if tty:
            opts.stderr.write("\r\x1b[K")


def _run_name(opts: RunOptions) -> str:
    """What the run is called wherever it shows (log, database, export): built from the redacted argv, and
    even a ``--name`` goes through the same rules, since nothing unredacted may reach the coordinator."""
    return redact_text(opts.name) if opts.name else default_name(redact_argv(opts.command))


def _capture_path(opts: RunOptions) -> Path:
    """Where `--import lmx-status:-` collects CMD's status lines."""
    assert opts.capture_dir is not None
    return opts.capture_dir / "lmx-status.jsonl"


async def _finish(
    opts: RunOptions, client: CoordinatorClient, poster: RunPoster, run_id: str, code: int | None
) -> dict[str, Any] | None:
    """Store what the run made, end it and fetch its export — each step even if an earlier one failed."""
    lost = await poster.close()
    if lost:
        opts.stderr.write(f"sparkwatch: {len(lost)} proxy window(s) could not be stored\n")
    if code is not None:
        for fmt, path in opts.imports:
            source = _capture_path(opts) if path == LMX_STATUS_STREAM else Path(path)
            await _import(client, run_id, opts, fmt, source)
    command = None if code is None else {"argv": redact_argv(opts.command), "exit_code": code}
    try:
        await client.wait_caught_up(time.time_ns(), timeout_s=5.0)
        await client.end_run(run_id, command)
        return await client.export(run_id)
    except CoordinatorError as exc:
        opts.stderr.write(f"sparkwatch: run {run_id} could not be ended and exported: {exc}\n")
        return None


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


MAX_STATUS_LINE_BYTES = 1 << 20
