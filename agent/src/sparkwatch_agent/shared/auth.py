"""Bearer-token protection for /v1/* and the rules for binding off loopback."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import stat
from pathlib import Path


class AuthConfigError(Exception):
    """Authentication set up in a way the server refuses to run with; one line for the user."""


class TokenFileError(AuthConfigError):
    """A token file that is missing, empty or readable by others."""


def _systemd_credential(path: Path) -> bool:
    """A file systemd delivered with LoadCredential=: it lives in the service's private
    $CREDENTIALS_DIRECTORY, where on tmpfs systemd grants the service user read access by an ACL whose mask
    shows as group-read (0440) — the mode check would refuse a copy nobody else can read."""
    directory = os.environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return False
    try:
        return path.resolve().parent == Path(directory).resolve()
    except OSError:
        return False


def load_token(path: Path) -> str:
    """Read a token file, refusing group/other-readable files (mode must be 0600 or stricter), except a
    systemd credential (see :func:`_systemd_credential`)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from exc
    if stat.S_ISDIR(st.st_mode):  # before the mode: "chmod 600" is no advice for a folder (a pipe is fine)
        raise TokenFileError(f"token file {path} is a folder, not a file")
    # a systemd credential's ACL mask shows as group bits; others' bits are refused everywhere
    excused = stat.S_IRWXG if _systemd_credential(path) else 0
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO) & ~excused:
        raise TokenFileError(
            f"token file {path} is accessible by group or others (mode {stat.S_IMODE(st.st_mode):04o});"
            f" run: chmod 600 {path}"
        )
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc}") from exc
    if len(token) < 16:
        raise TokenFileError(f"token file {path} must hold a token of at least 16 characters")
    if not token.isprintable() or any(c.isspace() for c in token):  # no HTTP client could send it
        raise TokenFileError(f"token file {path} must hold one token on one line, without spaces")
    return token


def bearer_ok(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, the scheme in any case (RFC 9110 §11.1: it is case-insensitive)."""
    if not header or header[: len("Bearer ")].lower() != "bearer ":
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_said(host: str, token: str | None) -> tuple[int, str]:
    """Who may use the API, for a server's "listening on" line, and that line's log level: an operator
    reading the log sees an open API for what it is, at once (one served to the network with
    --insecure-no-auth as a warning)."""
    if token is not None:
        return logging.INFO, "API: bearer token required"
    if is_loopback(host):
        return logging.INFO, "API: open to every local user, no --token-file"
    return logging.WARNING, "API: OPEN TO THE NETWORK, no token (--insecure-no-auth)"


def token_for_bind(host: str, token_file: Path | None, insecure_no_auth: bool) -> str | None:
    """The token a server listening on ``host`` requires (``None``: none), loaded from ``token_file``; a
    bind off loopback without one is refused unless ``insecure_no_auth`` says so explicitly."""
    token = load_token(token_file) if token_file else None
    if token is None and not is_loopback(host) and not insecure_no_auth:
        raise AuthConfigError(
            f"refusing to listen on {host} without a token: pass --token-file FILE"
            " (or --insecure-no-auth to serve the API to the network unauthenticated)"
        )
    return token
