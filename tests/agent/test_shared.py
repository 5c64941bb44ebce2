"""sparkwatch_agent.shared: the stop policy, binding, and the token rule both distributions use."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import signal
import threading

import pytest
from aiohttp import web
from multidict import CIMultiDict

from sparkwatch_agent.shared.auth import (
    Admission,
    AuthConfigError,
    TokenFile,
    TokenFileError,
    access_said,
    bearer_ok,
    load_token,
    token_for_bind,
)
from sparkwatch_agent.shared.backoff import ExponentialBackoff
from sparkwatch_agent.shared.http import BindError, other_service, start_site
from sparkwatch_agent.shared.lifecycle import FORCED_EXIT_CODE, StopPolicy, stop_on_signals


def test_stop_policy_first_request_is_graceful_second_exits_now() -> None:
    first: list[str] = []
    exits: list[int] = []
    policy = StopPolicy(first.append, exit_now=exits.append)
    policy.request("SIGTERM")
    assert first == ["SIGTERM"] and exits == [] and policy.requested
    policy.request("SIGINT")
    assert first == ["SIGTERM"] and exits == [FORCED_EXIT_CODE]


async def test_stop_on_signals_sets_the_event_on_the_first_signal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    stop = stop_on_signals((signal.SIGUSR1,), logger=logging.getLogger("sparkwatch.coordinator.serve"))
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        async with asyncio.timeout(5):
            await stop.wait()
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
    stops = [r for r in caplog.records if r.getMessage() == "SIGUSR1: stopping"]
    assert [r.name for r in stops] == ["sparkwatch.coordinator.serve"]


async def test_start_site_binds_or_fails_with_one_line_and_cleans_up() -> None:
    first = web.AppRunner(web.Application())
    url = await start_site(first, "127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1])
    second = web.AppRunner(web.Application())
    try:
        with pytest.raises(BindError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: "):
            await start_site(second, "127.0.0.1", port)
        assert second.server is None  # cleaned up: nothing half-started is left behind
    finally:
        await first.cleanup()


@pytest.mark.parametrize(
    "text", ["abcdefghijklmnop\nsecondline\n", "abcdefgh ijklmnopq\n", "abcdefghijklmnop\x00q"]
)
def test_a_token_file_of_more_than_one_token_is_refused(tmp_path: pathlib.Path, text: str) -> None:
    """No HTTP client can send a token with a newline, space or control character in it: the server
    started with it, and every client then failed with a misleading "the answer is not JSON"."""
    token_file = tmp_path / "token"
    token_file.write_text(text)
    token_file.chmod(0o600)
    with pytest.raises(TokenFileError, match="must hold one token on one line, without spaces"):
        load_token(token_file)


def test_a_token_file_with_a_byte_order_mark_says_so(tmp_path: pathlib.Path) -> None:
    """It was refused as "without spaces", which it had none of."""
    token_file = tmp_path / "token"
    token_file.write_bytes(b"\xef\xbb\xbf" + b"a" * 32 + b"\n")
    token_file.chmod(0o600)
    with pytest.raises(TokenFileError, match="starts with a byte order mark"):
        load_token(token_file)


def test_the_bearer_scheme_is_case_insensitive() -> None:
    """RFC 9110 §11.1: `bearer <token>` is the same as `Bearer <token>` (it got a 401 that asked for the
    second); the token itself is compared exactly."""
    token = "a-token-of-enough-length"
    assert bearer_ok(f"Bearer {token}", token) and bearer_ok(f"bearer {token}", token)
    assert bearer_ok(f"BEARER {token}", token)
    assert not bearer_ok(f"Bearer {token.upper()}", token) and not bearer_ok(f"Basic {token}", token)
    assert not bearer_ok(None, token) and not bearer_ok("Bearer", token)
    assert not bearer_ok("Bearer \udcff\udcfe", token)  # bytes not UTF-8, as aiohttp hands them over


def test_token_for_bind(tmp_path: pathlib.Path) -> None:
    assert token_for_bind("127.0.0.1", None, insecure_no_auth=False) is None
    assert token_for_bind("::1", None, insecure_no_auth=False) is None
    with pytest.raises(AuthConfigError, match=r"refusing to listen on 0\.0\.0\.0 without a token"):
        token_for_bind("0.0.0.0", None, insecure_no_auth=False)
    assert token_for_bind("0.0.0.0", None, insecure_no_auth=True) is None
    token_file = tmp_path / "token"
    token_file.write_text("a-token-of-enough-length\n")
    token_file.chmod(0o600)
    bound = token_for_bind("0.0.0.0", token_file, insecure_no_auth=False)
    assert bound is not None and bound.current() == "a-token-of-enough-length"
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o1777)
    with pytest.raises(TokenFileError, match=rf"^token file {folder} is a folder, not a file$"):
        token_for_bind("0.0.0.0", folder, insecure_no_auth=False)  # not "run: chmod 600" on a folder
    with pytest.raises(TokenFileError, match=r"^token file /dev/null is a device or socket, not a file$"):
        token_for_bind("0.0.0.0", pathlib.Path("/dev/null"), insecure_no_auth=False)  # nor on /dev/null
    read, write = os.pipe()  # --token-file <(pass show agent): a pipe of mode 0600 still works
    os.write(write, b"a-token-from-a-pipe-0123\n")
    os.close(write)
    try:
        piped = token_for_bind("0.0.0.0", pathlib.Path(f"/proc/self/fd/{read}"), False)
        assert piped is not None and piped.current() == "a-token-from-a-pipe-0123"
    finally:
        os.close(read)


def test_a_connection_let_in_with_a_token_is_revoked_once_another_is_in_force(tmp_path: pathlib.Path) -> None:
    """A stream let in with the old token stayed open after a rotation (a leaked token's too): it is
    revoked once the file holds another, looked at once a second; a bad file keeps the token, so not."""
    path = tmp_path / "token"
    path.write_text("first-token-0123456789\n")
    path.chmod(0o600)
    token, now_s = TokenFile(path), [0.0]
    admission = Admission(token, lambda: now_s[0])
    staged = tmp_path / "token.new"
    staged.write_text("second-token-0123456789\n")
    staged.chmod(0o600)
    staged.replace(path)
    now_s[0] = 0.9
    assert not admission.revoked()  # not looked at yet
    now_s[0] = 1.0
    assert admission.revoked()
    later = Admission(token, lambda: now_s[0])  # let in with the second
    path.chmod(0o644)  # refused: the second stays in force
    now_s[0] = 5.0
    assert not later.revoked()
    for fixed in (None, "a-token-given-as-text-0123"):  # no token, or one that cannot change
        assert not Admission(fixed, lambda: now_s[0], every_s=0.0).revoked()
    # let in with the first, the file rotated before the stream's admission was made: the token presented
    # counts, not the one read then (it would be the new one, and the stream never revoked)
    raced = Admission(token, lambda: now_s[0], every_s=0.0, presented="bearer first-token-0123456789")
    assert raced.revoked()
    assert not Admission(
        token, lambda: now_s[0], every_s=0.0, presented="Bearer second-token-0123456789"
    ).revoked()


def test_a_token_files_reloads_are_said_by_the_service_it_belongs_to(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The coordinator's reloads were logged as ``sparkwatch_agent.shared.auth``: an agent's name."""
    caplog.set_level(logging.INFO)
    path = tmp_path / "token"
    path.write_text("first-token-0123456789\n")
    path.chmod(0o600)
    token = token_for_bind("127.0.0.1", path, False, logging.getLogger("sparkwatch.coordinator.serve"))
    assert token is not None
    path.write_text("second-token-0123456789\n")
    assert token.current() == "second-token-0123456789"
    path.chmod(0o644)
    assert token.current() == "second-token-0123456789"
    said = [(r.name, r.levelname) for r in caplog.records if "token file" in r.getMessage()]
    assert said == [("sparkwatch.coordinator.serve", "INFO"), ("sparkwatch.coordinator.serve", "ERROR")]


def test_a_token_file_is_read_again_on_any_change_and_never_opened_once_not_a_file(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused file fixed by chmod or chown changes only its ctime; a path replaced by a FIFO would
    block the server in open() until a writer came: it keeps the token in force instead."""
    caplog.set_level(logging.INFO, logger="sparkwatch_agent.shared.auth")
    path = tmp_path / "token"
    path.write_text("first-token-0123456789\n")
    path.chmod(0o600)
    token = TokenFile(path)
    path.chmod(0o640)  # a mistake: refused, the token stays
    assert token.current() == "first-token-0123456789"
    assert f"token file {path} is accessible by group or others (mode 0640)" in caplog.text
    path.chmod(0o600)  # fixed: the contents and mtime did not change
    os.chown(path, os.getuid(), os.getgid())  # an owner set (here to the same one): read again too
    assert token.current() == "first-token-0123456789"
    assert caplog.text.count("read again: its token is in force from now") == 1
    os.chown(path, os.getuid(), os.getgid())
    assert token.current() == "first-token-0123456789"
    assert caplog.text.count("read again: its token is in force from now") == 2
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    fifo.replace(path)
    asked = threading.Thread(target=token.current, daemon=True)
    asked.start()
    asked.join(5.0)
    blocked = asked.is_alive()
    if blocked:  # let the blocked open() go before failing
        os.close(os.open(path, os.O_RDWR))
    assert not blocked, "current() opened the FIFO and blocked"
    assert token.current() == "first-token-0123456789"
    assert f"token file {path} is no longer a regular file; the token read before stays" in caplog.text


def test_the_listening_line_says_who_may_use_the_api() -> None:
    """An open API is said as one, and one open to the network as a warning (--insecure-no-auth)."""
    assert access_said("0.0.0.0", "a-token") == (logging.INFO, "API: bearer token required")
    assert access_said("127.0.0.1", None) == (
        logging.INFO,
        "API: open to every local user, no --token-file",
    )
    assert access_said("0.0.0.0", None) == (
        logging.WARNING,
        "API: OPEN TO THE NETWORK, no token (--insecure-no-auth)",
    )


def test_another_sparkwatch_service_is_known_by_its_server_header() -> None:
    """Only a name of ours other than the one expected: a version, a proxy's list, another product or an
    older server's aiohttp default say nothing."""

    def seen(*values: str) -> str | None:
        return other_service(CIMultiDict(("Server", v) for v in values), "sparkwatch-agent")

    assert seen("sparkwatch-coordinator") == "sparkwatch-coordinator"
    assert seen("sparkwatch-coordinator/0.2, Caddy") == "sparkwatch-coordinator"
    assert seen("Caddy", "sparkwatch-sim-model") == "sparkwatch-sim-model"
    assert seen("sparkwatch-agent/0.2") is None and seen("sparkwatch-agent, sparkwatch-coordinator") is None
    assert (
        seen("Python/3.11 aiohttp/3.9.5") is None and seen("sparkwatch-exporter") is None and seen() is None
    )
    assert other_service({"Server": "sparkwatch-agent"}, "sparkwatch-coordinator") == "sparkwatch-agent"
    # an answer sparkwatch's proxy relayed: the proxy is what was reached, not the server behind it
    relayed = CIMultiDict([("Server", "sparkwatch-sim-model"), ("Via", "1.0 edge, 1.1 sparkwatch-proxy")])
    assert other_service(relayed, "sparkwatch-coordinator") == "sparkwatch-proxy"
    assert other_service(CIMultiDict(Via="1.1 sparkwatch-proxy"), "sparkwatch-agent") == "sparkwatch-proxy"
    assert other_service(CIMultiDict(Via="sparkwatch-proxy"), "sparkwatch-agent") is None  # not a Via entry


def test_backoff_jitter_spreads_retries_that_failed_together() -> None:
    draws = iter([0.0, 0.999, 0.5, 0.25])
    backoff = ExponentialBackoff(1.0, 2.0, 4.0, jitter=0.5, rand=lambda: next(draws))
    delays = [backoff.next_delay_s() for _ in range(4)]
    assert delays == pytest.approx([1.0, 2.0 * (1 - 0.4995), 4.0 * 0.75, 4.0 * 0.875])
    backoff.reset()
    assert ExponentialBackoff(jitter=0.0).next_delay_s() == 1.0
    # two links with their own generators do not redial in step
    a, b = ExponentialBackoff(jitter=0.5), ExponentialBackoff(jitter=0.5)
    assert [a.next_delay_s() for _ in range(5)] != [b.next_delay_s() for _ in range(5)]
    with pytest.raises(ValueError, match="jitter"):
        ExponentialBackoff(jitter=1.0)
