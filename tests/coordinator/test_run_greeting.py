"""`run` says, before the command starts, which node's agent has not said hello (the quality line after the
benchmark said it too late: a long benchmark ran without that node), and, while it waits for one, which and
why (a new user's run sat 15 s silent on an agent that refused the connection)."""

from __future__ import annotations

import asyncio
import io
import json
import pathlib
from typing import Any

import pytest

from sparkwatch.cli import main
from sparkwatch.client_waits import NodeWaits, end_wait_s
from sparkwatch.commands.run import run_command
from sparkwatch.commands.run_greeting import GREET_QUIET_S, greet, silent_of, strict_refusal
from sparkwatch.commands.run_options import RunOptions


class Nodes:
    """The client seam `_greet` waits on: /v1/nodes as it stood when the wait ended."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes = nodes
        self.waited_s: list[float] = []

    async def wait_for_connected(self, timeout_s: float) -> list[dict[str, Any]]:
        self.waited_s.append(timeout_s)
        return self.nodes


def greeted(nodes: list[dict[str, Any]], silent: set[str] | None = None, waits: int = 1) -> str:
    """What `greet` says of ``nodes``; it returns the nodes not heard from, ``silent`` (none by default),
    after ``waits`` waits that add up to at most the 15 s the options give."""
    err = io.StringIO()
    client = Nodes(nodes)
    opts = RunOptions(command=["true"], wait_nodes_s=15.0, stderr=err)
    assert silent_of(asyncio.run(greet(client, opts))) == (silent or set())  # type: ignore[arg-type]
    assert client.waited_s == [GREET_QUIET_S, 15.0 - GREET_QUIET_S][:waits]
    return err.getvalue()


def test_a_node_without_a_hello_is_named_with_its_links_state_before_the_command_starts() -> None:
    said = greeted(
        [
            {"node": "spark-1", "hardware": {"gpus": []}, "agent_node": "spark-1", "status": "streaming"},
            {
                "node": "ghost",
                "hardware": None,
                "status": "connecting",
                "error": "Cannot connect to host 127.0.0.1:9 [Connection refused]",
            },
            {"node": "locked", "status": "unauthorized", "error": None},
        ],
        silent={"ghost", "locked"},
        waits=2,
    )
    assert said.splitlines() == [
        f"sparkwatch: waiting up to {15 - GREET_QUIET_S:g} s more for node ghost to say hello (connecting:"
        " Cannot connect to host 127.0.0.1:9 [Connection refused])",
        "sparkwatch: warning: node ghost has not said hello after 15 s (connecting: Cannot connect to host"
        " 127.0.0.1:9 [Connection refused]); the run goes on without its samples until it does (--strict"
        " fails such a run)",
        "sparkwatch: warning: node locked has not said hello (unauthorized); the run goes on without its"
        " samples until it does (--strict fails such a run)",
    ]


def test_a_standing_coordinators_node_that_is_down_is_waited_for_and_named_though_it_said_hello_before() -> (
    None
):
    """A standing coordinator keeps a node's last hello while its agent is away: `run --strict` with that
    node down started the command with no word of it, then exited 3 after the benchmark."""
    down = {
        "node": "spark-2",
        "hardware": {"gpus": []},
        "agent_node": "spark-2",
        "connected": False,
        "status": "down",
        "error": "cannot connect to 10.0.0.12:9464: Connection refused",
    }
    said = greeted([down], silent=set(), waits=2)
    why = "down: cannot connect to 10.0.0.12:9464: Connection refused"
    assert said.splitlines() == [
        f"sparkwatch: waiting up to {15 - GREET_QUIET_S:g} s more for node spark-2 to connect ({why})",
        f"sparkwatch: warning: node spark-2 is not connected after 15 s ({why}); the run goes on without its"
        " samples until it reconnects (--strict fails such a run)",
    ]
    err = io.StringIO()
    opts = RunOptions(command=["true"], strict=True, stderr=err)
    assert strict_refusal(opts, [down]) == 3
    assert (
        err.getvalue()
        == "sparkwatch: --strict: the command was not started: node(s) spark-2 are not connected\n"
    )


def test_nodes_that_all_said_hello_get_no_warning() -> None:
    assert greeted([{"node": "spark-1", "hardware": {"gpus": []}, "agent_node": "spark-1"}]) == ""


def test_a_node_that_refused_the_token_is_not_waited_for() -> None:
    """Its link will not come up while the run waits: said once, with no wait for it."""
    said = greeted([{"node": "locked", "status": "unauthorized", "error": None}], silent={"locked"})
    assert said.startswith("sparkwatch: warning: node locked has not said hello (unauthorized)")


class Behind(NodeWaits):
    """/v1/nodes with one node caught up to every time asked and one whose agent never said hello."""

    def __init__(self) -> None:
        self.reads = 0

    async def nodes(self) -> list[dict[str, Any]]:
        self.reads += 1
        latest = {"t_wall_ns": 2**62, "interval_s": 0.1}
        return [
            {"node": "spark-1", "connected": True, "latest": latest, "clock": {"offset_ns": 0}},
            {"node": "ghost", "connected": False, "latest": None, "status": "down", "error": "refused"},
        ]


def test_the_wait_for_samples_before_the_command_skips_a_node_never_heard_from(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node that has not said hello cannot catch up either: the trial's run of `true` with such a node
    waited 15 s for its hello, then 15 s more for its samples, before the command started."""
    waits = Behind()
    behind = asyncio.run(waits.wait_caught_up(1, timeout_s=10.0, interval_s=0.1, skip=frozenset({"ghost"})))
    assert behind == [] and waits.reads == 1  # ready at the first read: no waiting for the time to be up
    assert asyncio.run(waits.wait_caught_up(1, timeout_s=0.3, interval_s=0.1)) == ["ghost"]
    assert waits.reads > 2  # without the skip: polled until the time was up
    # which node, and why, as a user reads it (it said "nodes ['ghost'] have not caught up after 0 s")
    assert "not caught up after 0 s: ghost (down: refused)" in caplog.text


async def test_strict_does_not_start_the_command_when_a_node_was_never_heard_from(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--strict` with a node down ran the whole benchmark, then exited 3: now `run` exits 3 before it, with
    no run opened, and `--json` says why. The real flow (an embedded coordinator dialling a port where
    nothing listens), its hello wait cut short."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.ghost]\nurl = "ws://127.0.0.1:9"\n')  # the discard port: refused
    ran, err = tmp_path / "ran", io.StringIO()
    opts = RunOptions(
        command=["touch", str(ran)],
        nodes_file=nodes,
        strict=True,
        json_out=True,
        report=False,
        wait_nodes_s=GREET_QUIET_S + 0.5,
        output=tmp_path / "r.json",
        stderr=err,
    )
    assert await run_command(opts) == 3
    assert not ran.exists() and not (tmp_path / "r.json").exists()
    said = err.getvalue()
    assert "node ghost has not said hello after 2.5 s (down: cannot connect to 127.0.0.1:9" in said
    assert " open on " not in said  # no run opened
    assert said.count("--strict") == 1, said  # the node's line and the refusal said it twice
    assert "sparkwatch: --strict: the command was not started: node(s) ghost have not said hello" in said
    outcome = json.loads(capsys.readouterr().out)
    assert (outcome["exit_code"], outcome["export"], outcome["run_id"]) == (3, None, None)
    assert outcome["quality"]["sound"] is False and outcome["quality"]["nodes"] == 1
    assert outcome["quality"]["problems"] == ["not started: no hello from ghost"]
    assert outcome["quality"]["measured"] is False  # nothing started, so no node vouched for


async def test_a_node_whose_agent_is_not_there_is_named_while_run_waits_and_not_waited_for_at_the_end(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A new user's `run` with a mistyped port sat silent for 15 s (the hello wait), and after the command
    5 s more for samples that could never come. Now the wait says at once which node and why (in the
    system's words, not aiohttp's "ssl:default"), the end does not wait on a node never heard from, and
    that nothing can make windows (no proxy, no import; with --nodes the command cannot post marks) is
    said before the command runs. The real flow, its hello wait cut short."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.ghost]\nurl = "ws://127.0.0.1:9"\n')  # the discard port: refused
    err = io.StringIO()
    opts = RunOptions(
        command=["true"],
        nodes_file=nodes,
        report=False,
        wait_nodes_s=GREET_QUIET_S + 0.5,
        output=tmp_path / "r.json",
        stderr=err,
    )
    with caplog.at_level("WARNING", logger="sparkwatch.client_waits"):
        assert await run_command(opts) == 0
    said, why = err.getvalue(), "down: cannot connect to 127.0.0.1:9: Connection refused"
    assert f"sparkwatch: waiting up to 0.5 s more for node ghost to say hello ({why})" in said
    assert f"sparkwatch: warning: node ghost has not said hello after 2.5 s ({why}); the run goes on" in said
    note = "sparkwatch: note: no --proxy-upstream and no --import: with --nodes the command cannot post marks"
    assert said.index(" open on http://") < said.index(note)
    assert "never caught up: ghost" in said + capsys.readouterr().out  # still said in the quality line
    assert "not caught up after" not in caplog.text  # the end's wait did not wait on it


def test_run_wait_says_how_long_the_hellos_are_waited_for(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 15 s hello wait had no flag: a cluster whose SSH links take longer to dial had no way to wait
    for them. `run --wait SECONDS`, through the command line, with the real flow (a refused port, so the
    wait runs its whole length) and --strict, so nothing is started; a wait of 0 is refused by the flag."""
    nodes = tmp_path / "nodes.toml"
    nodes.write_text('[nodes.ghost]\nurl = "ws://127.0.0.1:9"\n')  # the discard port: refused
    ran = tmp_path / "ran"
    wait = f"{GREET_QUIET_S + 0.7:g}"
    argv = ["run", "--nodes", str(nodes), "--wait", wait, "--strict", "--no-report", "--", "touch", str(ran)]
    assert main(argv) == 3 and not ran.exists()
    err = capsys.readouterr().err
    assert "waiting up to 0.7 s more for node ghost to say hello" in err
    assert f"node ghost has not said hello after {wait} s" in err
    with pytest.raises(SystemExit) as refused:
        main(["run", "--wait", "0", "--", "true"])
    assert refused.value.code == 2
    said = capsys.readouterr().err
    assert "sparkwatch run: error: argument --wait: must be a positive number, got '0'" in said


@pytest.mark.parametrize(
    "argv", [["run", "--wait", "1e9", "--", "true"], ["nodes", "check", "--wait", "86401"]]
)
def test_a_wait_past_a_day_is_refused_as_a_typo(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """`--wait 1e9` was taken and said back as `1e+09 s`: every wait flag stops at a day."""
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert refused.value.code == 2
    said = capsys.readouterr().err
    assert (
        f"argument --wait: must be at most 86400 seconds (a day), got {argv[argv.index('--wait') + 1]}"
        in said
    )
    assert main(["nodes", "check", "--wait", "86400", "--nodes", "/nonexistent.toml"]) == 2  # a day is taken
    assert "--wait" not in capsys.readouterr().err


def test_the_wait_after_the_end_allows_for_an_agent_idling_slower() -> None:
    """Once the run's lease is released an agent samples at its own interval: one idling at 10 s was named
    behind after 5 s, its last interval left open."""
    assert end_wait_s([]) == 5.0 and end_wait_s([{"interval_s": 1.0}, {"interval_s": None}]) == 5.0
    assert end_wait_s([{"interval_s": 1.0}, {"interval_s": 10.0}]) == 16.0
    assert end_wait_s([{"interval_s": 3600.0}]) == 60.0  # at most a minute: beyond it, named behind


class Metered(NodeWaits):
    """/v1/nodes with one node whose samples are caught up and whose meter reads at T_END from the third
    read of /v1/nodes on (``reads_at`` None: never again; ``error``: its latest poll failed)."""

    T_END = 5_000

    def __init__(self, reads_at: int | None = 3, error: str | None = None) -> None:
        self.reads, self._reads_at, self._error = 0, reads_at, error

    async def nodes(self) -> list[dict[str, Any]]:
        self.reads += 1
        fresh = self._reads_at is not None and self.reads >= self._reads_at
        meter = {
            "kind": "redfish",
            "interval_s": 10.0,
            "last_t_ns": self.T_END if fresh else 10,
            "error": self._error,
        }
        latest = {"t_wall_ns": 2**62, "interval_s": 0.1}
        return [{"node": "spark-1", "connected": True, "latest": latest, "clock": {}, "meter": meter}]


def test_the_wait_after_the_end_waits_for_each_meters_reading_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Meters were not waited for: the export made at a run's end lacked the meter's reading after it, so
    the stretch from its last poll before the end was not covered (and a later export covered it)."""
    waits = Metered()
    assert asyncio.run(waits.wait_caught_up(Metered.T_END, timeout_s=10.0)) == [] and waits.reads == 1
    waits = Metered()
    with caplog.at_level("INFO", logger="sparkwatch.client_waits"):
        assert asyncio.run(waits.wait_caught_up(Metered.T_END, timeout_s=16.0, meters=True)) == []
    assert waits.reads == 3  # until the meter read at the end or later
    # a meter polled every 10 s holds the end that long: said, not a silent pause
    assert (
        "waiting up to 16 s for the wall meters' readings after the end: spark-1's (every 10 s)"
        in caplog.text
    )
    failing = Metered(reads_at=None, error="no answer within the timeout")
    assert asyncio.run(failing.wait_caught_up(Metered.T_END, timeout_s=10.0, meters=True)) == []
    assert (
        failing.reads == 2
    )  # the note's read, then one: a meter that fails closes nothing by being waited on
    silent = Metered(reads_at=None)
    assert (
        asyncio.run(silent.wait_caught_up(Metered.T_END, timeout_s=0.3, meters=True)) == []
    )  # samples are in
    assert (
        silent.reads > 2
        and "no meter reading since the end after 0 s: spark-1's redfish meter" in caplog.text
    )
    assert "not caught up" not in caplog.text
    # and the wait allows for a meter polled slower than the agents sample
    assert (
        end_wait_s([{"interval_s": 1.0, "meter": {"interval_s": 10.0}}, {"interval_s": 1.0, "meter": None}])
        == 16.0
    )
    assert end_wait_s([{"interval_s": 1.0, "meter": {"interval_s": 60.0}}]) == 91.0  # its next poll: no cap
