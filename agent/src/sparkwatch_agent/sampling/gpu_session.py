"""The GPU session: open the backend, capture through it, and on a device-level failure close it and
retry with backoff. Its state is one immutable value (``GpuSession``) that every capture carries, so a
snapshot never mixes a sample with a GPU state from the middle of a later capture."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from sparkwatch_agent.hardware.gpu_backend import GpuBackend
from sparkwatch_agent.hardware.readings import DeviceError, GpuInventory, GpuReading, MemoryModel
from sparkwatch_agent.shared.backoff import ExponentialBackoff

log = logging.getLogger(__name__)


class GpuSession(NamedTuple):
    """Replaced whole by the sampler thread when the GPU opens or fails."""

    ok: bool
    reason: str | None  # why not ok
    inventory: GpuInventory | None
    memory_model: MemoryModel
    inventory_rev: int
    inventory_seq: int  # seq of the first sample taken with this inventory


class GpuKeeper:
    """Owns one GPU backend (or none) on the sampler thread: opens it when due, captures, fails over."""

    def __init__(self, gpu: GpuBackend | None, backoff: ExponentialBackoff) -> None:
        self._gpu = gpu
        self._backoff = backoff
        self._open = False
        self._retry_ns = 0
        self._attempts = 0
        self.session = GpuSession(
            ok=False,
            reason="not opened yet" if gpu is not None else "no GPU backend",
            inventory=None,
            memory_model="unknown" if gpu is not None else "none",
            inventory_rev=0,
            inventory_seq=1,
        )

    @property
    def backend_name(self) -> str:
        return self._gpu.name if self._gpu is not None else "none"

    @property
    def present(self) -> bool:
        return self._gpu is not None

    @property
    def reinit_total(self) -> int:
        """Attempts to open the backend after the first one."""
        return max(0, self._attempts - 1)

    def due(self, now_ns: int) -> bool:
        """Whether the backend is closed and its (re)open time has come."""
        return self._gpu is not None and not self._open and now_ns >= self._retry_ns

    def open_if_due(
        self, now_ns: int, seq: int, host_total: Callable[[], int | None], retries: bool = True
    ) -> None:
        """Open the backend for sample ``seq`` when ``due``; ``host_total`` (MemTotal) decides the memory
        model. Apart from ``capture``, so the sample's stamp is taken after an open's slow calls.
        ``retries`` False: a one-shot capture (the probe) whose failure is logged without promising a retry
        that nothing will make."""
        if self.due(now_ns):
            self._open_now(now_ns, seq, host_total, retries)

    def capture(self, now_ns: int, retries: bool = True) -> Any:
        """The backend's capture (``None`` without an open GPU); a device-level failure closes it."""
        if self._gpu is None or not self._open:
            return None
        try:
            return self._gpu.capture()
        except DeviceError as exc:
            self._failed(exc, now_ns, "read", retries)
            return None

    def decode(self, captured: Any) -> tuple[GpuReading, ...]:
        return self._gpu.decode(captured) if captured is not None and self._gpu is not None else ()

    def close(self) -> None:
        if self._gpu is not None and self._open:
            self._gpu.close()
            self._open = False

    def _open_now(self, now_ns: int, seq: int, host_total: Callable[[], int | None], retries: bool) -> None:
        assert self._gpu is not None
        self._attempts += 1
        try:
            inventory, model = self._gpu.open(host_total())
        except DeviceError as exc:
            self._failed(exc, now_ns, "open", retries)
            return
        self._open = True
        self.session = GpuSession(
            ok=True,
            reason=None,
            inventory=inventory,
            memory_model=model,
            inventory_rev=self.session.inventory_rev + 1,
            inventory_seq=seq,
        )
        self._backoff.reset()
        log.info(
            "GPU backend %s open: %d GPU(s), memory model %s", self._gpu.name, len(inventory.gpus), model
        )

    def _failed(self, exc: DeviceError, now_ns: int, stage: str, retries: bool) -> None:
        assert self._gpu is not None
        first_failure = self._open or self._attempts <= 1
        self._open = False
        self._gpu.close()
        self.session = self.session._replace(ok=False, reason=str(exc))
        delay_s = self._backoff.next_delay_s()
        self._retry_ns = now_ns + int(delay_s * 1e9)
        level = logging.WARNING if first_failure else logging.DEBUG
        if retries:
            log.log(level, "GPU %s failed (%s); retrying in %.1f s", stage, exc, delay_s)
        else:
            log.log(level, "GPU %s failed (%s)", stage, exc)
