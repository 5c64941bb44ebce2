"""Layering rules from design.md, enforced on the source tree."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
AGENT = ROOT / "agent" / "src" / "sparkwatch_agent"
COORD = ROOT / "src" / "sparkwatch"
HARDWARE_BOUNDARY = {"pynvml": {"hardware/nvml/backend.py"}, "psutil": {"hardware/host_facts.py"}}
CORE_FORBIDDEN = {"asyncio", "aiohttp", "asyncssh", "sqlite3", "pynvml", "psutil", "socket", "subprocess"}


def imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def all_sources() -> list[pathlib.Path]:
    return sorted([*AGENT.rglob("*.py"), *COORD.rglob("*.py")])


def test_sources_exist() -> None:
    assert (AGENT / "hardware" / "nvml" / "backend.py").exists() and (COORD / "core" / "__init__.py").exists()


def test_pynvml_and_psutil_only_in_the_hardware_boundary() -> None:
    offenders = []
    for path in all_sources():
        for module, allowed in HARDWARE_BOUNDARY.items():
            inside = path.relative_to(AGENT).as_posix() if path.is_relative_to(AGENT) else None
            if module in imported_roots(path) and inside not in allowed:
                offenders.append(f"{path.relative_to(ROOT)} imports {module}")
    assert offenders == []


def test_agent_never_imports_sparkwatch() -> None:
    offenders = [str(p.relative_to(ROOT)) for p in AGENT.rglob("*.py") if "sparkwatch" in imported_roots(p)]
    assert offenders == []


def test_core_is_pure() -> None:
    offenders = []
    for path in (COORD / "core").rglob("*.py"):
        bad = imported_roots(path) & CORE_FORBIDDEN
        if bad:
            offenders.append(f"{path.relative_to(ROOT)}: {sorted(bad)}")
    assert offenders == []


def test_boundary_check_catches_a_violation(tmp_path: pathlib.Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("from pynvml import nvmlInit\nimport psutil.tests\n")
    assert {"pynvml", "psutil"} <= imported_roots(sneaky)
