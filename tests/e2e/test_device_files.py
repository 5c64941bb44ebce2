"""A device named where a file belongs (``/dev/zero`` by a slip of the shell) is refused in one line before
a byte is read. Before, each of these read ``/dev/zero`` into memory until the machine ran out (or the
test's timeout): ``Path.read_bytes`` never returns on a device that never ends."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from tests.helpers.cli import sparkwatch

from sparkwatch.meters.credentials import SecretFileError, first_line

EXPORT = pathlib.Path(__file__).parents[1] / "fixtures" / "harness" / "export" / "demo-run.json"
REFUSED = "is a character device, not a file (a regular file or a pipe is read)"


@pytest.fixture
def zero(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder holding ``zero.json`` and ``zero.toml``, both links to ``/dev/zero``."""
    for name in ("zero.json", "zero.toml"):
        (tmp_path / name).symlink_to("/dev/zero")
    (tmp_path / "payload.json").write_text("{}\n")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["report", "zero.json"], {}),  # an export file
        (["attach", str(EXPORT), "--lmx", "zero.json"], {}),  # an lmx payload
        (["nodes", "check", "--nodes", "zero.toml"], {}),  # a nodes file
        (["demo"], {"SPARKWATCH_CONFIG": "zero.toml"}),  # the settings
        (
            [
                "export",
                "--prometheus",
                "http://127.0.0.1:9",
                "--windows",
                "zero.json",
                "--start",
                "1700000000",
                "--end",
                "1700000100",
            ],  # a harness's file
            {},
        ),
    ],
    ids=["export", "payload", "nodes", "settings", "windows"],
)
def test_a_device_is_one_line_at_once(zero: pathlib.Path, args: list[str], env: dict[str, str]) -> None:
    done = sparkwatch(*args, cwd=zero, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparkwatch") and lines[0].endswith(REFUSED), lines
    assert (zero / "payload.json").read_text() == "{}\n"  # nothing written


def test_the_agents_config_file(zero: pathlib.Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sparkwatch_agent", "serve", "--config", "zero.toml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=zero,
        env={k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH")},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"sparkwatch-agent: error: cannot read config file zero.toml: {REFUSED}"


def test_a_meters_secret_file(zero: pathlib.Path) -> None:
    with pytest.raises(SecretFileError) as info:
        first_line(zero / "zero.toml", "password")
    assert str(info.value) == f"cannot read password file {zero / 'zero.toml'}: {REFUSED}"
