"""How sound a finished run's measurement is, in one sentence and one yes/no: what `run` and `demo` print
after the table and what ``--strict`` turns into an exit code, so a shell script can refuse a number that
a person would have been warned about."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkwatch.core.domains import headline_entry
from sparkwatch.core.id_lists import name_ids
from sparkwatch.core.power import INCOMPLETE_COVERAGE, falls_short
from sparkwatch.core.rounding import ratio_text
from sparkwatch.hello_facts import shared_identities

#: ``--strict``: the command succeeded (or there was none) but the measurement is not sound. Distinct from
#: 2 (a usage error) and 130 (interrupted); a failing command's own code wins over it.
EXIT_NOT_SOUND = 3
#: The run could not be ended or exported (the coordinator went away, refused the end): there is no export
#: to trust, whatever the command did — unless the command failed, whose own code wins.
EXIT_NO_EXPORT = 4


@dataclass(frozen=True, slots=True)
class Quality:
    """What a run measured, counted: timed windows that are ``ok`` and nodes that delivered samples;
    ``measured``: whether any timed window was measured at all (in scope), so the nodes were judged."""

    windows_ok: int
    windows_timed: int
    nodes_ok: int
    nodes: int
    problems: list[str] = field(default_factory=list)
    measured: bool = True
    #: ``--scope run``: the run's length, which is what was measured (its windows judge nothing); else None
    whole_run_s: float | None = None
    #: The ids of the measured phases' windows that are out of scope or not ``ok``, in export order
    not_ok: tuple[str, ...] = ()
    #: The measured phases, which the line names ("timed" by default; `--phases timed,warmup` counted the
    #: warm-up's windows as "timed windows")
    phases: tuple[str, ...] = ("timed",)

    @property
    def sound(self) -> bool:
        return not self.problems

    def line(self) -> str:
        """E.g. "3 of 3 timed windows ok on 4 of 4 nodes" (``--scope run``: "the whole run (12.3 s) on 4 of
        4 nodes"), then each problem. With nothing measured (no timed window, or each one failed or was
        interrupted; an empty run) the nodes are not counted: "on 2 of 2 nodes" would vouch for nothing."""
        noun = "window" if self.windows_timed == 1 else "windows"
        text = f"{self.windows_ok} of {self.windows_timed} {' and '.join(self.phases)} {noun} ok"
        if self.whole_run_s is not None:
            text = f"the whole run ({self.whole_run_s:.1f} s)"
        if self.measured:
            text += f" on {self.nodes_ok} of {self.nodes} nodes"
        return f"{text}: {'; '.join(self.problems)}" if self.problems else text

    def to_json(self) -> dict[str, Any]:
        return {
            "sound": self.sound,
            "summary": self.line(),
            "windows_ok": self.windows_ok,
            "windows_timed": self.windows_timed,
            "nodes_ok": self.nodes_ok if self.measured else None,  # no node judged: none vouched for
            "nodes": self.nodes,
            "measured": self.measured,
            "problems": list(self.problems),
        }


#: The fields of each window :func:`judge` reads.
JUDGED_FIELDS = ("id", "phase", "in_scope", "verdict")


def judge(
    export: dict[str, Any],
    nodes_behind: Sequence[str] = (),
    failed_imports: Sequence[str] = (),
    failed_checks: Sequence[str] = (),
    *,
    scope_flag: bool = True,
    windows: Sequence[dict[str, Any]] | None = None,
) -> Quality:
    """The measurement's quality: every window of the run's measured phases measured and ``ok`` (one that
    failed or lacks the stamps its scope needs is not), no GPU reported by two nodes, every node caught up,
    sampled and with a gated power, every import taken, every check passed. ``nodes_behind`` are the nodes
    whose samples never reached the end of the run; ``failed_imports`` one sentence per import that was
    skipped; ``failed_checks`` one per check of the windows that failed (lmx's status lines against the
    proxy's). ``scope_flag``: whether the command has ``--scope run`` to suggest (the demo has not);
    ``windows``: the windows' JUDGED_FIELDS where kept as they were made (not made again for this)."""
    method, phases = export["method"], export["method"].get("phases", ["timed"])
    timed, other_phases = _of_phases(export["windows"] if windows is None else windows, phases)
    whole_run = method.get("scope") == "run"  # the run is the measured time: its windows judge nothing
    not_ok = [] if whole_run else [w["id"] for w in timed if not w["in_scope"] or w["verdict"] != "ok"]
    measured = (method.get("scope_s") or 0) > 0 if whole_run else any(w["in_scope"] for w in timed)
    # a node without one sample in the measured time (with no measured time, every node has none)
    silent = [n["node"] for n in export["nodes"] if measured and not (n.get("samples") or {}).get("count")]
    # a node with samples but no gated power: the headline figure is unknown there (an idle GPU, or a
    # gate threshold the load never reached); `attach` refuses such an export for lmx
    ungated = [n for n in export["nodes"] if measured and n["node"] not in silent and not _gated(n)]
    shared = shared_identities([(n["node"], _hello_of(n)) for n in export["nodes"]])
    bad_nodes = {*nodes_behind, *silent, *(n["node"] for n in ungated), *(s.second for s in shared)}
    run_problems, run_bad = _whole_run(export, silent) if whole_run else ([], set())
    bad_nodes |= run_bad
    problems: list[str] = []
    if whole_run and not measured:
        problems.append("the run has no length to measure")
    if not timed and not whole_run:
        problems.append(_none_recorded(phases, other_phases, scope_flag))
    if not_ok:
        problems.append(f"{len(not_ok)} {' and '.join(phases)} window(s) not ok ({name_ids(not_ok)})")
    problems += [str(s) for s in shared]
    if nodes_behind:
        problems.append(f"never caught up: {', '.join(nodes_behind)}")
    if silent:
        problems.append(f"no samples from {', '.join(silent)} in the measured time")
    if ungated:
        why = (ungated[0].get("null_reasons") or {}).get("power_w.gated_mean", "unknown")
        names = ", ".join(n["node"] for n in ungated)
        problems.append(f"no gated GPU power on {names} ({why})")
    problems += run_problems
    problems += [f"import failed: {text}" for text in failed_imports]
    problems += list(failed_checks)  # said as they are: nothing failed to import
    return Quality(
        windows_ok=len(timed) - len(not_ok),
        windows_timed=len(timed),
        nodes_ok=len([n for n in export["nodes"] if n["node"] not in bad_nodes]),
        nodes=len(export["nodes"]),
        problems=problems,
        measured=measured,
        whole_run_s=float(method.get("scope_s") or 0.0) if whole_run else None,
        not_ok=tuple(not_ok),
        phases=tuple(phases),
    )


def _of_phases(
    windows: Iterable[dict[str, Any]], phases: Sequence[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The windows of ``phases``, and the other phases the windows have (read in one pass: an export's
    windows are made as they are read)."""
    chosen, others = [], set()
    for w in windows:
        if w["phase"] in phases:
            chosen.append(w)
        else:
            others.add(w["phase"])
    return chosen, sorted(others)


def _none_recorded(phases: Sequence[str], others: Sequence[str], scope_flag: bool) -> str:
    """No window of the measured phases: the phases the windows have instead (a phase mistyped, `--phases
    warmp`, was only "no warmp window was recorded"), and ``--scope run`` where the command has it."""
    hints = [f"its windows are {' and '.join(others)}"] if others else []
    hints += ["--scope run measures the whole run"] if scope_flag else []
    return f"no {' or '.join(phases)} window was recorded" + (f" ({'; '.join(hints)})" if hints else "")


def _gated(node: dict[str, Any]) -> bool:
    return (node.get("power_w") or {}).get("gated_mean") is not None


def _whole_run(export: dict[str, Any], silent: Sequence[str]) -> tuple[list[str], set[str]]:
    """What a window's verdict says of its own time, said of the whole run (``--scope run``): a node's GPU
    samples or its headline (whole-node) domain covering less of it than a figure needs, implausible
    intervals rejected in it, its wall clock stepping inside it; the problems, and the nodes they spoil."""
    run = export["run"]
    found: dict[str, list[str]] = {}
    for node in export["nodes"]:
        name, said = node["node"], []
        if name in silent:
            continue
        samples = node.get("samples") or {}
        if _short(samples.get("coverage_ratio")):
            coverage = samples.get("coverage_ratio") or 0.0
            said.append(f"GPU samples cover {ratio_text(coverage)} < {INCOMPLETE_COVERAGE}")
        headline = headline_entry(node)
        if headline is not None and _short((headline.get("samples") or {}).get("coverage_ratio")):
            coverage = headline["samples"]["coverage_ratio"] or 0.0
            said.append(f"{headline['domain']} covers {ratio_text(coverage)} < {INCOMPLETE_COVERAGE}")
        if samples.get("implausible_intervals"):
            said.append(f"{samples['implausible_intervals']} implausible interval(s) rejected")
        steps = [s for s in (node.get("clock") or {}).get("steps") or [] if _inside(s["t_ns"], run)]
        if steps:
            said.append(f"its wall clock stepped {len(steps)} time(s)")
        if said:
            found[name] = said
    return [f"{name}: {'; '.join(said)}" for name, said in found.items()], set(found)


def _short(coverage: float | None) -> bool:
    """A written coverage below a window's threshold (judged by the core's rule), or none at all."""
    return coverage is None or falls_short(coverage)


def _inside(t_ns: int, run: dict[str, Any]) -> bool:
    return bool(run["t_start_ns"] <= t_ns <= (run.get("t_end_ns") or t_ns))


def _hello_of(node: dict[str, Any]) -> dict[str, Any]:
    """The GPU UUIDs an exported node reports, shaped as a hello for ``shared_identities``: a node whose
    agent was listed twice, or came up after its run opened, shows up here."""
    return {"capabilities": {"gpus": [{"uuid": g["uuid"]} for g in node.get("gpus") or [] if g.get("uuid")]}}


def exit_code(command_code: int, quality: Quality, strict: bool) -> int:
    """The command's code; under ``strict`` an unsound measurement turns a success into ``EXIT_NOT_SOUND``."""
    if strict and command_code == 0 and not quality.sound:
        return EXIT_NOT_SOUND
    return command_code
