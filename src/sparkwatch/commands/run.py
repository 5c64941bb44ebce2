"""`sparkwatch run -- CMD…`: open a run, (optionally) put the proxy in front of the endpoint, run the
benchmark, import its result files, end the run, write the export and print the summary.

The export is written whatever CMD does — it records CMD's argv and exit code — and our exit code is
CMD's (130 after a Ctrl-C; with ``--strict``, 3 when CMD succeeded but the measurement is not sound). A
coordinator is embedded from ``--nodes`` when no ``--coordinator`` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from sparkwatch.client import CoordinatorClient, CoordinatorError
from sparkwatch.client_waits import end_wait_s
from sparkwatch.commands.embedded import embedded_coordinator
from sparkwatch.commands.interrupts import INTERRUPTED_EXIT_CODE, Interrupts
from sparkwatch.commands.live_view import LiveView
from sparkwatch.commands.outcome import no_export_json, print_outcome
from sparkwatch.commands.quality import EXIT_NO_EXPORT, exit_code, judge
from sparkwatch.commands.redaction import command_record, default_name, redact_argv, redact_text
from sparkwatch.commands.report_cmd import series_for, write_report_beside
from sparkwatch.commands.run_greeting import greet, silent_of, strict_refusal
from sparkwatch.commands.run_lmx import (
    ProxyWindows,
    capture_notes,
    check_capture,
    import_failure,
    not_through_proxy,
    uses_proxy,
    warmup_mismatch,
    with_proxy_url,
)
from sparkwatch.commands.run_options import LMX_STATUS_STREAM, RunOptions, RunState, check_options
from sparkwatch.commands.summary import live_parts
from sparkwatch.commands.wrapped import command_env, run_wrapped
from sparkwatch.coordinator.serve import check_listen
from sparkwatch.core.export import with_run_notes
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.repeated_windows import repeated, verdict
from sparkwatch.defaults import ENV_RUN_ID
from sparkwatch.engines.spec import engine_from_url
from sparkwatch.importers import ClockAnchor, ImportFormatError, read_windows
from sparkwatch.links.nodes_file import check_secret_files, load_nodes_file
from sparkwatch.outputs import write_export_or_spare
from sparkwatch.proxy.clock import ProxyClock
from sparkwatch.proxy.proxy import ProxyConfig
from sparkwatch.proxy.serve import running_proxy
from sparkwatch.proxy.sinks import RunPoster
from sparkwatch.proxy.spill import spill_lost, spill_path_beside

log = logging.getLogger(__name__)

#: What `run` says at once when nothing but the command itself, on a standing coordinator, makes windows.
NO_WINDOW_SOURCE = (
    "no --proxy-upstream and no --import: only the marks the command posts itself make windows to measure"
    f" (${ENV_RUN_ID}, docs/cli.md), else every figure is n/a; --scope run measures the whole run instead"
)
#: ... and with --nodes, where the command is not given the embedded coordinator's token: nothing does.
NO_WINDOW_SOURCE_EMBEDDED = (
    "no --proxy-upstream and no --import: with --nodes the command cannot post marks, so nothing will make"
    " windows to measure and every figure will be n/a; give --proxy-upstream, --import or --scope run"
)


@contextlib.asynccontextmanager
async def _client(opts: RunOptions, state: RunState) -> AsyncIterator[CoordinatorClient]:
    """The standing coordinator the options name, or one embedded for ``--nodes`` (its database in a
    temporary folder unless ``--db``; a second Ctrl-C leaves the folder behind on purpose)."""
    if opts.nodes_file is None:
        assert opts.target is not None
        async with CoordinatorClient(opts.target) as client:
            yield client
        return
    nodes_file = load_nodes_file(opts.nodes_file)
    check_secret_files(str(opts.nodes_file), nodes_file)
    engine = engine_from_url(opts.engine_metrics) if opts.engine_metrics else nodes_file.engine
    tmp = None if opts.db else Path(tempfile.mkdtemp(prefix="sparkwatch-run-"))  # --db: none to leave
    state.db = opts.db if tmp is None else tmp / "sparkwatch.db"
    try:
        async with embedded_coordinator(nodes_file.nodes, state.db, engine=engine) as client:
            yield client
    finally:
        # kept after a second Ctrl-C, which said where: the command's own ending (its end refused, the run
        # ended by the Ctrl-C) could unwind to here before the Ctrl-C's exit, and took the data with it
        if tmp is not None and not state.quitting:
            shutil.rmtree(tmp, ignore_errors=True)


async def _live(client: CoordinatorClient, view: LiveView, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            parts = live_parts(await client.nodes())
        except CoordinatorError as exc:
            parts = [f"coordinator: {exc}"]
        view.show(parts)


async def _import(client: CoordinatorClient, opts: RunOptions, state: RunState, fmt: str, path: Path) -> None:
    """One import; a bad file or refusal is said, the run goes on (lmx-status only checks proxy windows, and
    a file that repeats the proxy's requests is not imported: core/repeated_windows.py)."""
    proxied = state.proxy_windows.windows if state.proxy_windows is not None else []
    if fmt == "lmx-status":
        _note(opts, state, *capture_notes(path, tokens=not proxied))
    if fmt == "lmx-status" and proxied:
        check = check_capture(path, proxied)
        _note(opts, state, *check.notes)
        if not check.ok:
            state.failed_checks.append(check.notes[0])
        return
    try:
        windows = read_windows(fmt, path, clock_anchor=opts.clock_anchor, since_ns=state.opened_ns)
        if proxied:  # held whole only beside the proxy, to be compared with its windows
            held = list(windows)
            in_run = [w for w in proxied if w.id not in state.unstored]  # a spilled window is no repeat
            take, said = verdict(fmt, str(path), repeated(in_run, held), len(held))
            if not take:  # the proxy's requests again: not even sent (the coordinator would refuse them)
                _note(opts, state, said or "")
                return
            windows = iter(held)
        done = await client.import_windows(state.run_id, windows)
        if done.note is not None:  # the coordinator left out the windows that repeat the proxy's
            _note(opts, state, f"{path}: {done.note}")
    except (ImportFormatError, CoordinatorError) as exc:
        shown, text = import_failure(path, exc, _capture_path(opts) if opts.capture_dir else None)
        opts.stderr.write(f"sparkwatch: import of {shown} ({fmt}) skipped: {text}\n")
        state.failed_imports.append(f"{shown} ({fmt}): {text}")
        state.notes.append(f"import of {shown} ({fmt}) failed: {text}")  # the export says why it lacks them
        return
    log.info("imported %d window(s) from %s (%s)", done.count, path, fmt)


def _note(opts: RunOptions, state: RunState, *notes: str) -> None:
    """A run-level note: said now on stderr, and written in the export's ``run.notes``."""
    for text in notes:
        opts.stderr.write(f"sparkwatch: note: {text}\n")
        state.notes.append(text)


async def run_command(opts: RunOptions) -> int:
    """The whole run; returns the exit code (module docstring). Its signal handlers stay until the export
    is written and said: put back earlier, a late signal unwound the run's end and removed its database."""
    interrupts = Interrupts(opts.stderr)
    try:
        return await _run_command(opts, interrupts)
    finally:
        interrupts.remove()


async def _run_command(opts: RunOptions, interrupts: Interrupts) -> int:
    check_options(opts)
    if opts.proxy_upstream is not None:  # a port in use: one line before a coordinator starts or dials
        await check_listen(*opts.proxy_listen)
    if opts.clock_anchor is None:
        opts = replace(opts, clock_anchor=ClockAnchor.read_now())
    state = RunState()
    async with _client(opts, state) as client, contextlib.AsyncExitStack() as stack:
        capture = stack.enter_context(tempfile.TemporaryDirectory(prefix="sparkwatch-capture-"))
        opts = replace(opts, capture_dir=Path(capture))
        proxy_stack = await stack.enter_async_context(contextlib.AsyncExitStack())
        poster = RunPoster(client)
        if opts.proxy_upstream is not None:  # bind first: a port in use must not leave a run behind
            opts = await _start_proxy(opts, state, poster, client, proxy_stack)
        greeted = await greet(client, opts)
        if (refused := strict_refusal(opts, greeted)) is not None:
            return refused
        state.silent = silent_of(greeted)
        state.opened_ns = time.time_ns()
        run = await client.create_run(
            _run_name(opts),
            interval_s=opts.interval_s,
            scope=opts.scope,
            gate_threshold=opts.gate_threshold,
            phases=opts.phases,
        )
        state.run_id = poster.run_id = run["id"]
        poster.start()
        opts.stderr.write(f"sparkwatch: run {state.run_id} open on {client.target.url}\n")
        if opts.proxy_upstream is None and not opts.imports and opts.scope != "run":  # before CMD, not after
            said = NO_WINDOW_SOURCE if opts.nodes_file is None else NO_WINDOW_SOURCE_EMBEDDED
            opts.stderr.write(f"sparkwatch: note: {said}\n")
        interrupts.on_force = lambda: _quit_now(opts, client, state, interrupts)
        interrupts.install()
        try:
            state.code = await _measure(opts, client, interrupts, state)
        finally:
            await proxy_stack.aclose()  # requests still in flight end (and make their windows) first
            export = await _finish(opts, client, poster, state)
    interrupted = interrupts.requested.is_set()
    if export is None:
        return _no_export(opts, state, interrupted)
    output = _write(opts, export, state.run_id)
    quality = judge(export, state.nodes_behind, state.failed_imports, state.failed_checks)
    code = INTERRUPTED_EXIT_CODE if interrupted else exit_code(state.code or 0, quality, opts.strict)
    print_outcome(
        export, quality, output=output, exit_code=code, interrupted=interrupted, json_out=opts.json_out,
        stdout=sys.stdout, stderr=opts.stderr,
    )  # fmt: skip
    opts.stderr.write(f"sparkwatch: export written to {output}\n")
    if opts.report:
        write_report_beside(export, output, opts.stderr)
    if state.code not in (0, None):
        opts.stderr.write(f"sparkwatch: the command exited with {state.code}; the export says so\n")
    return code


async def _start_proxy(
    opts: RunOptions,
    state: RunState,
    poster: RunPoster,
    client: CoordinatorClient,
    stack: contextlib.AsyncExitStack,
) -> RunOptions:
    """The proxy in front of the endpoint; returns the options with ``{proxy}`` in CMD's argv replaced."""
    assert opts.proxy_upstream is not None
    host, port = opts.proxy_listen
    sink: RunPoster | ProxyWindows = poster
    if opts.imports:  # kept to check an import against: lmx's status lines, a harness file repeating them
        sink = state.proxy_windows = ProxyWindows(poster)
    clock = ProxyClock(client)  # the proxy's windows' clock, and the lmx status lines' (wrapped.py)
    await clock.start()
    stack.push_async_callback(clock.stop)
    state.now_ns = clock.now_ns
    config = ProxyConfig(opts.proxy_upstream, warmup=opts.warmup)
    untimed = partial(_note, opts, state)  # the POSTs it made no window for: a note of the run, in its export
    proxy = running_proxy(host, port, config, sink, client, clock=clock, untimed_to=untimed)
    proxy_url = await stack.enter_async_context(proxy)
    opts.stderr.write(f"sparkwatch: proxy {proxy_url} -> {redact_text(opts.proxy_upstream)}\n")
    if not uses_proxy(opts.command):  # before CMD: a benchmark pointed at the model server is not measured
        opts.stderr.write(f"sparkwatch: note: {not_through_proxy(proxy_url)}\n")
    elif warning := warmup_mismatch(opts.command, opts.warmup):
        opts.stderr.write(f"sparkwatch: warning: {warning}\n")
    return replace(opts, command=with_proxy_url(opts.command, proxy_url))


def _no_export(opts: RunOptions, state: RunState, interrupted: bool) -> int:
    """The run could not be ended or exported (said on stderr already): a failing command keeps its code,
    else EXIT_NO_EXPORT (130 after a Ctrl-C); ``--json`` still prints its object, with no export."""
    code = state.code or (INTERRUPTED_EXIT_CODE if interrupted else EXIT_NO_EXPORT)
    if opts.json_out:
        print(json.dumps(no_export_json(state.run_id, code, state.code, interrupted)))
    return code


def _write(opts: RunOptions, export: dict[str, Any], run_id: str) -> Path:
    """Write the export where asked, else (that failing) to the temporary folder; returns where."""
    output = opts.output or Path(f"sparkwatch-{run_id}.json")
    return write_export_or_spare(output, export, f"sparkwatch-{run_id}.json", opts.stderr)


async def _measure(
    opts: RunOptions, client: CoordinatorClient, interrupts: Interrupts, state: RunState
) -> int | None:
    """Wait for the nodes, then run CMD with the live line going; returns CMD's exit code (None: a Ctrl-C
    came before it started)."""
    await interrupts.unless_requested(
        client.wait_caught_up(time.time_ns(), opts.wait_nodes_s, opts.interval_s, skip=state.silent)
    )
    tty = opts.stderr.isatty()
    every_s = opts.status_every_s or (1.0 if tty else 5.0)
    view = LiveView(opts.stderr, tty)
    live = asyncio.create_task(_live(client, view, every_s))
    try:
        standing = None if opts.nodes_file else client.target.url  # an embedded one's: never told to CMD
        env = command_env(state.run_id, standing, opts.token_file)
        if any(p == LMX_STATUS_STREAM for _f, p in opts.imports):
            with _capture_path(opts).open("w") as capture:
                return await run_wrapped(
                    opts.command,
                    capture,
                    interrupts,
                    opts.stderr,
                    opts.json_out,
                    env=env,
                    now_ns=state.now_ns,
                )
        return await run_wrapped(opts.command, None, interrupts, opts.stderr, opts.json_out, env=env)
    finally:
        live.cancel()
        await asyncio.gather(live, return_exceptions=True)
        view.clear()


async def _finish(
    opts: RunOptions, client: CoordinatorClient, poster: RunPoster, state: RunState
) -> dict[str, Any] | None:
    """Store what the run made, end it and fetch its export — each step even if an earlier one failed."""
    lost = await poster.close()
    state.unstored = {w.id for w in lost}
    if lost:
        spill = opts.spill or spill_path_beside(opts.output or Path(f"sparkwatch-{state.run_id}.json"))
        said = spill_lost(spill, lost, poster.after_end, state.run_id)
        opts.stderr.write(f"sparkwatch: {len(lost)} proxy window(s) could not be stored: {said}\n")
    if state.code is not None:
        for fmt, path in opts.imports:
            source = _capture_path(opts) if path == LMX_STATUS_STREAM else Path(path)
            await _import(client, opts, state, fmt, source)
    command = command_record(opts.command, state.code)
    try:
        # a node late at the start is only logged; one whose samples never reach the end spoils the run (one
        # never heard from at all is not waited for: it is behind, said in the quality line). Waited for
        # after the end, up to its stamp: caught up to a moment before it, the export missed the last interval
        nodes = await client.nodes()
        unheard_now = silent_of(nodes)
        ended = await _end(client, opts, state, command)
        end_ns = ended["t_end_ns"] or time.time_ns()
        behind = await client.wait_caught_up(end_ns, end_wait_s(nodes), skip=unheard_now, meters=True)
        state.nodes_behind = sorted({*behind, *unheard_now})
        if dropped := ended.get("dropped_marks"):  # CMD's own marks, begun and never ended
            names = name_ids([str(n) for n in dropped])
            _note(opts, state, f"mark(s) still open when the run ended, dropped without a window: {names}")
        return with_run_notes(await client.export(state.run_id, series_for(opts.report)), state.notes)
    except CoordinatorError as exc:
        if not state.quitting:  # else the second Ctrl-C ended the run under us, and says so
            opts.stderr.write(f"sparkwatch: run {state.run_id} could not be ended and exported: {exc}\n")
        return None


async def _end(
    client: CoordinatorClient, opts: RunOptions, state: RunState, command: dict[str, Any] | None
) -> dict[str, Any]:
    """End the run; one already ended by someone else (`sparkwatch runs end ID`, the API) is exported as it
    was ended, and the note says so (the command's outcome is not recorded on it)."""
    try:
        return await client.end_run(state.run_id, command)
    except CoordinatorError as exc:
        if exc.code != "run_ended" or state.quitting:
            raise
    run = await client.run(state.run_id)
    _note(opts, state, "the run was ended by someone else while the command ran; its end is theirs")
    return run


async def _quit_now(
    opts: RunOptions, client: CoordinatorClient, state: RunState, interrupts: Interrupts
) -> None:
    """A second Ctrl-C: say where the data is kept, then end the run with the command's argv and exit code
    (-9 where that Ctrl-C killed it), so that the agents' interval leases are released, and, on an embedded
    coordinator, give the release a moment; the caller bounds the time."""
    state.quitting = True
    if state.db is not None:
        opts.stderr.write(
            f"sparkwatch: the run's database is kept at {state.db};"
            f" its export: sparkwatch export --db {state.db} {state.run_id}\n"
        )
    else:
        opts.stderr.write(
            f"sparkwatch: run {state.run_id} stays on {client.target.url};"
            f" its export: sparkwatch runs export {state.run_id}\n"
        )
    opts.stderr.flush()
    with contextlib.suppress(CoordinatorError):
        code = state.code if state.code is not None else await interrupts.reaped_exit_code()
        await client.end_run(state.run_id, command_record(opts.command, code))
    if state.db is not None:
        await client.wait_for_nodes(lambda n: n.get("lease_interval_s") is None, timeout_s=2.0)
    if opts.capture_dir is not None:  # CMD's captured output, which no import will read now
        shutil.rmtree(opts.capture_dir, ignore_errors=True)


def _run_name(opts: RunOptions) -> str:
    """What the run is called wherever it shows (log, database, export): built from the redacted argv, and
    even a ``--name`` goes through the same rules, since nothing unredacted may reach the coordinator."""
    return redact_text(opts.name) if opts.name else default_name(redact_argv(opts.command))


def _capture_path(opts: RunOptions) -> Path:
    """Where `--import lmx-status:-` collects CMD's status lines."""
    assert opts.capture_dir is not None
    return opts.capture_dir / "lmx-status.jsonl"
