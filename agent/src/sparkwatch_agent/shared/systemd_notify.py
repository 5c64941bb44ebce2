"""sd_notify without libsystemd: READY=1, WATCHDOG=1 (rate-limited), STOPPING=1, STATUS=…."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class SystemdNotifier:
    """Sends datagrams to ``$NOTIFY_SOCKET`` when systemd set it; a no-op otherwise.

    WATCHDOG=1 is sent at most every half of ``$WATCHDOG_USEC`` (or once a second without it), so a
    100 Hz sampler does not flood the manager, yet a stuck sampler is noticed.
    """

    def __init__(
        self, environ: Mapping[str, str] | None = None, mono_s: Callable[[], float] = time.monotonic
    ) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self._address: str | None = None
        if address:
            self._address = "\0" + address[1:] if address.startswith("@") else address
        watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_every_s = int(watchdog_usec) / 2e6 if watchdog_usec.isdigit() else 1.0
        self._mono = mono_s
        self._last_watchdog = float("-inf")
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        """Whether systemd listens (``$NOTIFY_SOCKET`` set); without it every method is a no-op."""
        return self._address is not None

    @property
    def watchdog_every_s(self) -> float:
        """How often WATCHDOG=1 should go out: half of systemd's WatchdogSec (1 s without one)."""
        return self._watchdog_every_s

    def send(self, message: str) -> None:
        if self._address is None:
            return
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(message.encode(), self._address)
        except OSError as exc:
            log.warning("sd_notify to %s failed: %s", self._address.lstrip("\0"), exc)

    def ready(self, status: str) -> None:
        self.send(f"READY=1\nSTATUS={status}")

    def watchdog(self) -> None:
        now = self._mono()
        if self._address is not None and now - self._last_watchdog >= self._watchdog_every_s:
            self._last_watchdog = now
            self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
