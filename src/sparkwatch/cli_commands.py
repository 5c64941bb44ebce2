"""Where each `sparkwatch` subcommand's handler lives, and which exceptions are a user's mistake: both by
name, so that `main` imports only the module of the command given (`runs` and `export` never load the
coordinator's stack, `--help` loads none of it) and still knows every error class that could reach it."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import cast

Handler = Callable[[argparse.Namespace, argparse.ArgumentParser], int]

#: Command → ``module:function``.
COMMANDS: Mapping[str, str] = MappingProxyType(
    {
        "coordinator": "sparkwatch.cli_services:cmd_coordinator",
        "schema": "sparkwatch.cli_handlers:cmd_schema",
        "demo": "sparkwatch.cli_services:cmd_demo",
        "proxy": "sparkwatch.cli_services:cmd_proxy",
        "run": "sparkwatch.cli_run:cmd_run",
        "import": "sparkwatch.cli_handlers:cmd_import",
        "attach": "sparkwatch.cli_handlers:cmd_attach",
        "report": "sparkwatch.commands.report_cmd:cmd_report",
        "hardware": "sparkwatch.cli_services:cmd_hardware",
        "sim-model": "sparkwatch.cli_services:cmd_sim_model",
        "nodes": "sparkwatch.cli_services:cmd_nodes",
        "runs": "sparkwatch.commands.runs:cmd_runs",
        "export": "sparkwatch.commands.export_cmd:cmd_export",
    }
)
#: The errors a user can cause (a bad file, flag, answer or place): one line and exit code 2.
USER_ERRORS: tuple[tuple[str, str], ...] = (
    ("sparkwatch.links.nodes_file", "NodesFileError"),
    ("sparkwatch.store", "StoreError"),
    ("sparkwatch_agent.config", "ConfigError"),
    ("sparkwatch_agent.shared.auth", "AuthConfigError"),
    ("sparkwatch.links.state", "LinkError"),
    ("sparkwatch.client", "CoordinatorError"),
    ("sparkwatch_agent.shared.http", "BindError"),
    ("sparkwatch.proxy.proxy", "ProxyConfigError"),
    ("sparkwatch.commands.run_options", "RunCommandError"),
    ("sparkwatch.outputs", "OutputError"),
    ("sparkwatch.importers", "ImportFormatError"),
    ("sparkwatch.commands.attach", "AttachError"),
    ("sparkwatch.commands.hardware", "HardwareError"),
    ("sparkwatch.commands.demo", "DemoError"),
    ("sparkwatch.commands.sim_drive", "SimDriveError"),
    ("sparkwatch.settings", "SettingsError"),
    ("sparkwatch.coordinator.remote_write.spec", "RemoteWriteError"),
    ("sparkwatch.commands.export_cmd", "ExportCommandError"),
    ("sparkwatch.commands.report_cmd", "ReportError"),
    ("sparkwatch.commands.export_file", "ExportFileError"),
)


def handler(command: str) -> Handler:
    module, name = COMMANDS[command].split(":")
    return cast(Handler, getattr(importlib.import_module(module), name))


def is_user_error(exc: BaseException) -> bool:
    """One of :data:`USER_ERRORS`: only a module already imported can have raised its class."""
    for module, name in USER_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(exc, getattr(loaded, name)):
            return True
    return False


def damage_said(exc: BaseException, path: object) -> str | None:
    """A damaged SQLite file's one line (store/tx.py), naming ``path`` where it is known; None for anything
    else. Only a loaded store module can have met one."""
    tx = sys.modules.get("sparkwatch.store.tx")
    corrupt = None if tx is None else tx.corrupt_or_none(exc, path)
    return None if corrupt is None else str(corrupt)
