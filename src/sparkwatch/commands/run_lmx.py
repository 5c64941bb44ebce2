"""lmx under `sparkwatch run`: the ``{proxy}`` placeholder in CMD's argv, and lmx's status lines checked
against the proxy's windows when both exist (docs/integrations.md, "lmx")."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from sparkwatch.core.windows import Window
from sparkwatch.importers import ImportFormatError, lmx_status, load_windows
from sparkwatch.importers.lmx_check import CrossCheck, cross_check
from sparkwatch.proxy.proxy import WindowSink

PROXY_PLACEHOLDER = "{proxy}"
#: lmx speed-test's own default number of warm-up requests (cmd/lmx/main.go @338a68be).
LMX_DEFAULT_WARMUP = 1
_WARMUP = re.compile(r"--warmup(?:=(.*))?")


def uses_proxy(command: Sequence[str]) -> bool:
    return any(PROXY_PLACEHOLDER in arg for arg in command)


#: A wildcard listen address and the loopback address CMD reaches the proxy at on the same host.
_REACHED_AT = {"//0.0.0.0:": "//127.0.0.1:", "//[::]:": "//[::1]:"}


def reached_at(url: str) -> str:
    """The proxy's URL as CMD, on this host, connects to it: one listening on every address as loopback,
    not as ``0.0.0.0``, which is no address to connect to."""
    for wildcard, loopback in _REACHED_AT.items():
        url = url.replace(wildcard, loopback, 1)
    return url


def with_proxy_url(command: Sequence[str], url: str) -> list[str]:
    """CMD's argv with every ``{proxy}`` (a whole argument or inside one, ``--base-url={proxy}/v1``)
    replaced by the proxy's URL, as :func:`reached_at` gives it."""
    return [arg.replace(PROXY_PLACEHOLDER, reached_at(url)) for arg in command]


def not_through_proxy(url: str) -> str:
    """What `run --proxy-upstream` says at once when the command does not name the proxy's URL (``url``,
    where it listens)."""
    here = reached_at(url)
    where = here if here == url else f"{here} (or this host's other addresses, port {url.rsplit(':', 1)[1]})"
    return (
        f"the command does not name {PROXY_PLACEHOLDER}: only requests it sends to the proxy at {where}"
        " (from its own configuration) make windows; one sent to the model server itself is not measured"
    )


def warmup_mismatch(command: Sequence[str], proxy_warmup: int) -> str | None:
    """A warning when CMD is lmx and its warm-up count differs from the proxy's ``--warmup``: the proxy
    would take lmx's warm-up requests for timed ones."""
    if not command or os.path.basename(command[0]) != "lmx":
        return None
    warmup = str(LMX_DEFAULT_WARMUP)
    for i, arg in enumerate(command):
        found = _WARMUP.fullmatch(arg)
        if found:
            warmup = found.group(1) if found.group(1) is not None else "".join(command[i + 1 : i + 2])
    if not warmup.isdigit() or int(warmup) == proxy_warmup:
        return None
    return (
        f"lmx sends {int(warmup)} warm-up request(s) but the proxy's --warmup is {proxy_warmup}:"
        f" give sparkwatch run --warmup {int(warmup)}, or lmx's warm-ups are measured as timed"
    )


class ProxyWindows:
    """The proxy's sink, keeping a copy of each window to check an import against (lmx's status lines, a
    harness file that repeats the proxy's requests: core/repeated_windows.py)."""

    def __init__(self, sink: WindowSink) -> None:
        self.windows: list[Window] = []
        self._sink = sink

    def submit(self, window: Window) -> None:
        self.windows.append(window)
        self._sink.submit(window)


def import_failure(path: Path, exc: Exception, capture: Path | None) -> tuple[str, str]:
    """What a failed import is called and why: the command's own stderr (``capture``, a temporary file gone
    once the run ends) by that name, never the file's."""
    if path != capture:  # the error begins with the file's path or name, which is said already
        return str(path), str(exc).removeprefix(f"{path}: ").removeprefix(f"{path.name}: ")
    why = str(exc).replace(str(path), path.name).removeprefix(f"{path.name}: ")
    if why == "file is empty":  # the capture keeps status lines only: stderr may have said much else
        why = "it held no lmx status line (lmx writes them with --json-status)"
    return "the command's stderr", why  # no file of the user's


def capture_notes(path: Path, *, tokens: bool = True) -> list[str]:
    """What the capture says besides windows (unknown events, lmx's errors and, with ``tokens``, where
    the token counts came from)."""
    try:
        summary = lmx_status.survey(path)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return []  # a Problem or worse: the import (or the check) itself says what is wrong
    payload, why = lmx_status.payload_of(summary, Path.cwd())
    found = lmx_status.notes(summary, payload, why)
    return found if tokens else found[1:]


def check_capture(path: Path, proxy: Sequence[Window]) -> CrossCheck:
    """The capture's windows against the proxy's; a capture that cannot be read fails the check."""
    try:
        status = load_windows("lmx-status", path)
    except ImportFormatError as exc:  # named as the command's stderr: the capture is gone once the run ends
        _, why = import_failure(path, exc, path)
        return CrossCheck(
            False, [f"lmx-status cross-check FAILED: the command's stderr could not be read: {why}"]
        )
    return cross_check(proxy, status)
