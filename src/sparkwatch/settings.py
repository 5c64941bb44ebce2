"""The user's own defaults for the `sparkwatch` command line, so a lab can make every run strict without
editing each script: ``$SPARKWATCH_CONFIG``, else ``$XDG_CONFIG_HOME/sparkwatch/config.toml`` (``~/.config``
when unset). A missing default file is no error; a named one that is missing, malformed or holds an
unknown key is."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkwatch_agent.shared.strict_text import TextFormatError, loads_toml
from sparkwatch_agent.shared.user_files import read_file_bytes

ENV_CONFIG = "SPARKWATCH_CONFIG"


class SettingsError(Exception):
    """A config file that cannot be used; the message names it and the key."""


@dataclass(frozen=True, slots=True)
class Settings:
    strict: bool = False  # `run` and `demo` exit non-zero when the measurement is not sound


def settings_path(env: Mapping[str, str]) -> tuple[Path, bool]:
    """Where the settings are read from, and whether the user named that file."""
    if env.get(ENV_CONFIG):
        return Path(env[ENV_CONFIG]), True
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "sparkwatch" / "config.toml", False


def load_settings(env: Mapping[str, str] = os.environ) -> Settings:
    path, named = settings_path(env)
    try:
        text = read_file_bytes(path)
    except FileNotFoundError:
        if named:
            raise SettingsError(f"{ENV_CONFIG}={path}: no such file") from None
        return Settings()
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = loads_toml(text)
    except TextFormatError as exc:
        raise SettingsError(f"{path}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"strict"})
    if unknown:
        raise SettingsError(f"{path}: unknown key(s) {', '.join(unknown)} (known: strict)")
    strict = data.get("strict", False)
    if not isinstance(strict, bool):
        raise SettingsError(f"{path}: strict must be true or false, got {strict!r}")
    return Settings(strict=strict)
