"""`sparkwatch --help` and `--version` must not load the stack: start-up time is measured in
benchmarks/cli_startup.py; this checks the cause structurally (what got imported), never a clock."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from sparkwatch.store import Store

HEAVY = ("aiohttp", "numpy", "pydantic", "orjson", "sqlite3", "prometheus_client", "altair", "vl_convert")


def _loaded(argv: list[str], modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` `sparkwatch ARGV` has imported by the time it returns (or exits)."""
    probe = (
        "import sys\nfrom sparkwatch.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {modules!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return list(ast.literal_eval(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], ["run", "--help"], ["runs", "list", "--help"], ["report", "--help"]]
)
def test_help_and_version_load_none_of_the_stack(argv: list[str]) -> None:
    assert _loaded(argv, HEAVY) == []


def test_a_scripts_runs_mark_loads_no_numpy_and_a_refused_run_no_coordinator() -> None:
    """`runs mark` per request in a benchmark script took 0.73 s, half of it the export's stack and
    numpy; a `run` whose flags are wrong loaded the embedded coordinator, the proxy and the links (1.2 s)
    before saying so (benchmarks/cli_startup.py)."""
    mark = ["runs", "mark", "r", "m", "begin", "--coordinator", "http://127.0.0.1:9"]
    assert _loaded(mark, ("numpy", "aiohttp")) == ["aiohttp"]  # it did send (to nothing)
    stack = ("sparkwatch.coordinator.serve", "sparkwatch.proxy.serve", "sqlite3", "sparkwatch.commands.run")
    assert _loaded(["run", "--nodes", "n.toml"], stack) == []  # no command after --
    assert _loaded(["run", "--clock-anchor", "1:2", "--", "true"], stack) == []
    assert _loaded(["run", "--nodes", "/no/such/nodes.toml", "--", "true"], stack) == []  # unreadable


def test_an_offline_export_loads_no_http_client(tmp_path: Path) -> None:
    """`export --db` imported the TSDB export's engine client and the coordinator client, and so aiohttp
    (about half of its start-up), to read a file; `--prometheus` still does."""
    db = tmp_path / "c.db"
    Store(db).close()  # a coordinator's database, with no run in it: refused after it was read
    assert _loaded(["export", "--db", str(db), "r1"], ("aiohttp", "sqlite3")) == ["sqlite3"]
    windows = tmp_path / "w.json"
    windows.write_text('{"windows": []}')
    span = ["--start", "1e9", "--end", "1000000100"]
    tsdb = ["export", "--prometheus", "http://127.0.0.1:9", "--windows", str(windows), *span]
    assert _loaded(tsdb, ("aiohttp",)) == ["aiohttp"]


def test_a_subcommand_still_loads_what_it_needs() -> None:
    """The check above can fail: a real subcommand does import the stack."""
    probe = (
        "import sys\nfrom sparkwatch.cli import main\nmain(['schema'])\n"
        "print('pydantic' in sys.modules or 'numpy' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "True"


def test_a_coordinator_of_websocket_nodes_loads_no_ssh() -> None:
    """asyncssh (with cryptography) was about 0.3 s of every `run`, `demo` and coordinator start, where no
    node is reached by SSH; a link that is loads it (what the second probe checks)."""
    probe = (
        "import sys\nimport sparkwatch.cli_services, sparkwatch.cli_run, sparkwatch.commands.run\n"
        "import sparkwatch.coordinator.serve, sparkwatch.links.factory\n"
        "print('asyncssh' in sys.modules)\n"
        "from sparkwatch.links.ssh_link import SshExecLink\nprint('asyncssh' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["False", "True"], result.stderr
