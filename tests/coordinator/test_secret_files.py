"""Secret files (meters', the engine's, remote write's, `export --prometheus`'s): the first line is the
secret, and one no HTTP client can send is said where the file is read, naming it. A byte order mark went
inside the Authorization header (remote write) or failed as "cannot reach" (an engine that was up)."""

from __future__ import annotations

import pathlib

import pytest

from sparkwatch.coordinator.remote_write.spec import RemoteWriteError, RemoteWriteSpec
from sparkwatch.meters.credentials import SecretFileError, first_line
from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.client import Auth


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("\ufeffs3cret\n", "starts with a byte order mark (an editor's): save it without"),
        ("\ns3cret\n", "has an empty first line: the secret is the first line"),
        ("  \n", "is empty"),
        ("\u200bs3cret\n", "holds a character that is not printable"),
        ("s3c\x07ret\n", "holds a character that is not printable"),
    ],
)
def test_a_secret_no_http_client_can_send_is_refused_naming_the_file(
    tmp_path: pathlib.Path, text: str, said: str
) -> None:
    path = tmp_path / "secret"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SecretFileError) as refused:
        first_line(path, "the token")
    assert str(refused.value) == f"the token file {path} {said}"


def test_a_bearer_token_is_visible_ascii_and_a_password_may_be_any_text(tmp_path: pathlib.Path) -> None:
    """A bearer token goes into its header as it is (aiohttp sends UTF-8 and urllib Latin-1: other bytes for
    the same token); a password is encoded first."""
    path = tmp_path / "secret"
    path.write_text("pässwörd€\r\nsecond line\n", encoding="utf-8")
    assert first_line(path, "the password") == "pässwörd€"
    with pytest.raises(SecretFileError, match=r"holds a character a bearer token has not \(visible ASCII\)$"):
        first_line(path, "the token", in_header=True)


def test_the_engines_and_remote_writes_bearer_token_with_a_bom_is_one_line(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "tok_bom"
    token.write_bytes(b"\xef\xbb\xbfs3cret\n")
    with pytest.raises(SourceError, match=r"the bearer token file .* starts with a byte order mark"):
        Auth(bearer_token_file=token).header()
    with pytest.raises(
        RemoteWriteError, match=r"the remote-write bearer token file .* starts with a byte order"
    ):
        RemoteWriteSpec("http://127.0.0.1:9/api/v1/write", bearer_token_file=token).authorization()
