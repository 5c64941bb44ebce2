"""Log lines carry the journal's `<N>` priority prefix exactly when stderr is the journal stream systemd
connected (JOURNAL_STREAM = its dev:inode), so `journalctl -p warning` finds the warnings of both CLIs; in
a terminal, a file or a pipe they stay plain `LEVEL name: message` lines."""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
import subprocess
import sys
from typing import IO, Any

import pytest

from sparkwatch_agent.shared.journal_log import configure_logging, is_journal_stream, log_handler, sd_priority


def stream_env(f: IO[str], **extra: str) -> dict[str, str]:
    """The environment systemd gives a service whose stderr is ``f``'s journal stream."""
    st = os.fstat(f.fileno())
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}", **extra}


def emit(handler: logging.Handler, level: int, message: str, exc: BaseException | None = None) -> None:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    record = logging.LogRecord("sparkwatch.links.state", level, __file__, 1, message, (), exc_info)
    handler.handle(record)
    handler.flush()


@pytest.mark.parametrize(
    ("level", "priority"),
    [
        (logging.CRITICAL, 2),
        (logging.ERROR, 3),
        (logging.WARNING, 4),
        (logging.INFO, 6),
        (logging.DEBUG, 7),
        (logging.WARNING + 5, 4),  # a custom level counts as the standard one at or below it
        (logging.NOTSET, 7),
    ],
)
def test_levels_map_to_sd_daemon_priorities(level: int, priority: int) -> None:
    assert sd_priority(level) == priority


def test_a_stream_that_is_the_journal_gets_the_prefix(tmp_path: pathlib.Path) -> None:
    with (tmp_path / "stderr").open("w+") as f:
        handler = log_handler(f, stream_env(f))
        emit(handler, logging.WARNING, "node spark-1: link down (ws): refused; retrying in 0.8 s")
        emit(handler, logging.INFO, "node spark-1: link streaming")
        emit(handler, logging.ERROR, "unauthorized")
        emit(handler, logging.DEBUG, "detail")
        emit(handler, logging.CRITICAL, "gone")
        f.seek(0)
        assert f.read().splitlines() == [
            "<4>WARNING sparkwatch.links.state: node spark-1: link down (ws): refused; retrying in 0.8 s",
            "<6>INFO sparkwatch.links.state: node spark-1: link streaming",
            "<3>ERROR sparkwatch.links.state: unauthorized",
            "<7>DEBUG sparkwatch.links.state: detail",
            "<2>CRITICAL sparkwatch.links.state: gone",
        ]


def test_every_line_of_a_traceback_keeps_the_records_priority(tmp_path: pathlib.Path) -> None:
    """journald splits on newlines: an unprefixed traceback line would be filed at info."""
    try:
        raise ValueError("decoder bug")
    except ValueError as caught:
        exc = caught
    with (tmp_path / "stderr").open("w+") as f:
        emit(log_handler(f, stream_env(f)), logging.ERROR, "decoding sample 7 failed", exc)
        f.seek(0)
        lines = f.read().splitlines()
    assert len(lines) > 3 and lines[0] == "<3>ERROR sparkwatch.links.state: decoding sample 7 failed"
    assert lines[1] == "<3>Traceback (most recent call last):"
    assert lines[-1] == "<3>ValueError: decoder bug"
    assert all(line.startswith("<3>") for line in lines)


def plain_cases(f: IO[str], other: IO[str]) -> dict[str, dict[str, str]]:
    st = os.fstat(f.fileno())
    return {
        "unset": {},  # not started by systemd: a terminal, a pipe
        "empty": {"JOURNAL_STREAM": ""},
        # inherited from a parent whose stderr is the journal, while ours was redirected elsewhere
        "another stream": stream_env(other),
        "same device, other inode": {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"},
        "not dev:inode": {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}:0"},
        "only a colon": {"JOURNAL_STREAM": ":"},
    }


@pytest.mark.parametrize(
    "case", ["unset", "empty", "another stream", "same device, other inode", "not dev:inode", "only a colon"]
)
def test_a_stream_that_is_not_the_journal_stays_plain(tmp_path: pathlib.Path, case: str) -> None:
    with (tmp_path / "stderr").open("w+") as f, (tmp_path / "other").open("w") as other:
        env = plain_cases(f, other)[case]
        assert not is_journal_stream(f, env)
        emit(log_handler(f, env), logging.WARNING, "link down")
        f.seek(0)
        assert f.read() == "WARNING sparkwatch.links.state: link down\n"


def test_a_stream_without_a_descriptor_is_not_the_journal(tmp_path: pathlib.Path) -> None:
    with (tmp_path / "stderr").open("w") as f:
        env = stream_env(f)
        assert is_journal_stream(f, env)
    assert not is_journal_stream(io.StringIO(), env)
    assert not is_journal_stream(f, env)  # closed now


def test_configure_logging_sets_the_root_level_and_handler(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # pytest's capture handler comes back after the test
    monkeypatch.setattr(root, "level", root.level)
    with (tmp_path / "stderr").open("w+") as f:
        handler = configure_logging("warning", f, stream_env(f))
        assert root.handlers == [handler] and root.level == logging.WARNING
        logging.getLogger("sparkwatch_agent.x").info("not shown")
        logging.getLogger("sparkwatch_agent.x").warning("shown")
        f.seek(0)
        assert f.read() == "<4>WARNING sparkwatch_agent.x: shown\n"
        root.removeHandler(handler)


# ---- the real CLIs, stderr a file that JOURNAL_STREAM names ------------------------------------------
def clean_env(**extra: str) -> dict[str, str]:
    drop = ("FAKE_NVML", "NOTIFY_SOCKET", "JOURNAL_STREAM", "SPARKWATCH_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | extra


def run_with_stderr_file(
    args: list[str], stderr_path: pathlib.Path, env: dict[str, str], journal: bool
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    with stderr_path.open("w") as err:
        full_env = env | (stream_env(err) if journal else {})
        result = subprocess.run(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=err, text=True, timeout=120, env=full_env
        )
    return result, stderr_path.read_text().splitlines()


@pytest.mark.parametrize("journal", [True, False])
def test_agent_cli_warnings_carry_priority_4_under_the_journal(
    fake_nvml_dir: pathlib.Path, tmp_path: pathlib.Path, journal: bool
) -> None:
    env = clean_env(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_PROFILE="gb10")
    args = ["-m", "sparkwatch_agent", "probe", "--meminfo-path", "/nonexistent/meminfo"]
    result, lines = run_with_stderr_file(args, tmp_path / "stderr", env, journal)
    assert result.returncode == 0, lines
    assert json.loads(result.stdout)["gpu_ok"] is True  # stdout (the report) never gets a prefix
    (warning,) = [line for line in lines if "/nonexistent/meminfo" in line]
    (opened,) = [line for line in lines if "GPU backend nvml open" in line]
    prefix = ("<4>", "<6>") if journal else ("", "")
    assert warning.startswith(f"{prefix[0]}WARNING sparkwatch_agent.hardware.meminfo: "), lines
    assert opened.startswith(f"{prefix[1]}INFO sparkwatch_agent.sampling.gpu_session: "), lines


@pytest.mark.parametrize("journal", [True, False])
def test_coordinator_cli_errors_carry_priority_3_under_the_journal(
    agent_factory: Any, tmp_path: pathlib.Path, journal: bool
) -> None:
    """`sparkwatch nodes check --log-level debug` against an agent that refuses our token logs the link's
    error line (without debug the check's PROBLEM line alone says it)."""
    (tmp_path / "agent.token").write_text("the-agents-own-token-0123456789")
    (tmp_path / "wrong.token").write_text("not-the-agents-token-0123456789")
    for token in ("agent.token", "wrong.token"):
        (tmp_path / token).chmod(0o600)
    agent = agent_factory(
        "--backend", "sim", "--node", "sim-1", "--token-file", str(tmp_path / "agent.token")
    )
    nodes = tmp_path / "nodes.toml"
    nodes.write_text(
        f'[nodes.spark-2]\nurl = "ws://127.0.0.1:{agent.port}"\ntoken_file = "{tmp_path / "wrong.token"}"\n'
    )
    args = ["-m", "sparkwatch", "nodes", "check", "--nodes", str(nodes), "--wait", "30"]
    args += ["--log-level", "debug"]
    result, lines = run_with_stderr_file(args, tmp_path / "stderr", clean_env(), journal)
    assert result.returncode == 1, lines
    (error,) = [line for line in lines if "link unauthorized" in line]
    want = "<3>ERROR" if journal else "ERROR"
    assert error.startswith(f"{want} sparkwatch.links.state: node spark-2: link unauthorized (ws): "), lines
