"""The files a nodes file names (agent tokens, meter and engine secrets, SSH keys, known_hosts): what no
output of a command that reads it may replace (`run -o a1.token` wrote the export over an agent's token)."""

from __future__ import annotations

from pathlib import Path

from sparkwatch.links.nodes_file import NodesFileError, load_nodes_file


def named_files(path: Path) -> dict[Path, str]:
    """Each file ``path`` names, resolved, with what it is; none when the file cannot be read or parsed (its
    own load, later, says why)."""
    try:
        nodes_file = load_nodes_file(path)
    except NodesFileError:
        return {}
    named: list[tuple[str, Path | None]] = []
    for node in nodes_file.nodes:
        where = f"nodes.{node.name}"
        named += [(f"{where}.token_file", node.token_file), (f"{where}.known_hosts", node.known_hosts)]
        named += [(f"{where}.client_keys", key) for key in node.client_keys]
        if node.meter is not None:
            named += [(f"{where}.meter.password_file", node.meter.password_file)]
            named += [(f"{where}.meter.bearer_token_file", node.meter.bearer_token_file)]
    if nodes_file.engine is not None:
        named += [("engine.bearer_token_file", nodes_file.engine.bearer_token_file)]
    return {file.resolve(): f"{key}, a file the nodes file names" for key, file in named if file is not None}
