"""Where the coordinator remote-writes to and how it proves who it is: the receiver's URL and, optionally,
a bearer token file or basic auth (user and password file), read from their files at every request so a
rotated secret is picked up. Secrets never appear in a message; TLS is verified (the system's CAs, or
``SSL_CERT_FILE``)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from sparkwatch.meters.credentials import SecretFileError, first_line


class RemoteWriteError(Exception):
    """A remote-write setting that cannot be used (a missing secret file, two kinds of auth)."""


@dataclass(frozen=True, slots=True)
class RemoteWriteSpec:
    url: str  # the receiver's write endpoint, e.g. http://prom:9090/api/v1/write
    bearer_token_file: Path | None = None
    basic_auth_user: str | None = None
    basic_auth_password_file: Path | None = None

    def check(self) -> None:
        """Refuse at start what would fail every request: two kinds of auth, a password without a user, a
        secret file that cannot be read."""
        if self.bearer_token_file is not None and self.basic_auth_user is not None:
            raise RemoteWriteError("--remote-write: give a bearer token file or basic auth, not both")
        if self.basic_auth_password_file is not None and self.basic_auth_user is None:
            raise RemoteWriteError(
                "--remote-write-basic-auth-password-file needs --remote-write-basic-auth-user"
            )
        self.authorization()

    def authorization(self) -> str | None:
        """The Authorization header, read from its files now; None without auth."""
        try:
            if self.bearer_token_file is not None:
                token = first_line(self.bearer_token_file, "the remote-write bearer token", in_header=True)
                return f"Bearer {token}"
            if self.basic_auth_user is not None:
                password = (
                    first_line(self.basic_auth_password_file, "the remote-write password")
                    if self.basic_auth_password_file is not None
                    else ""
                )
                pair = base64.b64encode(f"{self.basic_auth_user}:{password}".encode()).decode()
                return f"Basic {pair}"
        except SecretFileError as exc:
            raise RemoteWriteError(str(exc)) from None
        return None
