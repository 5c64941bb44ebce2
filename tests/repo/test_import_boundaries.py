"""The house rules of design.md, enforced on the source tree: what touches the machine, what stays pure,
what each distribution may take from the other, and that no import runs up the house."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
AGENT = ROOT / "agent" / "src" / "sparkwatch_agent"
COORD = ROOT / "src" / "sparkwatch"
HARDWARE_BOUNDARY = {"pynvml": {"hardware/nvml/backend.py"}, "psutil": {"hardware/host_facts.py"}}
CORE_FORBIDDEN = {
    "asyncio",
    "aiohttp",
    "asyncssh",
    "sqlite3",
    "pynvml",
    "psutil",
    "socket",
    "subprocess",
    "pydantic",
}
#: What the core may import of the agent's distribution: units, and numbers quoted in messages, named once
#: for both.
CORE_MAY_IMPORT = (
    "sparkwatch_agent.shared.units",
    "sparkwatch_agent.shared.protocol",
    "sparkwatch_agent.shared.strict_text",
)
#: What the sparkwatch distribution may import of the agent's (the demo runs simulated agents).
ROOT_MAY_IMPORT = ("sparkwatch_agent.shared", "sparkwatch_agent.config")
DEMO_MAY_IMPORT = ("sparkwatch_agent.assemble",)

#: The stages of each house, bottom up; a module may import its own stage and those below it.
AGENT_STAGES: dict[str, float] = {
    "shared": 0,
    "hardware": 1,
    "sampling": 2,
    "config": 2,
    "serving": 3,
    "assemble": 4,
    "cli": 5,
    "__main__": 5,
    "__init__": 0,
}
ROOT_STAGES: dict[str, float] = {
    "__init__": 0,
    "wire": 0,
    "hello_facts": 0,
    "core": 0,
    "outputs": 0,
    "window_spool": 0,  # the export's windows encoded once, for outputs' writer
    "store": 1,
    "importers": 1,
    "report": 1,  # built from an export alone: the core's shapes, never the store or the coordinator
    "http_reasons": 0,  # why a request failed, in words: for the client, the links, the sim driver
    "http_redirects": 0,  # GETs that follow a redirect on the server's own host only: meters, engines
    "client": 1,
    "client_waits": 1,  # the client's waits for the nodes, over its reads
    "client_bodies": 1,  # what the client sends: its JSON, an import's windows read a batch ahead
    "links": 2,
    "meters": 2,
    "engines": 2,
    "proxy": 2,
    "coordinator": 3,
    "sources": 3,  # the store's source reads through coordinator.boot_reads; the service exports through it
    "coordinator.api": 3.5,  # the API reaches the service, never the other way
    "coordinator.serve": 3.7,  # the process: service and API together
    "commands": 4,
    "cli_parser": 5,
    "cli_types": 5,
    "cli_parser_runs": 5,
    "cli_commands": 5,
    "cli_handlers": 5,
    "cli_services": 5,
    "cli_run": 5,
    "settings": 0,
    "defaults": 0,
    "cli": 5,
    "__main__": 5,
}


def imports(path: pathlib.Path) -> set[str]:
    """Dotted names of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def roots(path: pathlib.Path) -> set[str]:
    return {name.split(".")[0] for name in imports(path)}


def stage_of(dotted: str, package: str, stages: dict[str, float]) -> float | None:
    """The stage of a module named ``package.x.y...``: that of ``x.y`` where it has its own, else ``x``
    (None for a name outside the package or unknown)."""
    parts = dotted.split(".")
    if parts[0] != package:
        return None
    if len(parts) > 2 and ".".join(parts[1:3]) in stages:
        return stages[".".join(parts[1:3])]
    return stages.get(parts[1] if len(parts) > 1 else "__init__")


def upward_imports(base: pathlib.Path, package: str, stages: dict[str, float]) -> list[str]:
    found = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base).with_suffix("")
        own = stage_of(".".join((package, *rel.parts)), package, stages)
        assert own is not None, rel
        for name in sorted(imports(path)):
            target = stage_of(name, package, stages)
            if target is not None and target > own:
                found.append(f"{package}/{rel.as_posix()} imports {name}")
    return found


def all_sources() -> list[pathlib.Path]:
    return sorted([*AGENT.rglob("*.py"), *COORD.rglob("*.py")])


def test_every_module_has_a_stage() -> None:
    assert {p.relative_to(AGENT).parts[0].removesuffix(".py") for p in AGENT.rglob("*.py")} <= set(
        AGENT_STAGES
    )
    assert {p.relative_to(COORD).parts[0].removesuffix(".py") for p in COORD.rglob("*.py")} <= set(
        ROOT_STAGES
    )


def test_pynvml_and_psutil_only_in_the_hardware_boundary() -> None:
    offenders = []
    for path in all_sources():
        for module, allowed in HARDWARE_BOUNDARY.items():
            inside = path.relative_to(AGENT).as_posix() if path.is_relative_to(AGENT) else None
            if module in roots(path) and inside not in allowed:
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_agent_never_imports_sparkwatch() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in AGENT.rglob("*.py") if "sparkwatch" in roots(p)]
    assert offenders == []


def test_sparkwatch_takes_only_shared_config_and_for_the_demo_the_assembly() -> None:
    offenders = []
    for path in COORD.rglob("*.py"):
        allowed = ROOT_MAY_IMPORT + (DEMO_MAY_IMPORT if path.name == "demo.py" else ())
        for name in imports(path):
            if name.split(".")[0] == "sparkwatch_agent" and not name.startswith(allowed):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_core_is_pure_and_wire_stands_alone() -> None:
    offenders = []
    for path in (COORD / "core").rglob("*.py"):
        bad = roots(path) & CORE_FORBIDDEN
        ours = {
            n
            for n in imports(path)
            if (n.startswith("sparkwatch.") and not n.startswith(("sparkwatch.core", "sparkwatch.defaults")))
            or (n.startswith("sparkwatch_agent") and not n.startswith(CORE_MAY_IMPORT))
        }
        if bad or ours:
            offenders.append(f"{path.relative_to(ROOT)}: {sorted(bad | ours)}")
    wire = {n for n in imports(COORD / "wire.py") if n.split(".")[0] == "sparkwatch"}
    assert offenders == [] and wire == set()


def test_no_import_runs_up_the_house() -> None:
    assert upward_imports(AGENT, "sparkwatch_agent", AGENT_STAGES) == []
    assert upward_imports(COORD, "sparkwatch", ROOT_STAGES) == []


def test_the_checks_catch_a_violation(tmp_path: pathlib.Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("from pynvml import nvmlInit\nimport psutil.tests\n")
    assert {"pynvml", "psutil"} <= roots(sneaky)
    house = tmp_path / "sparkwatch_agent"
    (house / "hardware").mkdir(parents=True)
    (house / "hardware" / "gpu.py").write_text("from sparkwatch_agent.serving.metrics import make_registry\n")
    assert upward_imports(house, "sparkwatch_agent", AGENT_STAGES) == [
        "sparkwatch_agent/hardware/gpu imports sparkwatch_agent.serving.metrics",
        "sparkwatch_agent/hardware/gpu imports sparkwatch_agent.serving.metrics.make_registry",
    ]
    root = tmp_path / "sparkwatch"
    (root / "coordinator").mkdir(parents=True)
    (root / "coordinator" / "service.py").write_text(
        "from sparkwatch.coordinator.api.models import RunCreate\n"
    )
    assert upward_imports(root, "sparkwatch", ROOT_STAGES) == [
        "sparkwatch/coordinator/service imports sparkwatch.coordinator.api.models",
        "sparkwatch/coordinator/service imports sparkwatch.coordinator.api.models.RunCreate",
    ]
