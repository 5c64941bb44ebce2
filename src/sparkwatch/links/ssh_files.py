"""The files an SSH node reads: the known_hosts its host key is checked against, and its client keys.

asyncssh reads them at each connection: one it could not use was a link that retried for ever with the
file's error (or, for a known_hosts line it cannot parse, "Invalid known hosts entry" naming no file), so
nodes.toml's reader checks them first. The known_hosts file is always named to asyncssh: left out, asyncssh
takes ``~/.ssh/config``'s ``UserKnownHostsFile``, and ``UserKnownHostsFile none`` there turned the check
off without a word, where only ``insecure_skip_host_key_check`` may, loudly.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkwatch_agent.shared.auth import loose_mode

#: What the docs and the reasons call the file checked when nodes.toml names none.
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def known_hosts_path(known_hosts: Path | None) -> Path | None:
    """The file a node's host key is checked against: nodes.toml's, else ``~/.ssh/known_hosts``; None
    where there is no home to find that in (HOME unset, a user without one)."""
    if known_hosts is not None:
        return known_hosts
    try:
        return Path(DEFAULT_KNOWN_HOSTS).expanduser()
    except RuntimeError:
        return None


def known_hosts_option(known_hosts: Path | None) -> str | bytes:
    """asyncssh's ``known_hosts`` for a node whose key is checked: the file, or where the default one is
    missing no entry at all (every key untrusted: the link's reason then says the file does not exist)."""
    path = known_hosts_path(known_hosts)
    return str(path) if path is not None and (known_hosts is not None or _exists(path)) else b""


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a home in a folder we may not enter (Python 3.11 raises): none to read
        return False


def ssh_file_problem(
    known_hosts: Path | None, client_keys: tuple[Path, ...], skip_host_key_check: bool
) -> tuple[str, str] | None:
    """The nodes.toml key and the reason, for the first of a node's SSH files that cannot be used as it is;
    None when all can. A default ``~/.ssh/known_hosts`` that is missing is left to the link to say."""
    if not skip_host_key_check:  # else never read
        path = known_hosts_path(known_hosts)
        if path is None:
            return "known_hosts", f"no home directory to find {DEFAULT_KNOWN_HOSTS} in: set known_hosts"
        if known_hosts is not None or _exists(path):
            why = _unreadable(path) or _unusable_known_hosts(path)
            if why is not None and known_hosts is None:
                why += f" (the default {DEFAULT_KNOWN_HOSTS})"
            if why is not None:
                return "known_hosts", why
    for key in client_keys:
        if (why := _unreadable(key)) is not None:
            return "client_keys", why
    for key in client_keys:  # no passphrase can be given: a key SSH cannot use as it is, said now
        if (why := _unusable_key(key)) is not None:
            return "client_keys", f"{key} is not a private key SSH can use: {why}"
        if (loose := _loose(key)) is not None:  # OpenSSH refuses such a key; asyncssh took it
            said = f"{key} is readable by group or others (mode {loose:04o}); run: chmod 600 {key}"
            return "client_keys", said
    return None


def _loose(path: Path) -> int | None:
    """As OpenSSH judges a key: only one of our own user's (a root-owned key the service reads by its
    group, 0640, is used by ssh too)."""
    try:
        st = path.stat()
    except OSError:  # read a moment ago: gone since, which the link will say
        return None
    return loose_mode(path, st.st_mode) if st.st_uid == os.geteuid() else None


def _unreadable(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return None


def _unusable_known_hosts(path: Path) -> str | None:
    """Why asyncssh cannot read ``path`` as a known_hosts file (a line it cannot parse), or None."""
    from sparkwatch.links.asyncssh_quiet import asyncssh  # noqa: PLC0415 — only where an SSH node is named

    try:
        asyncssh.read_known_hosts(str(path))
    except (ValueError, OSError, asyncssh.Error) as exc:
        return f"{path} is not a known_hosts file SSH can read: {' '.join(str(exc).split())}"
    return None


def _unusable_key(path: Path) -> str | None:
    """Why asyncssh cannot load ``path`` as a private key without a passphrase, or None when it can."""
    from sparkwatch.links.asyncssh_quiet import asyncssh  # noqa: PLC0415 — only where client keys are named

    try:
        asyncssh.read_private_key(path)
    except (asyncssh.KeyImportError, ValueError, OSError) as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None
