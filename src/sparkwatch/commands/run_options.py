"""What `sparkwatch run` is asked (its options, checked before anything starts) and what it made along the
way (its state)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sparkwatch.client import CoordinatorTarget
from sparkwatch.commands.run_lmx import PROXY_PLACEHOLDER, ProxyWindows, uses_proxy
from sparkwatch.defaults import (
    DEFAULT_GATE_THRESHOLD,
    DEFAULT_HELLO_WAIT_S,
    DEFAULT_INTERVAL_S,
    DEFAULT_SCOPE,
    ScopeKind,
)
from sparkwatch.importers import FORMATS, ClockAnchor
from sparkwatch.links.nodes_file import check_secret_files, load_nodes_file
from sparkwatch.links.nodes_named import named_files
from sparkwatch.outputs import check_output, database_files

DEFAULT_PROXY_LISTEN = ("127.0.0.1", 8899)
LMX_STATUS_STREAM = "-"  # --import lmx-status:- reads CMD's own stderr, where lmx writes --json-status


class RunCommandError(Exception):
    """A mistake in the run's arguments, reported before anything starts."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    command: Sequence[str]
    nodes_file: Path | None = None
    target: CoordinatorTarget | None = None
    token_file: Path | None = None  # --token-file, passed on to CMD (SPARKWATCH_TOKEN_FILE) for its marks
    name: str | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    scope: ScopeKind = DEFAULT_SCOPE
    gate_threshold: float = DEFAULT_GATE_THRESHOLD
    phases: Sequence[str] | None = None  # the window phases measured (None: the coordinator's default)
    engine_metrics: str | None = None  # the serving engine's /metrics, scraped by the embedded coordinator
    proxy_upstream: str | None = None
    proxy_listen: tuple[str, int] = DEFAULT_PROXY_LISTEN
    warmup: int = 0
    imports: Sequence[tuple[str, str]] = ()
    clock_anchor: ClockAnchor | None = None
    output: Path | None = None
    spill: Path | None = None  # proxy windows that could not be stored (default: beside the export)
    db: Path | None = None
    strict: bool = False
    json_out: bool = False
    report: bool = True  # the series block in the export, and EXPORT.report.html beside it
    wait_nodes_s: float = DEFAULT_HELLO_WAIT_S
    status_every_s: float | None = None  # None: 1 s on a TTY, 5 s otherwise
    capture_dir: Path | None = None  # set by run_command: a temporary folder for the lmx-status capture
    stderr: TextIO = field(default_factory=lambda: sys.stderr)  # the stream when made, not at import


@dataclass(slots=True)
class RunState:
    """What the run made besides its export, for the quality line and the exit code."""

    run_id: str = ""
    db: Path | None = None  # the embedded coordinator's database (None: a standing coordinator)
    code: int | None = None  # CMD's exit code, once it ran (None: it never started)
    quitting: bool = False  # a second Ctrl-C: the clean-up in flight must not report its own failures
    nodes_behind: list[str] = field(default_factory=list)
    failed_imports: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)  # lmx's status lines that disagree with the proxy
    unstored: set[str] = field(default_factory=set)  # ids of the proxy's windows the run did not take
    notes: list[str] = field(default_factory=list)  # run.notes of the export, said on stderr too
    proxy_windows: ProxyWindows | None = None  # kept when an import is to be checked against them
    opened_ns: int | None = None  # this host's clock as the run was opened: harness files are newer
    #: what stamps lmx's status lines: the proxy's clock (the coordinator's) when there is a proxy, so the
    #: cross-check compares stamps of one clock; else this host's, as every harness file's
    now_ns: Callable[[], int] = time.time_ns
    silent: frozenset[str] = frozenset()  # nodes whose agent had not said hello when the run opened


def parse_imports(texts: Sequence[str]) -> list[tuple[str, str]]:
    """Every ``--import FORMAT:FILE``, each once: a second would import the same windows again (the
    coordinator refuses their ids) or, for the command's stderr, read it twice."""
    imports = [parse_import(text) for text in texts]
    # one file by any spelling (f/x.csv, ./f/x.csv, a link to it), in any format: its windows twice
    keys = [(fmt, path) if path == "-" else os.path.realpath(path) for fmt, path in imports]
    for n, key in enumerate(keys):
        if key in keys[:n]:
            earlier = texts[keys.index(key)]
            said = "is given twice" if earlier == texts[n] else f"names the file --import {earlier} names"
            raise RunCommandError(f"--import {texts[n]} {said}")
    return imports


def parse_import(text: str) -> tuple[str, str]:
    fmt, sep, path = text.partition(":")
    if not sep or not fmt or not path:
        raise RunCommandError(f"--import takes FORMAT:FILE (e.g. guidellm:benchmarks.json), not {text!r}")
    return fmt, path


def check_command(command: Sequence[str]) -> None:
    """A command that cannot start is a mistake to report before a run is opened for it."""
    program = command[0]
    if not program:
        raise RunCommandError("cannot run '': the command's name is empty")
    if "/" in program:
        if os.path.isdir(program):
            raise RunCommandError(f"cannot run {program}: it is a folder")
        if not os.path.isfile(program):
            raise RunCommandError(f"cannot run {program}: no such file")
        if not os.access(program, os.X_OK):
            raise RunCommandError(f"cannot run {program}: it is not executable (chmod +x?)")
    elif shutil.which(program) is None:
        raise RunCommandError(f"cannot run {program}: not found on PATH")


def check_options(opts: RunOptions) -> None:
    """Every mistake in the options that can be found before a run is opened for them: one line each."""
    for fmt, path in opts.imports:
        if fmt not in FORMATS:
            raise RunCommandError(f"unknown import format {fmt!r} (one of: {', '.join(sorted(FORMATS))})")
        if path == LMX_STATUS_STREAM and fmt != "lmx-status":
            raise RunCommandError(f"only lmx-status can read CMD's stderr ({fmt}:- given)")
    if opts.proxy_upstream is None and uses_proxy(opts.command):
        raise RunCommandError(
            f"the command uses {PROXY_PLACEHOLDER}, the proxy's URL, but no --proxy-upstream URL is given"
        )
    reads = _read_by(opts)
    output = opts.output or Path("sparkwatch-run.json")
    check_output(output, reads, json_on_stdout=opts.json_out)
    if opts.spill is not None:
        check_output(opts.spill, {**reads, output: "the export (-o)"}, flag="--spill")
    check_command(opts.command)
    if opts.nodes_file is not None:  # said before the embedded coordinator's stack is loaded to read it
        check_secret_files(str(opts.nodes_file), load_nodes_file(opts.nodes_file))


def _read_by(opts: RunOptions) -> dict[Path, str]:
    """What the run reads or keeps, which neither ``-o`` nor ``--spill`` may replace: the nodes file and the
    files it names, the coordinator's token file (from ``--token-file`` or ``$SPARKWATCH_TOKEN_FILE``), the
    database, each ``--import`` file (the benchmark's own result)."""
    reads = {} if opts.db is None else database_files(opts.db)
    if opts.target is not None and opts.target.token_file is not None:  # --token-file, or the environment's
        reads |= {opts.target.token_file.resolve(): "the coordinator's token file"}
    if opts.nodes_file is not None:  # its secrets and keys (run -o a1.token wrote over an agent's token)
        reads |= named_files(opts.nodes_file)
    named = [(opts.nodes_file, "the nodes file (--nodes)")]
    named += [(Path(path), f"the {fmt} file --import reads") for fmt, path in opts.imports if path != "-"]
    reads.update({path.resolve(): what for path, what in named if path is not None})
    return reads
