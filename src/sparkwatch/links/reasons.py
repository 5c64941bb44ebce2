"""What a link says when a node's address does not give it an agent's answers: a refused token, another
sparkwatch service, something that is no agent at all (a 404, a web page, bytes that are not HTTP), a
session's end in words. Each names the nodes.toml setting to check."""

from __future__ import annotations

import aiohttp

from sparkwatch.http_reasons import unreachable_reason
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.links.state import LinkError
from sparkwatch_agent.config import DEFAULT_LISTEN


def unauthorized_reason(spec: NodeSpec) -> str:
    """Why an agent answered 401, naming the token file this node sent (or that it sent none): the two
    mistakes are fixed in different places."""
    if spec.token_file is None:
        return "the agent requires a token (HTTP 401) and none is set; check token_file in nodes.toml"
    return f"the agent refused the token in {spec.token_file} (HTTP 401); check token_file in nodes.toml"


def not_an_agent(spec: NodeSpec, service: str) -> str:
    """Why a node's address is refused when another sparkwatch service answers there (a coordinator's
    port in nodes.toml): the setting to fix, in URL or SSH tunnel mode."""
    return f"a {service} answers at {where(spec)}, not an agent: check nodes.toml{AGENT_PORT}"


def where(spec: NodeSpec) -> str:
    """The nodes.toml setting that names where the agent is: its url, or the port an SSH tunnel reaches."""
    return f"url {spec.url}" if spec.url is not None else f"agent_port {spec.agent_port}"


AGENT_PORT = f" (an agent listens on {DEFAULT_LISTEN.rsplit(':', 1)[1]} unless its --listen says otherwise)"


def no_agent(spec: NodeSpec, what: str) -> LinkError:
    """An answer to /v1/time no agent gives (a 404, a web page, bytes that are not HTTP): what it was."""
    return LinkError(f"{what}: no sparkwatch agent answers at {where(spec)}; check nodes.toml{AGENT_PORT}")


def session_failure(exc: BaseException) -> str:
    """A session's end in one line: our own errors as they say it, aiohttp's and the system's in words."""
    if isinstance(exc, LinkError):
        return str(exc)
    if isinstance(exc, aiohttp.ClientError):
        return unreachable_reason(exc)
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
