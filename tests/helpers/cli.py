"""The `sparkwatch` command line as a user runs it: a subprocess with a clean environment."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Mapping
from typing import Any


def sparkwatch(
    *args: str,
    timeout: float = 120,
    cwd: pathlib.Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m sparkwatch ARGS`` to its end; no SPARKWATCH_* variable leaks in unless ``env`` sets it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKWATCH_")}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "sparkwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=clean,
    )


def nodes_toml(tmp: pathlib.Path, agents: list[Any], names: list[str] | None = None) -> pathlib.Path:
    """A nodes.toml with one ``[nodes.nI]`` entry (or the given names) per agent, in order."""
    path = tmp / "nodes.toml"
    names = names or [f"n{i}" for i in range(len(agents))]
    path.write_text(
        "".join(
            f'[nodes.{name}]\nurl = "ws://127.0.0.1:{a.port}"\n\n'
            for name, a in zip(names, agents, strict=True)
        )
    )
    return path
