"""Secrets for meters and the engine scraper, read from files only (never from nodes.toml itself, never
logged or exported)."""

from __future__ import annotations

from pathlib import Path

from sparkwatch.meters.readings import MeterError
from sparkwatch_agent.shared.user_files import read_file_text


class SecretFileError(Exception):
    """A secret file that cannot be used; the message names the file, never its contents."""


def first_line(path: Path, what: str, *, in_header: bool = False) -> str:
    """The file's first line, stripped: ``what`` says whose secret it is in the error. ``in_header``: it goes
    into a header as it is (a bearer token: visible ASCII, RFC 6750's token68 and its like; a password is
    encoded first: Basic auth's base64 of UTF-8, a Redfish login's JSON, a digest's hash)."""
    try:
        text = read_file_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileError(
            f"cannot read {what} file {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    if text.startswith("\ufeff"):  # an editor's: it went inside the header, or failed as "cannot reach"
        raise SecretFileError(
            f"{what} file {path} starts with a byte order mark (an editor's): save it without"
        )
    if not text.strip():
        raise SecretFileError(f"{what} file {path} is empty")
    secret = text.splitlines()[0].strip()
    if not secret:
        raise SecretFileError(f"{what} file {path} has an empty first line: the secret is the first line")
    if not secret.isprintable():  # a control or format character (a zero-width space): a copy's accident
        raise SecretFileError(f"{what} file {path} holds a character that is not printable")
    if in_header and not all("!" <= c <= "~" for c in secret):  # aiohttp sends UTF-8, urllib Latin-1
        raise SecretFileError(f"{what} file {path} holds a character a bearer token has not (visible ASCII)")
    return secret


def read_secret(path: Path, *, in_header: bool = False) -> str:
    """A meter's secret (``in_header``: a bearer token, see :func:`first_line`); a MeterError when it cannot
    be used."""
    try:
        return first_line(path, "the meter's secret", in_header=in_header)
    except SecretFileError as exc:
        raise MeterError(str(exc)) from None
