"""The CLI's client sends the token its file holds at each request: a `run` of hours outlived a rotated
API token (its windows and its end refused with 401, the run left open, the 401 naming a file that by
then held the right token)."""

from __future__ import annotations

import pathlib

from aiohttp import web
from aiohttp.test_utils import TestServer

from sparkwatch.client import CoordinatorClient, CoordinatorTarget


def write_token(path: pathlib.Path, token: str) -> None:
    staged = path.with_name(path.name + ".new")
    staged.write_text(token + "\n")
    staged.chmod(0o600)
    staged.replace(path)


async def test_a_rotated_token_file_is_sent_from_the_next_request_on(tmp_path: pathlib.Path) -> None:
    sent: list[str | None] = []

    async def runs(request: web.Request) -> web.Response:
        sent.append(request.headers.get("Authorization"))
        return web.json_response({"runs": []})

    app = web.Application()
    app.router.add_get("/v1/runs", runs)
    server = TestServer(app)
    await server.start_server()
    token_file = tmp_path / "api.token"
    write_token(token_file, "first-api-token-0123456789")
    try:
        target = CoordinatorTarget.resolve(str(server.make_url("")), token_file, environ={})
        async with CoordinatorClient(target) as client:
            await client.runs()
            write_token(token_file, "second-api-token-0123456789")
            await client.runs()
            token_file.chmod(0o644)  # not a valid token file any more: the one in force stays
            await client.runs()
    finally:
        await server.close()
    assert sent == [
        "Bearer first-api-token-0123456789",
        "Bearer second-api-token-0123456789",
        "Bearer second-api-token-0123456789",
    ]
