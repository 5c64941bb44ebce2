"""An engine behind basic auth (a real VictoriaMetrics with -httpAuth.*): `export --prometheus` reads it with
the credentials from their files, and a refusal is one line saying which flag to look at (the engine's 401
body is empty)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from helpers.victoria import Victoria

AT = "2026-12-05T04:08:20Z"


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Victoria]:
    folder = tmp_path_factory.mktemp("vm-auth")
    engine = Victoria(
        folder / "data", folder / "vm.log", flags=["-httpAuth.username=sw", "-httpAuth.password=pw"]
    )
    try:
        engine.wait_ready()  # /health answers without credentials
        yield engine
    finally:
        engine.stop()


@pytest.mark.parametrize(
    ("auth", "said"),
    [
        ([], "(the engine wants credentials: --bearer-token-file, or --basic-auth-user with"),
        (
            ["--basic-auth-user", "sw"],
            "(the engine refused --basic-auth-user without --basic-auth-password-file)",
        ),
        (
            ["--basic-auth-user", "sw", "--basic-auth-password-file", "bad"],
            "(the engine refused the credentials",
        ),
        (["--bearer-token-file", "bad"], "(the engine refused the credentials given)"),
        # the right ones get past the engine's door: what is missing then is the series
        (["--basic-auth-user", "sw", "--basic-auth-password-file", "good"], "no sparkwatch_gpu_power_watts"),
    ],
)
def test_credentials_come_from_files_and_a_refusal_says_which_flags(
    victoria: Victoria, tmp_path: pathlib.Path, auth: list[str], said: str
) -> None:
    for name, secret in (("good", "pw"), ("bad", "nope")):
        (tmp_path / name).write_text(secret + "\n")
        (tmp_path / name).chmod(0o600)
    windows = tmp_path / "w.json"
    windows.write_text(
        '{"windows": [{"id": "r", "phase": "timed", "t_start_ns": 1796443700000000000,'
        ' "t_end_ns": 1796443702000000000}]}'
    )
    argv = [
        sys.executable, "-m", "sparkwatch", "export", "--prometheus", victoria.url, "--windows", str(windows),
        "--start", AT, "--end", "2026-12-05T04:09:00Z", "-o", str(tmp_path / "out.json"),
    ]  # fmt: skip
    done = subprocess.run([*argv, *auth], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "pw" not in done.stderr.replace("--basic-auth-password-file", "") and "nope" not in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_a_victoriametrics_refusal_keeps_its_reason_which_it_gives_last(
    victoria: Victoria, tmp_path: pathlib.Path
) -> None:
    """VictoriaMetrics echoes the query (or the request URI) first and says why last: the message kept the
    first 200 characters, and with them only the query sent (`… cannot expand WITH exp`)."""
    (tmp_path / "good").write_text("pw\n")
    (tmp_path / "good").chmod(0o600)
    windows = tmp_path / "w.json"
    windows.write_text(
        '{"windows": [{"id": "r", "phase": "timed", "t_start_ns": 1796443700000000000,'
        ' "t_end_ns": 1796443702000000000}]}'
    )
    done = subprocess.run(
        [sys.executable, "-m", "sparkwatch", "export", "--prometheus", victoria.url,
         "--windows", str(windows), "--start", AT, "--end", "2026-12-05T04:09:00Z",
         "--series-matchers", '{job=~"("}',
         "--basic-auth-user", "sw", "--basic-auth-password-file", "good"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "answered HTTP 422" in done.stderr, done.stderr
    assert "missing closing )" in done.stderr, done.stderr  # the engine's reason, at the end of its body
