"""One SIGINT/SIGTERM/SIGHUP policy for a command that wraps a benchmark (`run`) or drives one (`demo`), so
no signal can cut off the export (a hangup is an SSH session to the head node dropped: it killed `run` at
once, and the benchmark, in its own process group, ran on with the run open and the agents' leases held).
A signal the parent left ignored stays ignored (``nohup``'s SIGHUP, a script's background job's SIGINT),
as POSIX programs keep it; SIGTERM then still stops the run.

The first signal is relayed once to the wrapped command's process group (it has its own, see
commands/wrapped.py) and asks the caller to stop starting work; the run is then ended and exported as
usual, and the command exits 130. A second signal quits at once — but first kills the command's whole
group, and runs a short, bounded ``on_force`` (end the run, release the agents' leases, say where the
data is kept), since quitting must never leave the benchmark running or the data unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TextIO, TypeVar

#: What the second signal's clean-up may take before the process exits regardless.
FORCE_BOUND_S = 3.0
#: How long the second signal's clean-up waits for the killed command to be reaped (its exit code).
REAP_S = 1.0
INTERRUPTED_EXIT_CODE = 130
#: What stops the run as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


def signal_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    """``sig`` to the process group ``proc`` leads (started with ``process_group=0``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def shell_exit_code(returncode: int) -> int:
    """A process's exit code as a shell says it: 128 + N where signal N ended it (asyncio says -N), the
    code the export records and `run` exits with whichever way the command ended."""
    return returncode if returncode >= 0 else 128 - returncode


def heeded(sig: signal.Signals) -> bool:
    """Whether ``sig`` is heeded: not left ignored by the parent (nor by :func:`term_as_interrupt`)."""
    return signal.getsignal(sig) is not signal.SIG_IGN


def term_as_interrupt() -> None:
    """SIGTERM and SIGHUP as Ctrl-C until :meth:`Interrupts.install` takes over (each one the parent did not
    leave ignored): a `run` stopped while it waits for the nodes' hellos was killed where it stood (its
    embedded coordinator's temporary database left behind), while a Ctrl-C there unwound it and exited 130."""
    if heeded(signal.SIGTERM):
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    if heeded(signal.SIGHUP):
        signal.signal(signal.SIGHUP, _hangup_as_interrupt)


def _hangup_as_interrupt(_signum: int, _frame: object) -> None:
    """A hangup once, as Ctrl-C: the next is ignored, since a shell's SIGHUP to its jobs and the kernel's to
    the terminal's group often both arrive, and a second must not cut the unwinding short."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raise KeyboardInterrupt


def _terminal_gone(terminals: tuple[int, ...]) -> None:
    """After a hangup, those of ``terminals`` (stdout and stderr, where they were a terminal when the command
    began) that no longer are one (a terminal that hung up fails ``isatty``) are /dev/null: every write to
    it fails (EIO), and the table printed after the export made `run` exit 2 with "Input/output error".
    Whoever read them left; the export is what remains. A ``kill -HUP`` with the terminal still there
    leaves it as it is."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in terminals:
            if not os.isatty(fd):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class Interrupts:
    def __init__(
        self,
        out: TextIO,
        on_force: Callable[[], Awaitable[None]] | None = None,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self.requested = asyncio.Event()
        self.proc: asyncio.subprocess.Process | None = None  # the wrapped command, once started
        self.on_force = on_force  # may be set later, once there is a run to end
        self._out = out
        self._exit = exit_now
        self._forcing: asyncio.Task[None] | None = None
        self._first: signal.Signals | None = None  # the signal that asked to stop, once one has
        self._installed: dict[signal.Signals, Any] = {}  # each handled signal: its handler before
        self._hung_up = False
        self._terminals = tuple(fd for fd in (1, 2) if os.isatty(fd))  # while they still are

    def install(self) -> None:
        """Handle each of :data:`STOP_SIGNALS` that is heeded (one left ignored stays ignored)."""
        loop = asyncio.get_running_loop()
        self._installed = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS if heeded(sig)}
        for sig in self._installed:
            loop.add_signal_handler(sig, self._on_signal, sig)

    def remove(self) -> None:
        """Each handled signal as it was before :meth:`install` (asyncio leaves SIG_DFL, which killed a
        `run` writing its export at a late SIGTERM), a hangup's ignored from the first on."""
        loop = asyncio.get_running_loop()
        for sig, before in self._installed.items():
            loop.remove_signal_handler(sig)
            handler = signal.SIG_IGN if sig is signal.SIGHUP and self._hung_up else before
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)  # None: set outside Python
        self._installed = {}

    async def unless_requested(self, work: Coroutine[Any, Any, T]) -> T | None:
        """``work``'s result, or None when a stop was requested first (``work`` is then cancelled);
        what ``work`` raised is raised."""
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.requested.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (task, stop):
            pending.cancel()
        await asyncio.gather(task, stop, return_exceptions=True)
        if task.cancelled():
            return None
        return task.result()

    async def reaped_exit_code(self) -> int | None:
        """The command's exit code once it has exited (137: killed by the second signal's SIGKILL), waited
        for a moment at most; None when it never started or has not been reaped by then."""
        if self.proc is None:
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(REAP_S):
                await self.proc.wait()
        code = self.proc.returncode
        return None if code is None else shell_exit_code(code)

    def command_started(self, proc: asyncio.subprocess.Process) -> None:
        """``proc`` is the wrapped command from now on. A signal that came while it was being started (the
        command may already run then, and asyncio handles the signal on the loop before the start returns)
        is relayed now: it found no command to relay to, and `run` then waited for the whole benchmark
        (a Ctrl-C once sat through the command's 60 s in CI)."""
        self.proc = proc
        if self._first is not None and proc.returncode is None:  # a second one already quits: kill it
            signal_group(proc, signal.SIGKILL if self._forcing is not None else self._first)

    @property
    def _running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def _on_signal(self, sig: signal.Signals) -> None:
        if sig is signal.SIGHUP:
            if not self._hung_up:
                self._hung_up = True
                _terminal_gone(self._terminals)
            if self.requested.is_set():
                return  # a hangup never forces: a shell's SIGHUP and the kernel's often both arrive
        if self.requested.is_set():
            self._force()
            return
        self.requested.set()
        self._first = sig
        if self._running:
            assert self.proc is not None
            signal_group(self.proc, sig)
        what = "the command to stop" if self._running else "the run to be ended and exported"
        self._out.write(f"\nsparkwatch: {sig.name}: waiting for {what} (Ctrl-C again to quit at once)\n")
        self._out.flush()

    def _force(self) -> None:
        if self._forcing is not None:
            return
        if self.proc is not None and self.proc.returncode is None:
            signal_group(self.proc, signal.SIGKILL)
        self._forcing = asyncio.ensure_future(self._force_exit())

    async def _force_exit(self) -> None:
        self._out.write("sparkwatch: quitting at once\n")
        if self.on_force is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(FORCE_BOUND_S):
                    await self.on_force()
        self._out.flush()
        self._exit(INTERRUPTED_EXIT_CODE)
