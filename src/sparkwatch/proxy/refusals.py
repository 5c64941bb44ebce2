"""The proxy's own refusals (a bad phase header, a body over the limit, an upstream that did not answer, and
the connection guard's 503 at the connection cap and 408 for headers that never came),
shaped as an OpenAI-compatible server's errors: ``{"error": {"message", "type", "param", "code"}}``. The
client is an OpenAI client, which reads ``error.message``; the coordinator API's ``{"error": code,
"reason"}`` left it the bare code ("bad_gateway") and lost why."""

from __future__ import annotations

from aiohttp import web

#: A request line of a full URL (``POST http://host/v1/…``): what a client sends to a forward proxy, e.g. one
#: with ``HTTP_PROXY`` set to this proxy; the proxy relays paths to its one upstream (it was a 500).
ABSOLUTE_FORM_REASON = (
    "the request names a full URL, as sent to a forward proxy (HTTP_PROXY set to this proxy?); sparkwatch's"
    " proxy stands in for the server: give the client this proxy's URL as its base URL"
)


def openai_shape(code: str, message: str) -> dict[str, object]:
    """The body of an OpenAI-compatible error (also what the connection guard's 503 and 408 carry)."""
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


def openai_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(openai_shape(code, message), status=status)
