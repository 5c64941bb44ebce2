"""HTTP pieces both distributions use: JSON errors, the bearer-token middleware, and bind-or-fail."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sparkwatch_agent.shared.auth import bearer_ok

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BindError(Exception):
    """A server could not listen where it was asked to (port in use, bad address); one line for the user."""


def json_error(status: int, error: str, reason: Any) -> web.Response:
    """Every refusal the servers send: a status, a short error code and a reason people can act on."""
    return web.json_response({"error": error, "reason": reason}, status=status)


def bearer_middleware(
    token: str | None, protected: Callable[[str], bool]
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """401 with a JSON reason for a protected path without the right bearer token (none configured: open)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            token is not None
            and protected(request.path)
            and not bearer_ok(request.headers.get("Authorization"), token)
        ):
            return json_error(401, "unauthorized", "send 'Authorization: Bearer <token>' (see --token-file)")
        return await handler(request)

    return check


async def start_site(runner: web.AppRunner, host: str, port: int) -> str:
    """Set the runner up and listen on host:port (0: any free port); returns its ``http://`` URL. A port in
    use or a bad address is a :class:`BindError`, with the runner already cleaned up."""
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise BindError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound_host, bound_port = runner.addresses[0][:2]
    return f"http://[{bound_host}]:{bound_port}" if ":" in bound_host else f"http://{bound_host}:{bound_port}"
