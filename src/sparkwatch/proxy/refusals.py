"""The proxy's own refusals (a bad phase header, a body over the limit, an upstream that did not answer),
shaped as an OpenAI-compatible server's errors: ``{"error": {"message", "type", "param", "code"}}``. The
client is an OpenAI client, which reads ``error.message``; the coordinator API's ``{"error": code,
"reason"}`` left it the bare code ("bad_gateway") and lost why."""

from __future__ import annotations

from aiohttp import web


def openai_error(status: int, code: str, message: str) -> web.Response:
    body = {"error": {"message": message, "type": code, "param": None, "code": code}}
    return web.json_response(body, status=status)
