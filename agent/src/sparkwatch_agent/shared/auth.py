"""Bearer-token protection for /v1/* and the rules for binding off loopback."""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from sparkwatch_agent.shared.user_files import read_file_text

log = logging.getLogger(__name__)


class AuthConfigError(Exception):
    """Authentication set up in a way the server refuses to run with; one line for the user."""


class TokenFileError(AuthConfigError):
    """A token file that is missing, empty or readable by others."""


class TokenFile:
    """The token a server requires, read again when its file changes, so a rotated token is in force at
    the next request without a restart (as Prometheus reads its credentials files). Each request costs one
    ``stat``; a change is any of the file's inode, contents or attributes (ctime: a ``chown`` or ``chmod``
    that fixes a refused file counts). A changed file that is not a valid token (too short, a mode others
    can read, unreadable, gone) keeps the last token read, said once in the log until it changes again.
    Only a regular file is read: a pipe (``--token-file <(pass show agent)``) holds its token once, and a
    path that becomes one later would block the server in ``open``. A connection already let in is the
    server's to end when the token changes (:class:`Admission`)."""

    def __init__(self, path: Path, token: str | None = None, *, logger: logging.Logger = log) -> None:
        """``token``: the one already read from ``path`` (a pipe cannot be read twice); else read now.
        ``logger``: the service whose token it is, as its reloads are logged (this module's name said the
        agent's for the coordinator's too)."""
        self.path = path
        self._log = logger
        self._seen = self._version()  # before the read: a change while it reads is read again
        self._token = load_token(path) if token is None else token  # a bad file at start: refused
        self._again = self._seen is not None and self._seen[0]  # a regular file at start

    def _version(self) -> tuple[bool, int, int, int, int, int] | None:
        """Whether the path is a regular file, and what changes when it is replaced, rewritten or has its
        owner or mode changed (None: it cannot be stat'ed now)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return stat.S_ISREG(st.st_mode), st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns, st.st_size

    def current(self) -> str:
        if not self._again:
            return self._token
        version = self._version()
        if version == self._seen:
            return self._token
        self._seen = version
        try:
            if version is not None and not version[0]:
                raise TokenFileError(f"token file {self.path} is no longer a regular file")
            self._token = load_token(self.path)
        except TokenFileError as exc:
            self._log.error("%s; the token read before stays in force", exc)
        else:
            self._log.info("token file %s read again: its token is in force from now", self.path)
        return self._token


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


def loose_mode(path: Path, mode: int) -> int | None:
    """The permission bits of a secret file (``mode``: its st_mode) that group or others may use, or None
    where only its owner may (a systemd credential's group bits excused: :func:`_systemd_credential`)."""
    excused = stat.S_IRWXG if _systemd_credential(path) else 0
    return stat.S_IMODE(mode) if mode & (stat.S_IRWXG | stat.S_IRWXO) & ~excused else None


def load_token(path: Path) -> str:
    """Read a token file, refusing group/other-readable files (mode must be 0600 or stricter), except a
    systemd credential (see :func:`_systemd_credential`)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from exc
    # before the mode: "chmod 600" is no advice for a folder or /dev/null (a pipe is fine: <(pass show x))
    if stat.S_ISDIR(st.st_mode):
        raise TokenFileError(f"token file {path} is a folder, not a file")
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        raise TokenFileError(f"token file {path} is a device or socket, not a file")
    # a systemd credential's ACL mask shows as group bits; others' bits are refused everywhere
    if (loose := loose_mode(path, st.st_mode)) is not None:
        raise TokenFileError(
            f"token file {path} is accessible by group or others (mode {loose:04o}); run: chmod 600 {path}"
        )
    try:
        token = read_file_text(path).strip()
    except OSError as exc:  # its words only: the path is said once
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc}") from exc
    if token.startswith("\ufeff"):  # not a space, yet not printable: "without spaces" said the wrong thing
        raise TokenFileError(
            f"token file {path} starts with a byte order mark (an editor's): save it without"
        )
    if len(token) < 16:
        raise TokenFileError(f"token file {path} must hold a token of at least 16 characters")
    if not token.isprintable() or any(c.isspace() for c in token):  # no HTTP client could send it
        raise TokenFileError(f"token file {path} must hold one token on one line, without spaces")
    return token


def bearer_ok(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, the scheme in any case (RFC 9110 §11.1: it is case-insensitive).
    A header of bytes that are not UTF-8 (aiohttp hands them over surrogate-escaped) is no token: a 401,
    not the 500 its ``encode`` would raise."""
    presented = bearer_token(header)
    try:
        return presented is not None and hmac.compare_digest(presented.encode(), token.encode())
    except UnicodeEncodeError:
        return False


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, the scheme in any case (None: no such header)."""
    if not header or header[: len("Bearer ")].lower() != "bearer ":
        return None
    return header[len("Bearer ") :].strip()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def access_said(host: str, token: ServerToken | None) -> tuple[int, str]:
    """Who may use the API, for a server's "listening on" line, and that line's log level: an operator
    reading the log sees an open API for what it is, at once (one served to the network with
    --insecure-no-auth as a warning)."""
    if token is not None:
        return logging.INFO, "API: bearer token required"
    if is_loopback(host):
        return logging.INFO, "API: open to every local user, no --token-file"
    return logging.WARNING, "API: OPEN TO THE NETWORK, no token (--insecure-no-auth)"


#: What a server checks a bearer token against: a fixed one (tests, the embedded coordinator) or a file's.
ServerToken = str | TokenFile


def expected_token(token: ServerToken) -> str:
    """The token in force now."""
    return token if isinstance(token, str) else token.current()


class Admission:
    """The token a long-lived connection was let in with, compared with the one in force at most once per
    ``every_s`` (a ``stat`` each time): a rotated token ends what the old one opened, a leaked one's
    stream included, rather than leaving it open until a restart."""

    def __init__(
        self,
        token: ServerToken | None,
        now_s: Callable[[], float],
        every_s: float = 1.0,
        presented: str | None = None,
    ) -> None:
        """``presented``: the request's ``Authorization`` header, which the server checked against the token
        in force then (a token read now could already be the next one: the stream would never end)."""
        self._token = token
        self._admitted = None if token is None else bearer_token(presented) or expected_token(token)
        self._now_s = now_s
        self._every_s = every_s
        self._next_s = now_s() + every_s

    def revoked(self) -> bool:
        """Whether the token in force is no longer the one this connection was let in with."""
        if self._token is None or self._now_s() < self._next_s:
            return False
        self._next_s = self._now_s() + self._every_s
        return expected_token(self._token) != self._admitted


def bearer_headers(token: ServerToken | None) -> dict[str, str]:
    """A client's ``Authorization`` header for the token in force now (none without a token)."""
    return {"Authorization": f"Bearer {expected_token(token)}"} if token is not None else {}


def token_for_bind(
    host: str, token_file: Path | None, insecure_no_auth: bool, logger: logging.Logger = log
) -> TokenFile | None:
    """The token a server listening on ``host`` requires (``None``: none), from ``token_file`` (read again
    when it changes, said in ``logger``); a bind off loopback without one is refused unless
    ``insecure_no_auth`` says so."""
    token = TokenFile(token_file, logger=logger) if token_file else None
    if token is None and not is_loopback(host) and not insecure_no_auth:
        raise AuthConfigError(
            f"refusing to listen on {host} without a token: pass --token-file FILE"
            " (or --insecure-no-auth to serve the API to the network unauthenticated)"
        )
    return token
