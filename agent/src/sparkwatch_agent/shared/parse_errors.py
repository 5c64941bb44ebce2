"""The answers aiohttp's protocol gives itself, as JSON like every other refusal.

A request aiohttp cannot parse (a method its parser does not know, a raw non-ASCII byte in the path, a line
over 8190 bytes) never reaches the application or its middlewares: the connection's ``RequestHandler``
answers it with ``handle_error``, in plain text, and logs a traceback at ERROR for each one (garbage on a
port would fill the journal). The same method answers a handler's unexpected exception with a plain 500.
Each server's connections therefore get a handler whose ``handle_error`` answers
``{"error": …, "reason": …}``, logs a refused request in one debug line and still logs a 500 with its
traceback, since that one is a bug.
"""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import ClassVar

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from sparkwatch_agent.shared.conn_guard import RefusalBody, error_and_reason

REASON_MAX_CHARS = 200


def error_code(status: int) -> str:
    """``400`` → ``bad_request``: the short code every JSON refusal carries, from the status phrase."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    return phrase.lower().replace(" ", "_").replace("-", "_")


def parser_problem(message: str) -> str:
    """The parser's message without the bytes it echoes ("Got more than 8190 bytes when reading: bytearray(
    …)", "Invalid method encountered:\\n\\n  b'FOO / HTTP/1.1'"): what went wrong, not the request again."""
    lines = message.strip().splitlines()
    return (lines[0] if lines else "").split(": ", 1)[0].rstrip(":")[:REASON_MAX_CHARS]


class _JsonErrorsHandler(RequestHandler):
    """aiohttp's connection handler with JSON error answers; no state of its own (an empty ``__slots__``),
    so an instance aiohttp made can become one (see :func:`json_protocol_errors`)."""

    __slots__ = ()
    #: The ``Server`` its answers give (see :func:`json_errors_for`); aiohttp's own names Python's and its
    #: versions, which the service's other answers never do.
    server_name: ClassVar[str | None] = None
    #: The JSON its answers are (the server's refusal shape: the proxy's is OpenAI's); a staticmethod.
    shape: ClassVar[staticmethod[[str, str], dict[str, object]]] = staticmethod(error_and_reason)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            reason = "the server failed on this request; its log has the details"
        else:
            reason = f"cannot parse the request: {parser_problem(message or 'malformed request')}"
            self.logger.debug("refused a request from %s (%d): %s", request.remote, status, reason)
        if request.writer.output_size > 0:  # a response has begun: the connection can only be dropped
            raise ConnectionError("a response was already started; cannot send the error")
        response = web.json_response(self.shape(error_code(status), reason), status=status)
        if self.server_name is not None:
            response.headers["Server"] = self.server_name
        response.force_close()
        return response


def json_errors_for(server_name: str | None, shape: RefusalBody = error_and_reason) -> type[RequestHandler]:
    """The handler class of one server's connections: its answers name ``server_name`` in ``Server``, as the
    service's others do, and are JSON of ``shape``, as its other refusals are (made once per site, not per
    connection)."""
    fields = {"__slots__": (), "server_name": server_name, "shape": staticmethod(shape)}
    return type("_JsonErrorsHandler", (_JsonErrorsHandler,), fields)


def json_protocol_errors(
    protocol: asyncio.Protocol, handler: type[RequestHandler] = _JsonErrorsHandler
) -> asyncio.Protocol:
    """``protocol`` (a server's per-connection handler) answering its own errors in JSON (``handler``: a
    class from :func:`json_errors_for`). aiohttp makes the handler itself, so its class is switched rather
    than a subclass built from aiohttp's private arguments; a handler of any other class is left as it is
    (and answers in plain text)."""
    if type(protocol) is RequestHandler:
        protocol.__class__ = handler
    return protocol
