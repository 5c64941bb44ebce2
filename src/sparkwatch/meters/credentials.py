"""Secrets for meters, read from files only (never from nodes.toml itself, never logged or exported)."""

from __future__ import annotations

from pathlib import Path

from sparkwatch.meters.poller import MeterError


def read_secret(path: Path) -> str:
    """The file's first line; a MeterError (naming the file, not its contents) when it cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MeterError(
            f"cannot read the meter's secret file {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    secret = text.splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise MeterError(f"the meter's secret file {path} is empty")
    return secret
