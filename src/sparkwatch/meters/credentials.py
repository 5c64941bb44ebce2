"""Secrets for meters and the engine scraper, read from files only (never from nodes.toml itself, never
logged or exported)."""

from __future__ import annotations

from pathlib import Path

from sparkwatch.meters.readings import MeterError


class SecretFileError(Exception):
    """A secret file that cannot be used; the message names the file, never its contents."""


def first_line(path: Path, what: str) -> str:
    """The file's first line, stripped: ``what`` says whose secret it is in the error."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileError(
            f"cannot read {what} file {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    secret = text.splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise SecretFileError(f"{what} file {path} is empty")
    return secret


def read_secret(path: Path) -> str:
    """A meter's secret; a MeterError when it cannot be used."""
    try:
        return first_line(path, "the meter's secret")
    except SecretFileError as exc:
        raise MeterError(str(exc)) from None
